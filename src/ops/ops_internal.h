/*
 * ops_internal.h — helpers the tensor-op front-ends (src/ops/ops_*.c) share:
 * checks for context, dtype and aliasing, numpy broadcasting into views, dim
 * collapsing, and contiguous staging of inputs/outputs for the row and
 * reduction families.
 */
#ifndef GPUCORE_OPS_INTERNAL_H
#define GPUCORE_OPS_INTERNAL_H

#include "core/internal.h"
#include "core/view_span.h"

/* t is f32, f16 or bf16; otherwise DTYPE_MISMATCH naming op and arg. */
/* fp8 (e4m3 or e5m2): matmul operands, cast ends and LoRA bases, never elementwise math. */
static inline int ops_dtype_is_fp8(int dt) { return dt == GPUCORE_FP8_E4M3 || dt == GPUCORE_FP8_E5M2; }
GPUCORE_HIDDEN gpucore_status ops_check_float(const gpucore_tensor *t, const char *op, const char *arg);
/* Both tensors on one context and of one dtype. */
GPUCORE_HIDDEN gpucore_status ops_check_same(const gpucore_tensor *a, const char *an, const gpucore_tensor *b,
                                             const char *bn, const char *op, int same_dtype);
/* in's view broadcast to out's shape (numpy rules): same ndim, stride 0 on repeated dims. */
GPUCORE_HIDDEN gpucore_status ops_broadcast_view(const gpucore_tensor *in, const char *arg, const gpucore_tensor *out,
                                                 const char *op, gpucore_view *v);
/* Whether two views are exactly the same view. */
GPUCORE_HIDDEN int ops_views_identical(const gpucore_view *a, const gpucore_view *b);
/* out may equal in exactly (in place); any other overlap is INVALID_ARGUMENT. */
GPUCORE_HIDDEN gpucore_status ops_check_alias(const gpucore_view *out, const gpucore_view *in, const char *op,
                                              const char *arg, int allow_in_place);
/* ops_check_alias for tensors: out may be exactly in (allow_in_place) or must not overlap it;
 * OK when either is NULL (an optional operand). */
GPUCORE_HIDDEN gpucore_status ops_check_tensor_alias(const gpucore_tensor *out, const gpucore_tensor *in,
                                                     const char *op, const char *arg, int allow_in_place);

/* A contiguous version of tensor t: t itself when contiguous (*staged = NULL),
 * else a new contiguous tensor filled by a strided copy on s (*staged set; destroy it after use). */
GPUCORE_HIDDEN gpucore_status ops_contiguous_input(const gpucore_tensor *t, gpucore_stream *s, gpucore_view *v,
                                                   gpucore_tensor **staged);
/* A contiguous place to write t's result: t itself when contiguous, else a
 * staging tensor; ops_finish_output copies it into t and releases it. */
GPUCORE_HIDDEN gpucore_status ops_contiguous_output(gpucore_tensor *t, gpucore_stream *s, gpucore_view *v,
                                                    gpucore_tensor **staged);
GPUCORE_HIDDEN gpucore_status ops_finish_output(gpucore_tensor *t, gpucore_tensor *staged, gpucore_stream *s,
                                                gpucore_status st);
/* Device scratch memory for kernel backends (none on the CPU backend, which
 * needs none); release with ops_workspace_free after enqueuing the op. */
GPUCORE_HIDDEN gpucore_status ops_workspace_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *s, void **p);
GPUCORE_HIDDEN void ops_workspace_free(gpucore_context *ctx, gpucore_stream *s, void *p);
/* The engines' fallback statistics (ops_common.c): gpucore_<engine>_get_stats / _reset_stats. */
typedef enum ops_stats_engine { OPS_STATS_MATMUL, OPS_STATS_ATTENTION } ops_stats_engine;
GPUCORE_HIDDEN gpucore_status ops_engine_stats_get(gpucore_context *ctx, ops_stats_engine e, void *stats);
GPUCORE_HIDDEN gpucore_status ops_engine_stats_reset(gpucore_context *ctx, ops_stats_engine e);
/* INVALID_ARGUMENT unless value is a value of public enum `type` ("gpucore_unary_op", ...;
 * the tables of kernels/op_tables.h) and >= first; the message lists the valid names. */
GPUCORE_HIDDEN gpucore_status ops_check_enum(const char *op, const char *what, const char *type, int value, int first);
/* The address of t's first element (NULL for a NULL t: an optional operand). */
static inline void *ops_tensor_data(const gpucore_tensor *t)
{
    if (!t) return NULL;
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    return v.data;
}
/* NOT_SUPPORTED unless the backend has the entry. */
GPUCORE_HIDDEN gpucore_status ops_need_entry(const gpucore_context *ctx, const void *entry, const char *op);

#endif
