/*
 * clip.c — gradient clipping by global L2 norm over many tensors in one
 * backend op. The sum is deterministic: one partial per fixed 16384-element
 * chunk (kernels/optim_math.h), summed in chunk order, so the norm does not
 * depend on grid size, thread count or scheduling. The norm and the clip
 * coefficient stay in device memory.
 */
#include <math.h>
#include <stdlib.h>
#include "train_internal.h"

gpucore_status gpucore_clip_grad_norm(gpucore_tensor *const *grads, int64_t count, double max_norm,
                                      gpucore_tensor *total_norm, gpucore_tensor *clip_coef, gpucore_stream *stream)
{
    const char *op = "clip_grad_norm";
    gpucore_status st = gpucore_check_tensor(total_norm, op, "total_norm");
    if (st) return st;
    gpucore_context *ctx = total_norm->ctx;
    if ((st = gpucore_check_scalar_tensor(total_norm, ctx, GPUCORE_F32, op, "total_norm"))) return st;
    if (clip_coef && (st = gpucore_check_scalar_tensor(clip_coef, ctx, GPUCORE_F32, op, "clip_coef"))) return st;
    if ((st = gpucore_check_float_list(grads, count, &ctx, op, "grads"))) return st;
    if (!(max_norm > 0) || !isfinite(max_norm) || (float)max_norm == INFINITY)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: max_norm is %g; it must be > 0 and finite", op,
                                 max_norm);
    if (!ctx->be->clip_grad_norm)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend has no gradient clipping", op,
                                 ctx->be->name);
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;

    gpucore_mt_tensor *list = calloc((size_t)(count ? count : 1), sizeof *list);
    if (!list) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    int64_t used = 0, chunks = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t n = gpucore_tensor_numel_unchecked(grads[i]);
        if (n == 0) continue;
        void *d = NULL;
        gpucore_tensor_data(grads[i], &d);
        list[used].data = d;
        list[used].numel = n;
        list[used].dtype = grads[i]->dtype;
        chunks += gpucore_mt_chunks(n);
        used++;
    }
    /* Workspace: one partial per chunk, plus a slot for the coefficient when the
     * caller does not want it. Freed in stream order after the op. */
    void *wd = NULL, *nd = NULL, *cd = NULL;
    st = gpucore_memory_alloc(ctx, (chunks + 1) * (int64_t)sizeof(float), s, &wd);
    if (st) {
        free(list);
        return st;
    }
    gpucore_tensor_data(total_norm, &nd);
    if (clip_coef) gpucore_tensor_data(clip_coef, &cd);
    else cd = (float *)wd + chunks;
    int64_t prof_bytes = 0; /* read twice (norm, scale), written once */
    for (int64_t i = 0; i < used; i++) prof_bytes += 3 * list[i].numel * gpucore_dtype_size((gpucore_dtype)list[i].dtype);
    void *prof = gpucore_prof_begin(ctx, s, "clip_grad_norm", prof_bytes);
    st = ctx->be->clip_grad_norm(ctx->bctx, list, used, wd, (float)max_norm, nd, cd, s->bstream);
    gpucore_prof_end(ctx, prof);
    free(list);
    gpucore_memory_free(ctx, wd, s->bstream);
    return st;
}
