/*
 * cpu_backend.c — the CPU backend's vtable: host memory as device memory, copies,
 * streams (cpu_stream.c), device properties and component versions. Ops live in
 * cpu_ops.c. Every op runs as a task on the stream's worker thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cpu_internal.h"
#include "gpucore_config.h"
#if GPUCORE_HAVE_OPENBLAS
#include <cblas.h>
#endif

static gpucore_status cpu_available(char *why, size_t len)
{
    if (why && len) why[0] = '\0';
    return GPUCORE_OK;
}

static gpucore_status cpu_device_count(int *count) { *count = 1; return GPUCORE_OK; }

static void cpu_model_name(char *buf, size_t len)
{
    snprintf(buf, len, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ') colon++;
                colon[strcspn(colon, "\n")] = '\0';
                snprintf(buf, len, "%s", colon);
            }
            break;
        }
    }
    fclose(f);
}

static gpucore_status cpu_mem_info(void *bctx, int64_t *free_bytes, int64_t *total_bytes)
{
    (void)bctx;
    long page = sysconf(_SC_PAGESIZE);
    *total_bytes = (int64_t)sysconf(_SC_PHYS_PAGES) * page;
    const int64_t avail = gpucore_host_free_bytes(); /* what can still be had, not only unused pages */
    *free_bytes = avail >= 0 ? avail : (int64_t)sysconf(_SC_AVPHYS_PAGES) * page;
    return GPUCORE_OK;
}

static gpucore_status cpu_device_properties(int index, gpucore_device_properties *p)
{
    (void)index;
    cpu_model_name(p->name, sizeof p->name);
    p->type = GPUCORE_DEVICE_CPU;
    p->index = 0;
    p->compute_major = p->compute_minor = -1;
    p->multiprocessors = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    p->warp_size = 1;
    cpu_mem_info(NULL, &p->free_memory, &p->total_memory);
    p->l2_cache_bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
    p->shared_memory_per_block_optin = -1;
    p->clock_khz = p->memory_clock_khz = p->utilization_percent = p->temperature_c = -1;
    p->has_native_code = 1;
    p->has_ptx = 0;
    snprintf(p->pci_bus_id, sizeof p->pci_bus_id, "-");
    return GPUCORE_OK;
}

static gpucore_status cpu_device_processes(int index, int64_t *pids, int64_t *used, int max, int *count)
{
    (void)index; (void)pids; (void)used; (void)max;
    *count = 0;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "device_get_processes: only CUDA devices report processes");
}

static gpucore_status cpu_can_access_peer(int a, int b, int *can)
{
    (void)a; (void)b;
    *can = 0;
    return GPUCORE_OK;
}

static gpucore_status cpu_component_version(const char *component, char *buf, size_t len)
{
    if (!strcmp(component, "build")) {
        snprintf(buf, len, "%s", GPUCORE_BUILD_DESCRIPTION);
        return GPUCORE_OK;
    }
    if (!strcmp(component, "openblas")) {
#if GPUCORE_HAVE_OPENBLAS
        snprintf(buf, len, "%s", openblas_get_config());
        return GPUCORE_OK;
#else
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "this build has no OpenBLAS (a plain C GEMM is used)");
#endif
    }
    if (!strcmp(component, "openmp")) {
        cpu_thread_policy_describe(buf, len);
        return GPUCORE_OK;
    }
    return GPUCORE_ERR_NOT_SUPPORTED;
}


static gpucore_status cpu_context_init(int index, void **bctx)
{
    (void)index;
    cpu_thread_policy_apply(); /* before the first op opens a parallel region */
    cpu_context *c = calloc(1, sizeof(cpu_context));
    const char *cap = getenv("GPUCORE_CPU_PLAN_CACHE"); /* plans per context; tests shrink it */
    const long n = cap ? strtol(cap, NULL, 10) : 0;
    if (c) c->plans = cpu_plan_cache_create(n > 0 && n < 1 << 20 ? (int)n : CPU_PLAN_CACHE_CAPACITY);
    *bctx = c;
    return *bctx ? GPUCORE_OK : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "context_create: out of host memory");
}

static void cpu_context_fini(void *bctx)
{
    if (bctx) cpu_plan_cache_destroy(((cpu_context *)bctx)->plans);
    free(bctx);
}

static gpucore_status cpu_stream_priority_range(void *bctx, int *least, int *greatest)
{
    (void)bctx;
    *least = *greatest = 0; /* worker threads have no priorities */
    return GPUCORE_OK;
}

/* ---- streams ---- */

static gpucore_status cpu_stream_create_v(void *bctx, int priority, void **s)
{
    (void)bctx; (void)priority; /* CPU workers have no priorities */
    return cpu_stream_create((cpu_stream **)s);
}
static void cpu_stream_destroy_v(void *bctx, void *s) { (void)bctx; cpu_stream_destroy(s); }
static gpucore_status cpu_stream_sync_v(void *bctx, void *s) { (void)bctx; return cpu_stream_synchronize(s); }
static void cpu_stream_count_pending_v(void *bctx, void *s, uint64_t *word)
{
    (void)bctx;
    cpu_stream_count_pending(s, word);
}

GPUCORE_HIDDEN gpucore_status cpu_attention(void *bctx, const gpucore_attn_args *args, void *s); /* cpu_attention.c */
GPUCORE_HIDDEN gpucore_status cpu_transformer(void *bctx, const gpucore_tfm_args *args, void *s); /* cpu_transformer.c */

static const gpucore_backend cpu_backend_table = {
    .abi = GPUCORE_BACKEND_ABI,
    .name = "cpu",
    .type = GPUCORE_DEVICE_CPU,
    .available = cpu_available,
    .device_count = cpu_device_count,
    .device_properties = cpu_device_properties,
    .device_processes = cpu_device_processes,
    .can_access_peer = cpu_can_access_peer,
    .component_version = cpu_component_version,
    .context_init = cpu_context_init,
    .context_fini = cpu_context_fini,
    .raw_alloc = gpucore_host_memory_alloc, /* "device" memory is host memory (memory.c) */
    .raw_free = gpucore_host_memory_free,
    .mem_info = cpu_mem_info,
    .stream_create = cpu_stream_create_v,
    .stream_destroy = cpu_stream_destroy_v,
    .stream_synchronize = cpu_stream_sync_v,
    .stream_count_pending = cpu_stream_count_pending_v,
    CPU_STREAM_VTABLE_SHARED
    .copy_strided = cpu_copy_strided,
    .fill = cpu_fill,
    .random = cpu_random,
    .conv = cpu_conv,
    .matmul = cpu_matmul,
    .elementwise = cpu_elementwise,
    .reduce = cpu_reduce,
    .rows = cpu_rows,
    .quant = cpu_quant,
    .quant_matmul = cpu_quant_matmul,
    .optim_step = cpu_optim_step,
    .amp_unscale = cpu_amp_unscale,
    .amp_update = cpu_amp_update,
    .clip_grad_norm = cpu_clip_grad_norm,
    .comm_init = cpu_comm_init,
    .comm_init_local = cpu_comm_init_local,
    .comm_enqueue = cpu_comm_enqueue,
    .comm_check = cpu_comm_check,
    .comm_abort = cpu_comm_abort,
    .comm_destroy = cpu_comm_destroy,
    .host_alloc = gpucore_host_memory_alloc, /* and so is "pinned" memory */
    .host_free = gpucore_host_memory_free,
    .stream_priority_range = cpu_stream_priority_range,
    .attention = cpu_attention,
    .transformer = cpu_transformer,
};

const gpucore_backend *gpucore_cpu_backend(void) { return &cpu_backend_table; }
