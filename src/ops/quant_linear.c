/*
 * quant_linear.c — the linear layer with a quantized weight (gpucore_qlinear_forward and
 * gpucore_qlinear_backward_data): every argument checked once (the weight's format, sizes and
 * bytes as gpucore_dequantize checks them, the activations' dtypes, shapes, rows and overlap),
 * then one gpucore_qmm_args (kernels/quant_matmul.h) handed to the backend's quant_matmul entry.
 */
#include <string.h>
#include "ops_internal.h"
#include "ops/quant_layout.h"
#include "quant_matmul.h"

/* t as rows of `feat` contiguous values: its leading dims merged into *m rows *ld elements apart
 * (they must be evenly strided, as in any contiguous tensor). */
static gpucore_status rows_of(const gpucore_tensor *t, const char *op, const char *name, int64_t feat, int64_t *m,
                              int64_t *ld)
{
    char b[200];
    const int nd = t->ndim;
    if (nd < 1 || t->shape[nd - 1] != feat)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has shape %s; its last dim must be %lld", op, name,
                                 gpucore_shape_str(t->ndim, t->shape, b, sizeof b), (long long)feat);
    if (feat > 1 && t->strides[nd - 1] != 1)
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s has stride %lld along its last dim; its rows must "
                                 "be contiguous (copy it with gpucore_copy)", op, name, (long long)t->strides[nd - 1]);
    int64_t rows = 1, stride = feat > 0 ? feat : 1;
    int inner = -1; /* innermost leading dim of extent > 1 */
    for (int i = nd - 2; i >= 0; i--) {
        rows *= t->shape[i];
        if (t->shape[i] <= 1) continue;
        if (inner >= 0 && t->strides[i] != t->strides[inner] * t->shape[inner])
            return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s's leading dims cannot be merged into rows (dim "
                                     "%d has stride %lld, expected %lld); make it contiguous with gpucore_copy", op, name,
                                     i, (long long)t->strides[i], (long long)(t->strides[inner] * t->shape[inner]));
        if (inner < 0) stride = t->strides[i];
        inner = i;
    }
    if (inner >= 0 && stride < feat)
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s's rows are %lld elements apart but hold %lld; they "
                                 "overlap (make it contiguous with gpucore_copy)", op, name, (long long)stride,
                                 (long long)feat);
    *m = rows;
    *ld = stride;
    return GPUCORE_OK;
}

/* The weight: a descriptor with a valid layout and bytes on ctx. */
static gpucore_status check_qweight(const gpucore_qweight *w, gpucore_context *ctx, const char *op, quant_layout *L)
{
    gpucore_status st;
    if (!w) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: w (the quantized weight) is NULL", op);
    if (!w->data)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: w->data (the quantized bytes) is NULL; point it at the u8 "
                                 "tensor gpucore_quantize wrote", op);
    if ((st = gpucore_check_tensor(w->data, op, "w->data"))) return st;
    if (w->data->ctx != ctx) return gpucore_context_mismatch(op, "'w->data'", w->data->ctx, "'x'", ctx);
    if ((st = quant_layout_make((int)w->format, w->rows, w->cols, w->block_size, w->flags, op, L)) ||
        (st = quant_check_bytes(w->data, L, op, "w->data")))
        return st;
    return GPUCORE_OK;
}

/* An activation-side tensor: live, on x's context, of x's dtype. */
static gpucore_status check_like(const gpucore_tensor *t, const char *name, const gpucore_tensor *x, const char *op)
{
    gpucore_status st;
    if ((st = gpucore_check_tensor(t, op, name)) || (st = ops_check_same(t, name, x, "x", op, 1))) return st;
    return GPUCORE_OK;
}

static gpucore_status run(const char *op, gpucore_context *ctx, gpucore_stream *stream, const gpucore_qmm_args *a,
                          int64_t bytes)
{
    gpucore_stream *s;
    gpucore_status st;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;
    if (!ctx->be->quant_matmul)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend has no matmul with a quantized weight "
                                 "in this build (dequantize w with gpucore_dequantize and use gpucore_linear_*)", op,
                                 ctx->be->name);
    if (a->m == 0 || (a->transpose ? a->L.cols : a->L.rows) == 0) return GPUCORE_OK;
    void *prof = gpucore_prof_begin(ctx, s, op, bytes);
    st = ctx->be->quant_matmul(ctx->bctx, a, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

gpucore_status gpucore_qlinear_forward(const gpucore_tensor *x, const gpucore_qweight *w, const gpucore_tensor *bias,
                                       gpucore_activation act, gpucore_tensor *y, gpucore_tensor *aux,
                                       gpucore_stream *stream)
{
    const char *op = "qlinear_forward";
    gpucore_status st;
    quant_layout L;
    if ((st = gpucore_check_tensor(x, op, "x")) || (st = ops_check_float(x, op, "x")) ||
        (st = check_qweight(w, x->ctx, op, &L)) || (st = check_like(y, "y", x, op)) ||
        (bias && (st = check_like(bias, "bias", x, op))) || (aux && (st = check_like(aux, "aux", x, op))))
        return st;
    if (act != GPUCORE_ACT_NONE && act != GPUCORE_ACT_RELU && act != GPUCORE_ACT_GELU_TANH)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: activation %d cannot be fused; use GPUCORE_ACT_NONE, "
                                 "GPUCORE_ACT_RELU or GPUCORE_ACT_GELU_TANH (then run the activation op on y)", op,
                                 (int)act);
    if (aux && act != GPUCORE_ACT_GELU_TANH)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: aux holds the GELU input; it is only written with "
                                 "GPUCORE_ACT_GELU_TANH (pass NULL)", op);
    int64_t m, ldx, my, ldy, maux = 0, ldaux = 0;
    if ((st = rows_of(x, op, "x (w's cols)", L.cols, &m, &ldx)) || (st = rows_of(y, op, "y (w's rows)", L.rows, &my, &ldy)) ||
        (aux && (st = rows_of(aux, op, "aux (w's rows)", L.rows, &maux, &ldaux))))
        return st;
    if (my != m || (aux && maux != m))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: x has %lld rows but %s has %lld; they must match", op,
                                 (long long)m, my != m ? "y" : "aux", (long long)(my != m ? my : maux));
    if (bias && (bias->ndim != 1 || bias->shape[0] != L.rows || (L.rows > 1 && bias->strides[0] != 1)))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: bias has %lld elements (%d-d); it must be a contiguous "
                                 "1-d vector of %lld (w's rows)", op, (long long)gpucore_tensor_numel_unchecked(bias),
                                 (int)bias->ndim, (long long)L.rows);
    const gpucore_tensor *ins[4] = {x, w->data, bias, aux};
    const char *names[4] = {"x", "w->data", "bias", "aux"};
    for (int i = 0; i < 4; i++)
        if ((st = ops_check_tensor_alias(y, ins[i], op, names[i], 0))) return st;
    for (int i = 0; aux && i < 3; i++)
        if ((st = ops_check_tensor_alias(aux, ins[i], op, names[i], 0))) return st;
    gpucore_qmm_args a = {.L = L, .w = ops_tensor_data(w->data), .dt = x->dtype, .m = m, .transpose = 0, .x = ops_tensor_data(x),
                          .ldx = ldx, .y = ops_tensor_data(y), .ldy = ldy, .bias = ops_tensor_data(bias), .act = (int)act,
                          .aux = ops_tensor_data(aux), .ldaux = ldaux, .beta = 0.0f};
    return run(op, x->ctx, stream, &a, gpucore_prof_bytes(x) + L.total + gpucore_prof_bytes(y) + gpucore_prof_bytes(aux));
}

gpucore_status gpucore_qlinear_backward_data(const gpucore_tensor *dy, const gpucore_qweight *w, double beta,
                                             gpucore_tensor *dx, gpucore_stream *stream)
{
    const char *op = "qlinear_backward_data";
    gpucore_status st;
    quant_layout L;
    if ((st = gpucore_check_tensor(dy, op, "dy")) || (st = ops_check_float(dy, op, "dy")) ||
        (st = check_qweight(w, dy->ctx, op, &L)) || (st = gpucore_check_tensor(dx, op, "dx")) ||
        (st = ops_check_same(dx, "dx", dy, "dy", op, 1)))
        return st;
    if (beta != 0.0 && beta != 1.0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: beta is %g; it must be 0 (overwrite dx) or 1 (add to "
                                 "dx)", op, beta);
    int64_t m, ldy, mx, ldx;
    if ((st = rows_of(dy, op, "dy (w's rows)", L.rows, &m, &ldy)) || (st = rows_of(dx, op, "dx (w's cols)", L.cols, &mx, &ldx)))
        return st;
    if (mx != m)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dy has %lld rows but dx has %lld; they must match", op,
                                 (long long)m, (long long)mx);
    if ((st = ops_check_tensor_alias(dx, dy, op, "dy", 0)) || (st = ops_check_tensor_alias(dx, w->data, op, "w->data", 0)))
        return st;
    gpucore_qmm_args a = {.L = L, .w = ops_tensor_data(w->data), .dt = dy->dtype, .m = m, .transpose = 1, .x = ops_tensor_data(dy),
                          .ldx = ldy, .y = ops_tensor_data(dx), .ldy = ldx, .act = GPUCORE_ACT_NONE, .beta = (float)beta};
    return run(op, dy->ctx, stream, &a, gpucore_prof_bytes(dy) + L.total + gpucore_prof_bytes(dx) * (beta != 0.0 ? 2 : 1));
}
