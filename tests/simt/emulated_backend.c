/*
 * emulated_backend.c — the test-only "cuda-emulated" backend module
 * (libgpucore_emulated.so, never installed): the kernel sources of kernels/
 * run on the SIMT layer (simt.cpp), behind the same op entries as the CUDA
 * module (src/backend/kernel_ops.c). Memory is host memory, 256-byte aligned like
 * cudaMalloc; streams and events are the CPU backend's worker-thread queues
 * (cpu_stream.c), so a kernel launch is a task queued in stream order, and a
 * kernel's execution error (barrier divergence, ...) is the stream's sticky
 * error, reported with the layer's message by stream_synchronize.
 *
 * libgpucore finds it through GPUCORE_EMULATED_PLUGIN (tests/meson.build sets it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend/cpu/cpu_stream.h"
#include "backend/kernel_ops.h"
#include "simt_api.h"


/* A small device: grids sized from it stay cheap to emulate, and still have many blocks. */
#define EMULATED_SM_COUNT 4

static const gpucore_plugin_host *emu_host;

static int forward_set_error(int status, const char *message)
{
    return emu_host ? (int)emu_host->set_error((gpucore_status)status, "%s", message) : status;
}

static void log_execution_error(const char *message)
{
    if (emu_host) emu_host->log(GPUCORE_LOG_ERROR, "cuda-emulated: %s", message);
}

/* ---- kernel_ops.c hooks ---- */

typedef struct emu_context { int sm_count; } emu_context;

gpucore_status kops_launch_for(void *bctx, void *s, gpucore_launch *launch)
{
    launch->stream = s;
    launch->sm_count = ((emu_context *)bctx)->sm_count;
    return GPUCORE_OK;
}

gpucore_status kops_error(int err, const char *what)
{
    gpucore_status st = err == SIMT_ERR_MEMORY_ALLOCATION ? GPUCORE_ERR_OUT_OF_MEMORY
                      : err == SIMT_ERR_NOT_SUPPORTED ? GPUCORE_ERR_NOT_SUPPORTED : GPUCORE_ERR_BACKEND;
    return emu_host->set_error(st, "%s failed on cuda-emulated (error %d): %s", what, err, simt_last_error_message());
}

/* ---- devices ---- */

static gpucore_status emu_available(char *why, size_t len)
{
    if (why && len) why[0] = '\0';
    return GPUCORE_OK;
}

static gpucore_status emu_device_count(int *count)
{
    *count = 1;
    return GPUCORE_OK;
}

static gpucore_status emu_mem_info(void *bctx, int64_t *free_bytes, int64_t *total_bytes)
{
    (void)bctx;
    long page = sysconf(_SC_PAGESIZE);
    *total_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * page;
    *free_bytes = (int64_t)sysconf(_SC_AVPHYS_PAGES) * page;
    return GPUCORE_OK;
}

static gpucore_status emu_device_properties(int index, gpucore_device_properties *p)
{
    (void)index;
    snprintf(p->name, sizeof p->name, "SIMT emulation of a CUDA device on the CPU (%d SMs, %d block threads)",
             EMULATED_SM_COUNT, simt_threads());
    p->type = GPUCORE_DEVICE_CUDA_EMULATED;
    p->index = 0;
    p->compute_major = p->compute_minor = -1;
    p->multiprocessors = EMULATED_SM_COUNT;
    p->warp_size = 32;
    emu_mem_info(NULL, &p->free_memory, &p->total_memory);
    p->l2_cache_bytes = -1;
    p->shared_memory_per_block_optin = SIMT_MAX_DYNAMIC_SMEM;
    p->clock_khz = p->memory_clock_khz = p->utilization_percent = p->temperature_c = -1;
    p->has_native_code = 1;
    p->has_ptx = 0;
    snprintf(p->pci_bus_id, sizeof p->pci_bus_id, "-");
    return GPUCORE_OK;
}

static gpucore_status emu_device_processes(int index, int64_t *pids, int64_t *used, int max, int *count)
{
    (void)index; (void)pids; (void)used; (void)max;
    *count = 0;
    return emu_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "device_get_processes: the emulated device has no processes");
}

static gpucore_status emu_can_access_peer(int a, int b, int *can)
{
    (void)a; (void)b;
    *can = 0;
    return GPUCORE_OK;
}

static gpucore_status emu_component_version(const char *component, char *buf, size_t len)
{
    if (!strcmp(component, "simt")) {
        snprintf(buf, len, "SIMT layer: ucontext fibers, %d block threads", simt_threads());
        return GPUCORE_OK;
    }
    return GPUCORE_ERR_NOT_SUPPORTED;
}

/* ---- context, memory ---- */

static gpucore_status emu_context_init(int index, void **bctx)
{
    (void)index;
    emu_context *c = calloc(1, sizeof *c);
    if (!c) return emu_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "context_create: out of host memory");
    c->sm_count = EMULATED_SM_COUNT;
    *bctx = c;
    return GPUCORE_OK;
}

static void emu_context_fini(void *bctx) { free(bctx); }

/* 256-byte aligned like cudaMalloc, and exactly `bytes` long, so under
 * AddressSanitizer a kernel that touches one element past the end is caught. */
static gpucore_status emu_raw_alloc(void *bctx, size_t bytes, void **ptr)
{
    (void)bctx;
    *ptr = NULL;
    if (posix_memalign(ptr, 256, bytes ? bytes : 1) != 0) {
        *ptr = NULL;
        return GPUCORE_ERR_OUT_OF_MEMORY;
    }
    return GPUCORE_OK;
}

static void emu_raw_free(void *bctx, void *ptr)
{
    (void)bctx;
    free(ptr);
}

/* ---- streams and events: the CPU backend's queues ---- */

static gpucore_status emu_stream_create(void *bctx, int priority, void **s)
{
    (void)bctx; (void)priority;
    return cpu_stream_create((cpu_stream **)s);
}

static void emu_stream_destroy(void *bctx, void *s)
{
    (void)bctx;
    cpu_stream_destroy(s);
    simt_forget_stream(s);
}

static gpucore_status emu_stream_synchronize(void *bctx, void *s)
{
    (void)bctx;
    gpucore_status st = cpu_stream_synchronize(s);
    if (st != GPUCORE_OK) {
        char why[1024];
        if (simt_take_stream_error(s, why, sizeof why))
            return emu_host->set_error(st, "stream_synchronize: a kernel failed on cuda-emulated: %s", why);
    }
    return st;
}

static const gpucore_backend emulated_backend_table = {
    .abi = GPUCORE_BACKEND_ABI,
    .name = "cuda-emulated",
    .type = GPUCORE_DEVICE_CUDA_EMULATED,
    .available = emu_available,
    .device_count = emu_device_count,
    .device_properties = emu_device_properties,
    .device_processes = emu_device_processes,
    .can_access_peer = emu_can_access_peer,
    .component_version = emu_component_version,
    .context_init = emu_context_init,
    .context_fini = emu_context_fini,
    .raw_alloc = emu_raw_alloc,
    .raw_free = emu_raw_free,
    .mem_info = emu_mem_info,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .stream_synchronize = emu_stream_synchronize,
    CPU_STREAM_VTABLE_SHARED
    /* Every op entry the kernel-running backends share (src/backend/kernel_ops.h). */
    KOPS_VTABLE_OPS
};

__attribute__((visibility("default"))) gpucore_status gpucore_backend_plugin_entry(const gpucore_plugin_host *host,
                                                                                  const gpucore_backend **out)
{
    if (!host || !out || host->abi != GPUCORE_BACKEND_ABI) return GPUCORE_ERR_INVALID_ARGUMENT;
    emu_host = host;
    simt_host_set(forward_set_error);
    simt_set_error_hook(log_execution_error);
    *out = &emulated_backend_table;
    return GPUCORE_OK;
}
