/*
 * cuda_device.c — what the CUDA backend can tell about the machine: whether a
 * driver and device are usable (and if not, exactly why), device properties,
 * NVML telemetry (loaded with dlopen, as NVML ships with the driver), and the
 * versions of the CUDA libraries found at run time.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include "cuda_internal.h"
#include "gpucore_config.h"
#include "cuda_dynlib.h"

/* ---- availability ---- */

static int version_major(int v) { return v / 1000; }
static int version_minor(int v) { return (v % 1000) / 10; }

gpucore_status cuda_available(char *why, size_t len)
{
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!libcuda) libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        snprintf(why, len, "no NVIDIA driver found (libcuda.so.1 could not be loaded). Install the NVIDIA driver, or "
                           "use the CPU backend (GPUCORE_DEVICE=cpu)");
        return GPUCORE_ERR_BACKEND_UNAVAILABLE;
    }
    /* Keep libcuda loaded: the runtime uses it from here on. */
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (driver < runtime) {
        snprintf(why, len,
                 "the NVIDIA driver supports CUDA %d.%d but this build uses the CUDA %d.%d runtime; install a driver "
                 "that supports CUDA %d.%d or newer",
                 version_major(driver), version_minor(driver), version_major(runtime), version_minor(runtime),
                 version_major(runtime), version_minor(runtime));
        return GPUCORE_ERR_BACKEND_UNAVAILABLE;
    }
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        if (cvd)
            snprintf(why, len, "no CUDA device is visible: CUDA_VISIBLE_DEVICES=\"%s\" hides them (%s)", cvd,
                     cudaGetErrorString(err));
        else
            snprintf(why, len, "the driver (CUDA %d.%d) found no CUDA device (%s)", version_major(driver),
                     version_minor(driver), cudaGetErrorString(err));
        cudaGetLastError();
        return GPUCORE_ERR_BACKEND_UNAVAILABLE;
    }
    if (len) why[0] = '\0';
    return GPUCORE_OK;
}

gpucore_status cuda_device_count(int *count)
{
    *count = 0;
    cudaError_t err = cudaGetDeviceCount(count);
    if (err != cudaSuccess) { cudaGetLastError(); *count = 0; }
    return GPUCORE_OK;
}

/* ---- NVML, resolved at run time ---- */

typedef int (*nvml_fn_void)(void);
typedef struct nvml_api {
    int loaded;
    void *lib;
    int (*init)(void);
    int (*get_handle_by_pci)(const char *, void **);
    int (*get_utilization)(void *, unsigned *);
    int (*get_temperature)(void *, int, unsigned *);
    int (*get_clock)(void *, int, unsigned *);
    int (*get_processes)(void *, unsigned *, void *);
    int (*get_memory)(void *, void *);
    int (*driver_version)(char *, unsigned);
} nvml_api;

static nvml_api nvml;

static int nvml_load(void)
{
    if (nvml.loaded) return nvml.lib != NULL;
    nvml.loaded = 1;
    nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nvml.lib) return 0;
    nvml.init = (int (*)(void))dlsym(nvml.lib, "nvmlInit_v2");
    nvml.get_handle_by_pci = (int (*)(const char *, void **))dlsym(nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.get_utilization = (int (*)(void *, unsigned *))dlsym(nvml.lib, "nvmlDeviceGetUtilizationRates");
    nvml.get_temperature = (int (*)(void *, int, unsigned *))dlsym(nvml.lib, "nvmlDeviceGetTemperature");
    nvml.get_clock = (int (*)(void *, int, unsigned *))dlsym(nvml.lib, "nvmlDeviceGetClockInfo");
    nvml.get_processes = (int (*)(void *, unsigned *, void *))dlsym(nvml.lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    nvml.driver_version = (int (*)(char *, unsigned))dlsym(nvml.lib, "nvmlSystemGetDriverVersion");
    nvml.get_memory = (int (*)(void *, void *))dlsym(nvml.lib, "nvmlDeviceGetMemoryInfo");
    if (!nvml.init || !nvml.get_handle_by_pci || nvml.init() != 0) {
        dlclose(nvml.lib);
        nvml.lib = NULL;
        return 0;
    }
    return 1;
}

static void *nvml_device(const char *pci_bus_id)
{
    void *dev = NULL;
    if (!nvml_load() || nvml.get_handle_by_pci(pci_bus_id, &dev) != 0) return NULL;
    return dev;
}

/* nvmlMemory_t (v1): total, free, used bytes. */
typedef struct nvml_memory { unsigned long long total, free, used; } nvml_memory;

/* nvmlProcessInfo_t (v2/v3 layout): pid, usedGpuMemory, gpuInstanceId, computeInstanceId. */
typedef struct nvml_process_info { unsigned pid; unsigned long long used; unsigned gi, ci; } nvml_process_info;

gpucore_status cuda_device_processes(int index, int64_t *pids, int64_t *used, int max, int *count)
{
    char bus[32];
    *count = 0;
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) != cudaSuccess) {
        cudaGetLastError();
        return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "device_get_processes: no CUDA device %d", index);
    }
    void *dev = nvml_device(bus);
    if (!dev || !nvml.get_processes)
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                    "device_get_processes: NVML (libnvidia-ml.so.1, part of the driver) is not available");
    nvml_process_info infos[64];
    unsigned n = 64;
    if (nvml.get_processes(dev, &n, infos) != 0)
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "device_get_processes: NVML could not list processes");
    for (unsigned i = 0; i < n && (int)i < max; i++) {
        pids[i] = infos[i].pid;
        used[i] = (int64_t)infos[i].used;
    }
    *count = (int)n;
    return GPUCORE_OK;
}

/* ---- properties ---- */

/* Architectures this module carries code for, from the build (e.g. "80,90" and "90"). */
static int arch_in_list(const char *list, int cc, int allow_lower_minor_same_major)
{
    const char *p = list;
    while (*p) {
        int arch = atoi(p);
        if (arch == cc) return 1;
        if (allow_lower_minor_same_major && arch / 10 == cc / 10 && arch <= cc) return 1;
        if (!allow_lower_minor_same_major && arch <= cc) return 1;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return 0;
}

gpucore_status cuda_device_properties(int index, gpucore_device_properties *p)
{
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    snprintf(p->name, sizeof p->name, "%s", prop.name);
    p->type = GPUCORE_DEVICE_CUDA;
    p->index = index;
    p->compute_major = prop.major;
    p->compute_minor = prop.minor;
    p->multiprocessors = prop.multiProcessorCount;
    p->warp_size = prop.warpSize;
    p->total_memory = (int64_t)prop.totalGlobalMem;
    p->l2_cache_bytes = prop.l2CacheSize;
    p->shared_memory_per_block_optin = (int64_t)prop.sharedMemPerBlockOptin;
    int cc = prop.major * 10 + prop.minor;
    p->has_native_code = arch_in_list(GPUCORE_CUDA_SASS_ARCHS, cc, 1);
    p->has_ptx = arch_in_list(GPUCORE_CUDA_PTX_ARCHS, cc, 0);
    snprintf(p->pci_bus_id, sizeof p->pci_bus_id, "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID,
             prop.pciDeviceID);
    p->clock_khz = p->memory_clock_khz = p->utilization_percent = p->temperature_c = -1;
    /* Free memory from NVML: asking the runtime (cudaMemGetInfo) needs the device current, which creates its
     * primary context, hundreds of MiB on every GPU a listing touches. -1 without NVML. */
    p->free_memory = -1;
    void *dev = nvml_device(p->pci_bus_id);
    if (dev) {
        nvml_memory m;
        if (nvml.get_memory && nvml.get_memory(dev, &m) == 0) p->free_memory = (int64_t)m.free;
        unsigned v[2];
        if (nvml.get_utilization && nvml.get_utilization(dev, v) == 0) p->utilization_percent = (int32_t)v[0];
        if (nvml.get_temperature && nvml.get_temperature(dev, 0 /* GPU sensor */, v) == 0) p->temperature_c = (int32_t)v[0];
        if (nvml.get_clock && nvml.get_clock(dev, 1 /* SM */, v) == 0) p->clock_khz = (int32_t)(v[0] * 1000);
        if (nvml.get_clock && nvml.get_clock(dev, 2 /* MEM */, v) == 0) p->memory_clock_khz = (int32_t)(v[0] * 1000);
    }
    return GPUCORE_OK;
}

gpucore_status cuda_can_access_peer(int a, int b, int *can)
{
    *can = 0;
    CUDA_TRY(cudaDeviceCanAccessPeer(can, a, b), "cudaDeviceCanAccessPeer");
    return GPUCORE_OK;
}

/* cudaDeviceEnablePeerAccess acts from the current device; the already-enabled return is not a
 * failure for us, but the runtime also leaves it as the thread's last error: clear it, or the
 * next cudaGetLastError after a kernel launch would report it. */
gpucore_status cuda_enable_peer_access(int device, int peer)
{
    CUDA_TRY(cudaSetDevice(device), "cudaSetDevice");
    cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        return GPUCORE_OK;
    }
    CUDA_TRY(e, "cudaDeviceEnablePeerAccess");
    return GPUCORE_OK;
}

/* ---- component versions ---- */

gpucore_status cuda_component_version(const char *component, char *buf, size_t len)
{
    if (!strcmp(component, "cuda_driver")) {
        int v = 0;
        cudaDriverGetVersion(&v);
        if (!v) return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "no NVIDIA driver is installed");
        char nv[96] = "";
        if (nvml_load() && nvml.driver_version) nvml.driver_version(nv, sizeof nv);
        snprintf(buf, len, "CUDA %d.%d%s%s", version_major(v), version_minor(v), nv[0] ? ", driver " : "", nv);
        return GPUCORE_OK;
    }
    if (!strcmp(component, "cuda_runtime")) {
        int v = 0;
        cudaRuntimeGetVersion(&v);
        snprintf(buf, len, "%d.%d", version_major(v), version_minor(v));
        return GPUCORE_OK;
    }
    if (!strcmp(component, "cublas")) {
        size_t v = cublasLtGetVersion();
        snprintf(buf, len, "cuBLASLt %zu.%zu.%zu", v / 10000, (v / 100) % 100, v % 100);
        return GPUCORE_OK;
    }
    if (!strcmp(component, "cudnn")) {
#if GPUCORE_HAVE_CUDNN
        gpucore_status ld = cuda_cudnn_load("component_version");
        if (ld) return ld;
        size_t v = DNN.cudnnGetVersion();
        snprintf(buf, len, "%zu.%zu.%zu", v / 10000, (v / 100) % 100, v % 100);
        return GPUCORE_OK;
#else
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "this build has no cuDNN (meson -Dcudnn=enabled)");
#endif
    }
    if (!strcmp(component, "nccl")) {
#if GPUCORE_HAVE_NCCL
        gpucore_status ld = cuda_nccl_load("component_version");
        if (ld) return ld;
        int v = 0;
        NCCL.ncclGetVersion(&v);
        snprintf(buf, len, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
        return GPUCORE_OK;
#else
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "this build has no NCCL (meson -Dnccl=enabled)");
#endif
    }
    if (!strcmp(component, "nvml")) {
        if (!nvml_load()) return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "NVML (libnvidia-ml.so.1) is not available");
        snprintf(buf, len, "libnvidia-ml.so.1");
        return GPUCORE_OK;
    }
    return cuda_host->set_error(GPUCORE_ERR_INVALID_ARGUMENT, "component_version: unknown component '%s'", component);
}
