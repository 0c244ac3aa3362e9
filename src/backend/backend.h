/*
 * backend.h — the vtable a backend fills in: raw memory, copies, streams and
 * events, and one entry per op. Everything shared (validation, the caching
 * allocator, tensor bookkeeping) lives above it (src/core, src/alloc, src/ops, src/train, src/comm); a backend only
 * supplies primitives. Backends: backend/cpu (built in), backend/cuda (a plugin module,
 * loaded at run time so libgpucore.so loads where no CUDA is installed), and the
 * test-only cuda-emulated module (tests/simt).
 *
 * Conventions: `bctx` is the backend's per-context state; `stream`/`event` are the
 * backend's own handles. Entries return gpucore_status and set the error message
 * through the plugin host's set_error. Async entries enqueue work on `stream`.
 */
#ifndef GPUCORE_BACKEND_H
#define GPUCORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "gpucore.h"
#include "view.h"
#include "gemm_desc.h"
#include "conv_desc.h"
#include "op_args.h"
#include "optim_math.h"
#include "attention_math.h"
#include "transformer_math.h"

struct gpucore_quant_args; /* kernels/quant_formats.h */
struct gpucore_qmm_args;   /* kernels/quant_matmul.h */

/* 2: event_create_untimed in the vtable, gemm_desc.fallback_out
 * 3: attn_args.algo and attn_args.engine_out (cuDNN SDPA)
 * 5: attn_args.ws_alloc/ws_release/ws_ctx (the cuDNN SDPA graphs' scratch)
 * 6: stream_count_pending and debug_fail_async */
#define GPUCORE_BACKEND_ABI 6

typedef void (*gpucore_host_fn)(void *arg);

/* One collective call on a communicator, as src/comm/comm.c hands it to a backend
 * (validated: contiguous buffers, counts > 0 fit the transport, dtype supported). */
typedef enum gpucore_comm_kind {
    GPUCORE_COMM_ALLREDUCE = 0,      /* recv[i] = op over ranks of send[i], i < count */
    GPUCORE_COMM_REDUCE_SCATTER = 1, /* recv[i] = op over ranks of send[rank*count + i]; send holds size*count */
    GPUCORE_COMM_ALL_GATHER = 2,     /* recv[r*count + i] = send of rank r [i] */
    GPUCORE_COMM_BROADCAST = 3,      /* recv[i] = send[i] of root (send is read on root only) */
    GPUCORE_COMM_BARRIER = 4         /* send/recv: a 1-element i32 scratch buffer the backend may use */
} gpucore_comm_kind;

typedef struct gpucore_comm_call {
    int32_t kind;      /* gpucore_comm_kind */
    int32_t op;        /* gpucore_reduce_op (allreduce, reduce-scatter) */
    int32_t dtype;     /* gpucore_dtype */
    int32_t root;      /* broadcast */
    int64_t count;     /* elements per rank (see each kind) */
    const void *send;  /* may equal recv (in place; for reduce-scatter/all-gather NCCL's convention) */
    void *recv;
    uint64_t seq;      /* 1, 2, ... per communicator: named in messages */
    double timeout_s;  /* deadline from when the call starts running; <= 0: none */
    int32_t for_caller; /* queued on the caller's stream, which waits for it (CPU: a synchronizing caller runs it) */
} gpucore_comm_call;

typedef struct gpucore_backend {
    int abi;                       /* GPUCORE_BACKEND_ABI */
    const char *name;              /* "cpu", "cuda", "cuda-emulated" */
    gpucore_device_type type;

    /* --- devices (no context needed) --- */
    gpucore_status (*available)(char *why, size_t why_len);
    gpucore_status (*device_count)(int *count);
    gpucore_status (*device_properties)(int index, gpucore_device_properties *props);
    gpucore_status (*device_processes)(int index, int64_t *pids, int64_t *used, int max, int *count);
    gpucore_status (*can_access_peer)(int a, int b, int *can);
    /* Optional (NULL: nothing to enable). Let the device of bctx read and write the memory of device
     * `peer` directly (peer-to-peer over NVLink/PCIe instead of staging through the host); a pair
     * already enabled is success. Only called where can_access_peer said yes. */
    gpucore_status (*enable_peer_access)(void *bctx, int peer);
    gpucore_status (*component_version)(const char *component, char *buf, size_t len);

    /* --- per-context state --- */
    gpucore_status (*context_init)(int device_index, void **bctx);
    void (*context_fini)(void *bctx);

    /* --- raw memory (the caching allocator sits above these) --- */
    gpucore_status (*raw_alloc)(void *bctx, size_t bytes, void **ptr);
    void (*raw_free)(void *bctx, void *ptr);
    gpucore_status (*mem_info)(void *bctx, int64_t *free_bytes, int64_t *total_bytes);

    /* --- streams and events --- */
    gpucore_status (*stream_create)(void *bctx, int priority, void **stream);
    void (*stream_destroy)(void *bctx, void *stream);
    gpucore_status (*stream_synchronize)(void *bctx, void *stream);
    gpucore_status (*stream_query)(void *bctx, void *stream); /* OK or NOT_READY */
    /* Run fn(arg) on the host once all work queued before it on `stream` is done. */
    gpucore_status (*host_callback)(void *bctx, void *stream, gpucore_host_fn fn, void *arg);
    gpucore_status (*event_create)(void *bctx, void **event);
    /* An event only for ordering and completion, never timed (CUDA: cudaEventDisableTiming,
     * cheaper to record and wait on). NULL: event_create serves. */
    gpucore_status (*event_create_untimed)(void *bctx, void **event);
    void (*event_destroy)(void *bctx, void *event);
    gpucore_status (*event_record)(void *bctx, void *event, void *stream);
    gpucore_status (*stream_wait_event)(void *bctx, void *stream, void *event);
    gpucore_status (*event_synchronize)(void *bctx, void *event);
    gpucore_status (*event_query)(void *bctx, void *event);
    gpucore_status (*event_elapsed_ms)(void *bctx, void *start, void *end, float *ms);

    /* --- copies (contiguous byte ranges; strided copies go through copy_strided) --- */
    gpucore_status (*copy_h2d)(void *bctx, void *dst, const void *src, size_t bytes, void *stream);
    gpucore_status (*copy_d2h)(void *bctx, void *dst, const void *src, size_t bytes, void *stream);
    gpucore_status (*copy_d2d)(void *bctx, void *dst, const void *src, size_t bytes, void *stream);
    /* dst and src: same dtype and shape, device memory, any strides. */
    gpucore_status (*copy_strided)(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *stream);

    /* --- ops --- */
    /* bits: the value already converted to dst's dtype, in the low elem_size bytes. */
    gpucore_status (*fill)(void *bctx, const gpucore_view *dst, uint64_t bits, void *stream);
    gpucore_status (*random)(void *bctx, const gpucore_view *dst, int dist, double a, double b,
                             uint64_t seed, uint64_t offset, void *stream);

    /* --- tensor ops (argument blocks in kernels/op_args.h; the API layer validated,
     * broadcast and, for reduce/rows, made the tensors contiguous). NULL: not supported. --- */
    gpucore_status (*elementwise)(void *bctx, const gpucore_ew_args *args, void *stream);
    gpucore_status (*reduce)(void *bctx, const gpucore_reduce_args *args, void *stream);
    gpucore_status (*rows)(void *bctx, const gpucore_rows_args *args, void *stream);

    /* --- pinned host memory and stream priorities (the pinned pool sits above host_alloc) ---
     * host_alloc: page-locked host memory usable by async copies (CUDA: cudaHostAlloc;
     * CPU: aligned host memory); returns GPUCORE_ERR_OUT_OF_MEMORY without a message
     * (the caller writes it). NULL entries: plain aligned host memory is used instead. */
    gpucore_status (*host_alloc)(void *bctx, size_t bytes, void **ptr);
    void (*host_free)(void *bctx, void *ptr);
    /* least: the lowest priority (0); greatest: the most urgent (<= least). NULL: 0 and 0. */
    gpucore_status (*stream_priority_range)(void *bctx, int *least, int *greatest);

    /* --- matmul (src/ops/matmul.c validates and maps the call onto gpucore_gemm_desc,
     * kernels/gemm_desc.h). NULL: the backend has no GEMM (NOT_SUPPORTED). --- */
    gpucore_status (*matmul)(void *bctx, const gpucore_gemm_desc *desc, void *stream);

    /* --- training primitives (kernels/optim_math.h: descriptors and per-element math;
     * src/train/optim.c, amp.c, clip.c validate). Host arrays are read before the call
     * returns. NULL: not supported. --- */
    /* One fused optimizer step over count tensors: step += 1 and the update, both
     * skipped when *hp->found_inf != 0. */
    gpucore_status (*optim_step)(void *bctx, const gpucore_optim_hparams *hp, const gpucore_optim_tensor *tensors,
                                 int64_t count, void *stream);
    /* g *= 1 / *scale for every element; *found_inf := 1 if any g was Inf/NaN (never reset here). */
    gpucore_status (*amp_unscale)(void *bctx, const gpucore_mt_tensor *grads, int64_t count, const float *scale,
                                  float *found_inf, void *stream);
    /* One update of the loss-scale state (gpucore_loss_scale_update). */
    gpucore_status (*amp_update)(void *bctx, float *scale, int32_t *growth_tracker, const float *found_inf,
                                 float growth, float backoff, int32_t interval, void *stream);
    /* Global L2 norm over count tensors (partials: one f32 per GPUCORE_MT_CHUNK chunk,
     * summed in chunk order), *total_norm and *clip_coef written, then every g *= clip_coef. */
    gpucore_status (*clip_grad_norm)(void *bctx, const gpucore_mt_tensor *grads, int64_t count, float *partials,
                                     float max_norm, float *total_norm, float *clip_coef, void *stream);

    /* --- collective communication (src/comm/comm.c validates and keeps the sequence
     * numbers and waits; the CPU backend carries data over MPI, CUDA over NCCL).
     * `bcomm` is the backend's communicator. NULL entries: not supported. --- */
    /* Fill id (GPUCORE_COMM_ID_BYTES) with a fresh unique id for comm_init. */
    gpucore_status (*comm_unique_id)(void *id);
    /* Join a communicator of `size` ranks as `rank`. id: from comm_unique_id on one
     * rank, or NULL for "every process of MPI_COMM_WORLD" (the CPU backend's mode;
     * MPI is already initialised by the caller). Gives up after timeout_s. */
    gpucore_status (*comm_init)(void *bctx, const void *id, int rank, int size, double timeout_s, void **bcomm);
    /* One process, n devices: bcomms[i] is rank i, on bctxs[i]. */
    gpucore_status (*comm_init_local)(void *const *bctxs, int n, double timeout_s, void **bcomms);
    /* Enqueue one collective on stream; it fails (and the communicator with it) if it
     * has not completed timeout_s after it started. */
    gpucore_status (*comm_enqueue)(void *bcomm, const gpucore_comm_call *call, void *stream);
    /* OK, or GPUCORE_ERR_COMM with the first failure's message (rank, op, seq, count, dtype). */
    gpucore_status (*comm_check)(void *bcomm);
    /* Abort what is in flight and fail the communicator (reason goes into its message). */
    void (*comm_abort)(void *bcomm, const char *reason);
    /* Free (the caller synchronized the streams; an aborted communicator is only released). */
    void (*comm_destroy)(void *bcomm);
    /* begin=1/0: ncclGroupStart/End around calls on several communicators from one thread. */
    gpucore_status (*comm_group)(int begin);

    /* --- convolution (src/ops/conv.c validates and fills kernels/conv_desc.h; CPU:
     * im2col + GEMM, CUDA: cuDNN's graph API). NULL: not supported. --- */
    gpucore_status (*conv)(void *bctx, const gpucore_conv_desc *desc, void *stream);
    /* Plan-cache counters (fields after struct_size); NULL: all zero. */
    gpucore_status (*conv_stats)(void *bctx, gpucore_conv_stats *stats);

    /* --- profiling (src/core/profile.c): a named range on the calling thread's timeline
     * (CUDA: NVTX, shown by Nsight Systems), pushed before an op, segment or
     * collective is enqueued and popped after. NULL: no timeline tool. --- */
    void (*range_push)(const char *name);
    void (*range_pop)(void);

    /* --- attention (src/ops/attention.c validates; kernels/attention_math.h defines the
     * arguments and the masking/dropout). NULL: not supported. --- */
    gpucore_status (*attention)(void *bctx, const gpucore_attn_args *args, void *stream);
    /* RoPE, gated linear units, fused residual + norm (src/ops/transformer.c validates;
     * kernels/transformer_math.h). NULL: not supported. */
    gpucore_status (*transformer)(void *bctx, const gpucore_tfm_args *args, void *stream);
    /* Quantize or dequantize a weight (src/ops/quant.c validates; kernels/quant_formats.h
     * holds the formats). NULL: not supported. */
    gpucore_status (*quant)(void *bctx, const struct gpucore_quant_args *args, void *stream);
    /* A GEMM with a quantized weight operand (src/ops/quant_linear.c validates;
     * kernels/quant_matmul.h defines what it computes). NULL: not supported. */
    gpucore_status (*quant_matmul)(void *bctx, const struct gpucore_qmm_args *args, void *stream);

    /* --- what the host can know of a stream without asking it. NULL: nothing (CUDA: the
     * device runs the work). --- */
    /* Keep *word (one per context, shared by its streams) at the number of tasks queued on
     * `stream` and not finished plus one while an error waits for synchronize, with atomic
     * adds, a release after each task's results; 0 from every stream means a synchronize of
     * each would return OK at once (src/core/context.c reads it). Called once, right after
     * stream_create; word outlives the stream. */
    void (*stream_count_pending)(void *bctx, void *stream, uint64_t *word);
    /* gpucore_debug_fail_async: queue on `stream` a task that fails with `status` when it runs.
     * NULL: not supported. */
    gpucore_status (*debug_fail_async)(void *bctx, void *stream, gpucore_status status);
} gpucore_backend;

/* What libgpucore.so gives a plugin module so it can report errors and log
 * without linking against the library's internals. */
typedef struct gpucore_plugin_host {
    int abi;
    gpucore_status (*set_error)(gpucore_status status, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
} gpucore_plugin_host;

/* Every plugin module exports this symbol. */
#define GPUCORE_PLUGIN_ENTRY_NAME "gpucore_backend_plugin_entry"
typedef gpucore_status (*gpucore_plugin_entry_fn)(const gpucore_plugin_host *host, const gpucore_backend **out);

#endif
