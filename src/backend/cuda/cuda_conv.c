/*
 * cuda_conv.c — convolution on cuDNN 9's graph (backend) API, with a bounded,
 * thread-safe LRU cache of execution plans and three ways to pick an engine.
 *
 * One call: look the plan key up (op, dtype, dims, strides, layout, stride/pad/
 * dilation/groups, algorithm mode, TF32, bias/ReLU, pointer alignment, device);
 * on a miss build the operation graph (convolution, plus bias-add and ReLU
 * pointwise nodes for a fused forward), ask the heuristics (mode A, then the
 * fallback list) for engine configs, drop the ones the mode forbids
 * (non-deterministic engines in DETERMINISTIC mode; tensor-core/down-converting
 * engines for f32 when TF32 is off) and those whose workspace exceeds the limit
 * or the free memory, then keep the first that finalizes (HEURISTIC,
 * DETERMINISTIC) or the fastest of up to AUTOTUNE_MAX timed on the call's own
 * buffers (AUTOTUNE: cudnn.benchmark, paid once per key). The cached entry also
 * gets the leanest plan, searched and run instead (and logged) the first time
 * the chosen plan's workspace cannot be had from the caching allocator. A fused graph
 * no engine takes falls back to convolution + the elementwise kernel.
 *
 * Only backend-API calls are used (cudnn_graph.h), so a build with
 * -DCUDNN_WARN_DEPRECATED stays warning-free. Each device has two cuDNN
 * handles: one executions are enqueued with, under a mutex held while binding
 * it to a stream and enqueueing (cudnnBackendExecute does not wait for the
 * GPU), and one plans are built with under a second mutex, so a slow first
 * plan does not hold up convolutions already planned. An entry evicted from the
 * cache keeps its plans until the events recorded after their last executions
 * have passed.
 */
#include "gpucore_config.h"
#include "cuda_internal.h"

#if GPUCORE_HAVE_CUDNN
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* cuDNN through the loader's table (DNN.cudnn...): cuDNN is opened on the first convolution.
 * The header itself declares a deprecated type (cudnnQueryRuntimeError's tag); cuda_dynlib.h includes it with
 * that warning silenced, so only our own uses trip -DCUDNN_WARN_DEPRECATED. */
#include "cuda_conv_graph.h"
#include "cuda_use_marks.h"
#include "backend/kernel_ops.h"
#include "core/mono_clock.h"
#include "elementwise_math.h"

#define MAX_DEVICES 64
#define PLAN_CAPACITY 512
#define AUTOTUNE_MAX 8
#define AUTOTUNE_REPS 3

typedef struct plan_key {
    int32_t op, dtype, layout, algo, tf32, relu, has_bias, device;
    int32_t align_x, align_w, align_y, align_b;
    int64_t workspace_limit;
    int64_t dims[16];
    int64_t strides[12];
} plan_key;

typedef struct plan_entry {
    plan_key key;
    cudnnBackendDescriptor_t plan, lean; /* lean: the smallest-workspace plan, built only when needed */
    int64_t ws_bytes, lean_ws_bytes;
    int fused;                           /* bias/ReLU are inside the plan */
    int lean_tried;                      /* the lean search ran (under build_lock) */
    int refs;                            /* the table's reference + callers holding it */
    uint64_t last_use;
    /* where its plans may still run (under the device's handle_lock; read alone once refs is 0):
     * destruction waits for these events */
    cuda_use_marks uses;
    struct plan_entry *next_dead;        /* on the graveyard: released, plans still in flight */
} plan_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static plan_entry *cache[PLAN_CAPACITY];
static plan_entry *graveyard;            /* under cache_lock */
static uint64_t cache_tick;
static gpucore_conv_stats dev_stats[MAX_DEVICES];

/* Per device: the handle executions are enqueued with (handle_lock: binding it to a stream and enqueueing),
 * and a second handle plans are searched and built with (build_lock), so a first call that finalizes
 * engines (0.1-1 s each when runtime-compiled) does not hold up other threads' convolutions.
 * cuDNN handles may not be used by two threads at once; a plan runs on any handle of its device. */
static pthread_mutex_t handle_lock[MAX_DEVICES], build_lock[MAX_DEVICES];
static cudnnHandle_t handles[MAX_DEVICES], build_handles[MAX_DEVICES];
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;
static void init_locks(void)
{
    for (int i = 0; i < MAX_DEVICES; i++) {
        pthread_mutex_init(&handle_lock[i], NULL);
        pthread_mutex_init(&build_lock[i], NULL);
    }
}

/* A handle of the device in *slot, created on first use. Caller holds the lock that guards the slot. */
static gpucore_status device_handle(int dev, cudnnHandle_t *slot, cudnnHandle_t *out)
{
    if (!*slot) {
        CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
        cudnnStatus_t s = DNN.cudnnCreate(slot);
        if (s != CUDNN_STATUS_SUCCESS) { *slot = NULL; return conv_dnn_error(s, "cudnnCreate"); }
    }
    *out = *slot;
    return GPUCORE_OK;
}

/* Median-free timing: the best of AUTOTUNE_REPS runs after one warm-up, in ms (< 0: failed). */
static float time_plan(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const gpucore_conv_desc *d, int fused,
                       int64_t ws_bytes, cudaStream_t stream)
{
    void *ws = NULL;
    if (ws_bytes > 0 && d->ws.alloc(d->ws.ws_ctx, ws_bytes, &ws)) return -1.0f;
    const cudaError_t pending = cudaPeekAtLastError(); /* someone else's: left for them to read */
    cudaEvent_t a = NULL, b = NULL;
    float best = -1.0f;
    if (cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
        conv_execute(h, plan, d, fused, ws, stream) == GPUCORE_OK) {
        for (int i = 0; i < AUTOTUNE_REPS; i++) {
            float ms = 0;
            cudaEventRecord(a, stream);
            if (conv_execute(h, plan, d, fused, ws, stream)) { best = -1.0f; break; }
            cudaEventRecord(b, stream);
            if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
                best = -1.0f;
                break;
            }
            if (best < 0 || ms < best) best = ms;
        }
    }
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    if (pending == cudaSuccess) cudaGetLastError(); /* a failed timing call's error is ours: the plan is skipped */
    if (ws) d->ws.release(d->ws.ws_ctx, ws);
    return best;
}

enum { SEARCH_FIRST, SEARCH_FASTEST, SEARCH_LEANEST };
typedef struct search_result {
    cudnnBackendDescriptor_t plan;
    int64_t ws;
    int timed, skipped_ws;
    float best_ms;
} search_result;

/* One plan for graph's configs: the first usable one (heuristic/deterministic: one finalize when the best
 * config fits), the fastest of up to AUTOTUNE_MAX usable ones, or the one needing the least workspace.
 * h: the build handle (caller holds build_lock). */
static void search(cudnnHandle_t h, cudnnBackendDescriptor_t graph, const gpucore_conv_desc *d, int fused, int want,
                   int64_t limit, cudaStream_t stream, search_result *r)
{
    memset(r, 0, sizeof *r);
    r->best_ms = -1.0f;
    cudnnBackendDescriptor_t cfgs[64];
    int64_t n = conv_heuristic_configs(graph, CUDNN_HEUR_MODE_A, cfgs, 32);
    n += conv_heuristic_configs(graph, CUDNN_HEUR_MODE_FALLBACK, cfgs + n, 64 - n);
    for (int64_t i = 0; i < n; i++) {
        if (!conv_config_allowed(cfgs[i], d)) continue;
        int64_t ws = 0;
        cudnnBackendDescriptor_t plan = conv_make_plan(h, cfgs[i], &ws);
        if (!plan) continue;
        int keep = 0;
        if (ws > limit) {
            r->skipped_ws++;
        } else if (want == SEARCH_FASTEST) {
            float ms = time_plan(h, plan, d, fused, ws, stream);
            r->timed++;
            keep = ms >= 0 && (r->best_ms < 0 || ms < r->best_ms);
            if (keep) r->best_ms = ms;
        } else {
            keep = !r->plan || ws < r->ws; /* SEARCH_FIRST stops below at the first */
        }
        if (keep) {
            if (r->plan) DNN.cudnnBackendDestroyDescriptor(r->plan);
            r->plan = plan;
            r->ws = ws;
        } else {
            DNN.cudnnBackendDestroyDescriptor(plan);
        }
        if (r->plan && (want == SEARCH_FIRST || (want == SEARCH_LEANEST && r->ws == 0))) break;
        if (want == SEARCH_FASTEST && r->timed >= AUTOTUNE_MAX) break;
    }
    for (int64_t i = 0; i < n; i++) DNN.cudnnBackendDestroyDescriptor(cfgs[i]);
}

/* Build the entry for d's key with the build handle (caller holds build_lock). */
static gpucore_status build_entry(cudnnHandle_t h, const gpucore_conv_desc *d, cudaStream_t stream, plan_entry *e)
{
    gpucore_status st = GPUCORE_OK;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    int64_t limit = d->workspace_limit > 0 ? d->workspace_limit : (int64_t)free_b;
    const int autotune = d->algo == GPUCORE_CONV_ALGO_AUTOTUNE;
    for (int fused = (d->op == GPUCORE_CONV_OP_FORWARD && (d->bias || d->relu)); fused >= 0; fused--) {
        cudnnBackendDescriptor_t graph = NULL;
        if ((st = conv_build_graph(h, d, fused, &graph))) {
            if (fused) continue; /* the fused graph is optional */
            return st;
        }
        search_result r;
        double t0 = gpucore_clock_ms();
        search(h, graph, d, fused, autotune ? SEARCH_FASTEST : SEARCH_FIRST, limit, stream, &r);
        DNN.cudnnBackendDestroyDescriptor(graph);
        if (autotune && r.timed) {
            pthread_mutex_lock(&cache_lock);
            dev_stats[d->device].autotune_runs++;
            dev_stats[d->device].autotune_candidates += r.timed;
            dev_stats[d->device].autotune_ms += gpucore_clock_ms() - t0;
            pthread_mutex_unlock(&cache_lock);
            cuda_host->log(GPUCORE_LOG_INFO, "conv: autotuned %d engines in %.1f ms; fastest %.3f ms", r.timed,
                           gpucore_clock_ms() - t0, r.best_ms);
        }
        if (r.skipped_ws)
            cuda_host->log(GPUCORE_LOG_INFO, "conv: passed over %d engines needing more than %lld workspace bytes",
                           r.skipped_ws, (long long)limit);
        if (r.plan) {
            e->plan = r.plan;
            e->ws_bytes = r.ws;
            e->fused = fused;
            return GPUCORE_OK;
        }
    }
    return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED,
                                "conv: cuDNN has no %sengine for this convolution (%s, n %lld c %lld %lldx%lld, k %lld "
                                "%lldx%lld, groups %lld)%s",
                                d->algo == GPUCORE_CONV_ALGO_DETERMINISTIC ? "deterministic " : "",
                                d->dtype == GPUCORE_F32 ? "f32" : d->dtype == GPUCORE_F16 ? "f16" : "bf16",
                                (long long)d->n, (long long)d->c, (long long)d->h, (long long)d->w, (long long)d->k,
                                (long long)d->r, (long long)d->s, (long long)d->groups,
                                d->workspace_limit > 0 ? "; a larger workspace_limit may help" : "");
}

/* The entry's leanest plan (workspace the least, zero when an engine needs none), searched the first time the
 * chosen plan's workspace cannot be had. NULL plan if there is none. */
static void lean_plan(const gpucore_conv_desc *d, plan_entry *e, cudaStream_t stream, cudnnBackendDescriptor_t *plan,
                      int64_t *ws)
{
    const int dev = d->device;
    pthread_mutex_lock(&build_lock[dev]);
    cudnnHandle_t h = NULL;
    if (!e->lean_tried && device_handle(dev, &build_handles[dev], &h) == GPUCORE_OK) {
        e->lean_tried = 1;
        cudnnBackendDescriptor_t graph = NULL;
        if (conv_build_graph(h, d, e->fused, &graph) == GPUCORE_OK) {
            search_result r;
            search(h, graph, d, e->fused, SEARCH_LEANEST, INT64_MAX, stream, &r);
            DNN.cudnnBackendDestroyDescriptor(graph);
            e->lean = r.plan;
            e->lean_ws_bytes = r.ws;
        }
    }
    *plan = e->lean;
    *ws = e->lean_ws_bytes;
    pthread_mutex_unlock(&build_lock[dev]);
}

static void key_of(const gpucore_conv_desc *d, plan_key *k)
{
    memset(k, 0, sizeof *k);
    k->op = d->op; k->dtype = d->dtype; k->layout = d->layout; k->algo = d->algo;
    k->tf32 = d->dtype == GPUCORE_F32 ? d->allow_tf32 : 0;
    k->relu = d->relu; k->has_bias = d->bias != NULL; k->device = d->device;
    k->align_x = conv_align_of(d->x); k->align_w = conv_align_of(d->wt); k->align_y = conv_align_of(d->y);
    k->align_b = d->bias ? conv_align_of(d->bias) : 0;
    const int64_t dims[16] = {d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->p, d->q, d->groups, d->pad_h, d->pad_w,
                              d->stride_h, d->stride_w, d->dil_h, d->dil_w};
    memcpy(k->dims, dims, sizeof dims);
    memcpy(k->strides, d->x_strides, 4 * sizeof(int64_t));
    memcpy(k->strides + 4, d->w_strides, 4 * sizeof(int64_t));
    memcpy(k->strides + 8, d->y_strides, 4 * sizeof(int64_t));
    k->workspace_limit = d->workspace_limit; /* it filters engines, so plans differ by it */
}

static void entry_free(plan_entry *e)
{
    if (e->lean && e->lean != e->plan) DNN.cudnnBackendDestroyDescriptor(e->lean);
    if (e->plan) DNN.cudnnBackendDestroyDescriptor(e->plan);
    cuda_use_marks_release(&e->uses);
    free(e);
}

/* Free the released entries whose plans no longer run (caller holds cache_lock). */
static void graveyard_reap_locked(void)
{
    for (plan_entry **pp = &graveyard; *pp;) {
        plan_entry *e = *pp;
        if (cuda_use_marks_idle(&e->uses)) { *pp = e->next_dead; entry_free(e); }
        else pp = &e->next_dead;
    }
}

/* Drop a reference (caller holds cache_lock). The last one frees the entry once its plans' executions are done:
 * an evicted plan may still be running on a stream, so until then it waits in the graveyard,
 * checked on every lookup. */
static void entry_release_locked(plan_entry *e)
{
    if (--e->refs > 0) return;
    if (cuda_use_marks_idle(&e->uses)) { entry_free(e); return; }
    e->next_dead = graveyard;
    graveyard = e;
}

/* The cached entry for key (a reference the caller releases; cache_lock held), or NULL. */
static plan_entry *find_locked(const plan_key *key)
{
    for (int i = 0; i < PLAN_CAPACITY; i++)
        if (cache[i] && memcmp(&cache[i]->key, key, sizeof *key) == 0) {
            cache[i]->refs++;
            cache[i]->last_use = ++cache_tick;
            return cache[i];
        }
    return NULL;
}

/* The cached entry for d (a reference the caller releases), building it on a miss with the build handle,
 * outside the execution lock; a racing build of the same key keeps the entry inserted first. */
static gpucore_status lookup(const gpucore_conv_desc *d, cudaStream_t stream, plan_entry **out)
{
    plan_key key;
    key_of(d, &key);
    pthread_mutex_lock(&cache_lock);
    graveyard_reap_locked();
    plan_entry *hit = find_locked(&key);
    if (hit) dev_stats[d->device].cache_hits++;
    else dev_stats[d->device].cache_misses++;
    pthread_mutex_unlock(&cache_lock);
    if (hit) { *out = hit; return GPUCORE_OK; }

    plan_entry *e = calloc(1, sizeof *e);
    if (!e) return cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "conv: out of host memory for a plan");
    e->key = key;
    pthread_mutex_lock(&build_lock[d->device]);
    cudnnHandle_t h = NULL;
    gpucore_status st = device_handle(d->device, &build_handles[d->device], &h);
    if (!st) st = build_entry(h, d, stream, e);
    pthread_mutex_unlock(&build_lock[d->device]);
    pthread_mutex_lock(&cache_lock);
    if (st) {
        e->refs = 1;
        entry_release_locked(e);
        pthread_mutex_unlock(&cache_lock);
        return st;
    }
    if ((hit = find_locked(&key))) { /* another thread built and inserted it meanwhile */
        e->refs = 1;
        entry_release_locked(e); /* autotune timing synchronized its runs: nothing in flight */
        pthread_mutex_unlock(&cache_lock);
        *out = hit;
        return GPUCORE_OK;
    }
    int slot = -1;
    for (int i = 0; i < PLAN_CAPACITY && slot < 0; i++) if (!cache[i]) slot = i;
    if (slot < 0) { /* evict the least recently used */
        slot = 0;
        for (int i = 1; i < PLAN_CAPACITY; i++) if (cache[i]->last_use < cache[slot]->last_use) slot = i;
        dev_stats[cache[slot]->key.device].evictions++;
        entry_release_locked(cache[slot]);
    }
    e->refs = 2; /* the table's and the caller's */
    e->last_use = ++cache_tick;
    cache[slot] = e;
    pthread_mutex_unlock(&cache_lock);
    *out = e;
    return GPUCORE_OK;
}

/* Whether strides (of dims [n, k, p, q] with extents e) are exactly those of the packed layout whose dims, from
 * outermost to innermost, are order[0..3]; extents of 1 take any stride. */
static int packed_as(const int64_t e[4], const int64_t strides[4], const int order[4])
{
    int64_t want = 1;
    for (int i = 3; i >= 0; i--) {
        const int dim = order[i];
        if (e[dim] != 1 && strides[dim] != want) return 0;
        want *= e[dim];
    }
    return 1;
}

/* Bias and ReLU when no engine fused them: on a packed output (NCHW or NHWC, what the front-end allocates) the
 * row kernel of kernels/conv_epilogue.cu, with no per-element index unravel; any other
 * strides, the elementwise kernel's strided path. */
static gpucore_status unfused_epilogue(void *bctx, const gpucore_conv_desc *d, void *stream)
{
    const int64_t e[4] = {d->n, d->k, d->p, d->q};
    static const int nchw[4] = {0, 1, 2, 3}, nhwc[4] = {0, 2, 3, 1};
    const int is_nchw = packed_as(e, d->y_strides, nchw), is_nhwc = !is_nchw && packed_as(e, d->y_strides, nhwc);
    if (is_nchw || is_nhwc) {
        gpucore_conv_bias_args a;
        memset(&a, 0, sizeof a);
        a.y = d->y;
        a.bias = d->bias;
        a.dtype = d->dtype;
        a.relu = d->relu;
        a.channel_is_row = is_nchw;
        a.k = d->k;
        a.rows = is_nchw ? d->n * d->k : d->n * d->p * d->q;
        a.cols = is_nchw ? d->p * d->q : d->k;
        return kops_conv_bias_act(bctx, &a, stream);
    }
    gpucore_ew_args a;
    memset(&a, 0, sizeof a);
    gpucore_view y = {0};
    y.data = d->y;
    y.dtype = d->dtype;
    y.ndim = 4;
    y.numel = d->n * d->k * d->p * d->q;
    for (int i = 0; i < 4; i++) { y.shape[i] = e[i]; y.strides[i] = d->y_strides[i]; }
    y.elem_size = d->dtype == GPUCORE_F32 ? 4 : 2;
    y.contiguous = 0; /* not packed (packed outputs took the row kernel above) */
    a.out = y;
    a.in[0] = y;
    a.act = d->relu ? GPUCORE_ACT_RELU : GPUCORE_ACT_NONE;
    if (d->bias) {
        a.in[1] = y;
        a.in[1].data = (void *)d->bias;
        a.in[1].contiguous = 0;
        for (int i = 0; i < 4; i++) a.in[1].strides[i] = i == 1 ? 1 : 0;
        a.nin = 2;
        a.op = GPUCORE_EW_ADD;
    } else {
        a.nin = 1;
        a.op = GPUCORE_EW_ACT;
    }
    return kops_elementwise(bctx, &a, stream);
}

gpucore_status cuda_conv(void *bctx, const gpucore_conv_desc *d, void *stream)
{
    const int dev = ((cuda_context *)bctx)->device;
    if (dev < 0 || dev >= MAX_DEVICES)
        return cuda_host->set_error(GPUCORE_ERR_NOT_SUPPORTED, "conv: device %d is past the %d this build tracks", dev,
                                    MAX_DEVICES);
    gpucore_status st = cuda_cudnn_load("conv");
    if (st) return st;
    pthread_once(&handle_once, init_locks);
    CUDA_TRY(cudaSetDevice(dev), "cudaSetDevice");
    gpucore_conv_desc dd = *d;
    dd.device = dev;
    const cudaStream_t cs = (cudaStream_t)stream;
    plan_entry *e = NULL;
    if ((st = lookup(&dd, cs, &e))) return st;
    cudnnBackendDescriptor_t plan = e->plan;
    int64_t ws_bytes = e->ws_bytes;
    void *ws = NULL;
    if (ws_bytes > 0 && dd.ws.alloc(dd.ws.ws_ctx, ws_bytes, &ws)) {
        ws = NULL;
        lean_plan(&dd, e, cs, &plan, &ws_bytes);
        cuda_host->log(GPUCORE_LOG_WARN, "conv: the chosen engine's %lld-byte workspace could not be had; running "
                       "the leanest engine (%lld bytes) instead", (long long)e->ws_bytes, (long long)ws_bytes);
        pthread_mutex_lock(&cache_lock);
        dev_stats[dev].workspace_fallbacks++;
        pthread_mutex_unlock(&cache_lock);
        if (!plan)
            st = cuda_host->set_error(GPUCORE_ERR_OUT_OF_MEMORY, "conv: the engine's %lld-byte workspace could not "
                                      "be had and cuDNN offers no leaner one", (long long)e->ws_bytes);
        else if (ws_bytes > 0)
            st = (gpucore_status)dd.ws.alloc(dd.ws.ws_ctx, ws_bytes, &ws);
    }
    if (!st) {
        pthread_mutex_lock(&handle_lock[dev]);
        cudnnHandle_t h = NULL;
        st = device_handle(dev, &handles[dev], &h);
        if (!st) st = conv_execute(h, plan, &dd, e->fused, ws, cs);
        if (!st) st = cuda_use_marks_record(&e->uses, cs);
        pthread_mutex_unlock(&handle_lock[dev]);
    }
    if (ws) dd.ws.release(dd.ws.ws_ctx, ws); /* stream-ordered: reused only after this work */
    if (!st && !e->fused && dd.op == GPUCORE_CONV_OP_FORWARD && (dd.bias || dd.relu))
        st = unfused_epilogue(bctx, &dd, stream);
    pthread_mutex_lock(&cache_lock);
    entry_release_locked(e);
    pthread_mutex_unlock(&cache_lock);
    return st;
}

gpucore_status cuda_conv_stats(void *bctx, gpucore_conv_stats *stats)
{
    const int dev = ((cuda_context *)bctx)->device;
    if (dev < 0 || dev >= MAX_DEVICES) return GPUCORE_OK;
    pthread_mutex_lock(&cache_lock);
    int64_t size = stats->struct_size;
    *stats = dev_stats[dev];
    stats->struct_size = size;
    stats->plan_capacity = PLAN_CAPACITY;
    stats->plans_cached = 0;
    for (int i = 0; i < PLAN_CAPACITY; i++) stats->plans_cached += cache[i] && cache[i]->key.device == dev;
    pthread_mutex_unlock(&cache_lock);
    return GPUCORE_OK;
}

#endif /* GPUCORE_HAVE_CUDNN */
