/*
 * matmul.c — the matmul and linear-layer front-ends: validate every argument
 * once (shapes, dtypes, layouts, alignment, aliasing), map the user's row-major
 * d = op(a)·op(b) onto one column-major gpucore_gemm_desc (kernels/gemm_desc.h)
 * and hand it to the backend. The linear layer is built from matmul calls here,
 * above the vtable, so every backend gets it for free.
 *
 * The mapping: row-major d[M,N] with row stride ld is the column-major matrix
 * dᵀ[N,M] with leading dimension ld, and dᵀ = op(b)ᵀ·op(a)ᵀ. So the desc's m is N,
 * its n is M, its A is built from the user's b and its B from the user's a; a
 * bias over the user's columns is a bias over the desc's rows.
 */
#include <stdio.h>
#include <string.h>
#include "ops_internal.h"

void gpucore_matmul_options_init(gpucore_matmul_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = (int64_t)sizeof *o;
    o->alpha = 1.0;
    o->beta = 0.0;
    o->epilogue = GPUCORE_EPILOGUE_NONE;
    o->allow_tf32 = -1;
}

gpucore_status gpucore_context_set_allow_tf32(gpucore_context *ctx, int allow)
{
    gpucore_status st = gpucore_check_context(ctx, "context_set_allow_tf32");
    if (st) return st;
    if (allow != 0 && allow != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "context_set_allow_tf32: allow is %d; it must be 0 or 1",
                                 allow);
    atomic_store(&ctx->matmul_allow_tf32, allow);
    return GPUCORE_OK;
}

gpucore_status gpucore_context_get_allow_tf32(gpucore_context *ctx, int *allow)
{
    gpucore_status st = gpucore_check_context(ctx, "context_get_allow_tf32");
    if (st) return st;
    if (!allow) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "context_get_allow_tf32: allow is NULL");
    *allow = atomic_load(&ctx->matmul_allow_tf32);
    return GPUCORE_OK;
}

gpucore_status gpucore_matmul_set_workspace_size(gpucore_context *ctx, int64_t bytes)
{
    gpucore_status st = gpucore_check_context(ctx, "matmul_set_workspace_size");
    if (st) return st;
    if (bytes < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "matmul_set_workspace_size: bytes is %lld; it must be >= 0",
                                 (long long)bytes);
    atomic_store(&ctx->matmul_workspace_bytes, (long long)bytes);
    return GPUCORE_OK;
}

/* ---- logical matrices ---- */

/* One operand as the user sees it: [batch, rows, cols] with element strides. */
typedef struct mat {
    const gpucore_tensor *t;
    const char *name;
    int64_t batch, rows, cols;
    int64_t sb, sr, sc; /* batch, row, column strides (elements) */
    char *data;
    int dtype;
} mat;

static gpucore_status mat_of(const gpucore_tensor *t, const char *op, const char *name, int transpose, mat *m)
{
    memset(m, 0, sizeof *m);
    m->t = t;
    m->name = name;
    if (t->ndim != 2 && t->ndim != 3)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has %d dims; it must be 2-d, or 3-d for a batch",
                                 op, name, (int)t->ndim);
    int o = t->ndim - 2;
    m->batch = o ? t->shape[0] : 1;
    m->sb = o ? t->strides[0] : 0;
    m->rows = t->shape[o];
    m->cols = t->shape[o + 1];
    m->sr = t->strides[o];
    m->sc = t->strides[o + 1];
    if (transpose) {
        int64_t x = m->rows; m->rows = m->cols; m->cols = x;
        x = m->sr; m->sr = m->sc; m->sc = x;
    }
    if (m->batch == 1) m->sb = 0;
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    m->data = v.data;
    m->dtype = t->dtype;
    return GPUCORE_OK;
}

/* Express the column-major matrix X[r, c] with strides (t0 along r, t1 along c) as a
 * BLAS operand: trans 0 if stored column-major, 1 if row-major. 0 if neither. */
static int blas_operand(int64_t r, int64_t c, int64_t t0, int64_t t1, int32_t *trans, int64_t *ld)
{
    int64_t r1 = r > 1 ? r : 1, c1 = c > 1 ? c : 1;
    if ((t0 == 1 || r <= 1) && (c <= 1 || t1 >= r1)) {
        *trans = 0;
        *ld = c <= 1 ? r1 : t1;
        return 1;
    }
    if ((t1 == 1 || c <= 1) && (r <= 1 || t0 >= c1)) {
        *trans = 1;
        *ld = r <= 1 ? c1 : t0;
        return 1;
    }
    return 0;
}

static gpucore_status layout_error(const char *op, const mat *m)
{
    return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS,
                             "%s: %s is %lldx%lld with strides [%lld, %lld]: each matrix needs stride 1 along one of its "
                             "last two dims and the other stride at least that dim's size (copy it to a contiguous "
                             "tensor with gpucore_copy)",
                             op, m->name, (long long)m->rows, (long long)m->cols, (long long)m->sr, (long long)m->sc);
}

/* An output-like matrix (d, c, aux): row-major in its last two dims, so that it is a
 * column-major [cols, rows] matrix with leading dimension = row stride. */
static gpucore_status rowmajor_ld(const char *op, const mat *m, int64_t *ld)
{
    int32_t trans;
    if (!blas_operand(m->cols, m->rows, m->sc, m->sr, &trans, ld) || trans != 0)
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS,
                                 "%s: %s is %lldx%lld with strides [%lld, %lld]; it must have stride 1 along its last dim "
                                 "and a row stride of at least %lld",
                                 op, m->name, (long long)m->rows, (long long)m->cols, (long long)m->sr,
                                 (long long)m->sc, (long long)m->cols);
    return GPUCORE_OK;
}

static int same_view(const gpucore_tensor *x, const gpucore_tensor *y)
{
    if (x == y) return 1;
    if (x->storage != y->storage || x->offset != y->offset || x->ndim != y->ndim || x->dtype != y->dtype) return 0;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] != y->shape[i] || (x->shape[i] > 1 && x->strides[i] != y->strides[i])) return 0;
    return 1;
}

static gpucore_status check_aligned(const char *op, const char *name, const void *p, int64_t align)
{
    if (p && ((uintptr_t)p % (uintptr_t)align) != 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: %s's data pointer %p is not aligned to %lld bytes%s", op, name, p, (long long)align,
                                 align > 4 ? " (fp8 GEMMs need 16-byte aligned operands)" : " (its element size)");
    return GPUCORE_OK;
}

static gpucore_status check_member(const gpucore_tensor *t, const gpucore_context *ctx, const char *op, const char *name)
{
    gpucore_status st = gpucore_check_tensor(t, op, name);
    if (st) return st;
    if (t->ctx != ctx)
        return gpucore_context_mismatch(op, name, t->ctx, "d", ctx);
    return GPUCORE_OK;
}

static int is_float_out(int dt) { return dt == GPUCORE_F32 || dt == GPUCORE_F16 || dt == GPUCORE_BF16; }

static gpucore_status check_dtypes(const char *op, int a, int b, int d)
{
    const char *an = gpucore_dtype_name((gpucore_dtype)a), *bn = gpucore_dtype_name((gpucore_dtype)b),
               *dn = gpucore_dtype_name((gpucore_dtype)d);
    if (ops_dtype_is_fp8(a) && ops_dtype_is_fp8(b)) {
        if (a == GPUCORE_FP8_E5M2 && b == GPUCORE_FP8_E5M2)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH,
                                     "%s: a and b are both fp8_e5m2; fp8 GEMMs take e4m3×e4m3, e4m3×e5m2 or e5m2×e4m3", op);
        if (!is_float_out(d))
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: d is %s; fp8 operands give d f32, f16 or bf16", op, dn);
        return GPUCORE_OK;
    }
    if (a != b || !(a == GPUCORE_F32 || a == GPUCORE_F16 || a == GPUCORE_BF16))
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH,
                                 "%s: a is %s and b is %s; supported operand pairs are f32×f32, f16×f16, bf16×bf16 and "
                                 "fp8 (e4m3/e5m2)", op, an, bn);
    if (!(d == a || d == GPUCORE_F32))
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: a and b are %s but d is %s; d must be %s%s", op, an, dn,
                                 an, a == GPUCORE_F32 ? "" : " or f32");
    return GPUCORE_OK;
}

static gpucore_status check_vector(const char *op, const char *name, const gpucore_tensor *t, int dtype, int64_t len,
                                   const char *what)
{
    if (t->dtype != dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s is %s but d is %s; they must match", op, name,
                                 gpucore_dtype_name((gpucore_dtype)t->dtype), gpucore_dtype_name((gpucore_dtype)dtype));
    if (t->ndim != 1 || t->shape[0] != len)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s has %lld elements (%d-d) but must be a 1-d vector of "
                                 "%lld (%s)", op, name, (long long)gpucore_tensor_numel_unchecked(t), (int)t->ndim,
                                 (long long)len, what);
    if (len > 1 && t->strides[0] != 1)
        return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s has stride %lld; it must be contiguous", op, name,
                                 (long long)t->strides[0]);
    return GPUCORE_OK;
}

static gpucore_status check_scalar(const char *op, const char *name, const gpucore_tensor *t)
{
    if (t->dtype != GPUCORE_F32 || gpucore_tensor_numel_unchecked(t) != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s must be an f32 tensor of one element (it is %s with "
                                 "%lld)", op, name, gpucore_dtype_name((gpucore_dtype)t->dtype),
                                 (long long)gpucore_tensor_numel_unchecked(t));
    return GPUCORE_OK;
}

/* ---- matmul_impl in steps: options, shapes and the GEMM descriptor, epilogue, fp8, dispatch ---- */

/* What the steps share: the logical matrices, the sizes and the descriptor being filled. */
typedef struct matmul_plan {
    mat A, B, D;
    int64_t M, N, K, batch;
    int fp8;
    gpucore_gemm_desc g;
} matmul_plan;

/* Options: opts (or the defaults) validated into *out; every option tensor on d's context. */
static gpucore_status matmul_options(const char *op, gpucore_context *ctx, const gpucore_matmul_options *opts,
                                     gpucore_matmul_options *out)
{
    gpucore_status st;
    gpucore_matmul_options_init(out);
    if (opts) {
        if (opts->struct_size < (int64_t)sizeof *out)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->struct_size is %lld; set it with "
                                     "gpucore_matmul_options_init (sizeof is %zu)", op, (long long)opts->struct_size,
                                     sizeof *out);
        *out = *opts;
    }
    if (out->trans_a != 0 && out->trans_a != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: trans_a is %d; it must be 0 or 1", op,
                                 (int)out->trans_a);
    if (out->trans_b != 0 && out->trans_b != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: trans_b is %d; it must be 0 or 1", op,
                                 (int)out->trans_b);
    if ((st = ops_check_enum(op, "epilogue", "gpucore_epilogue", (int)out->epilogue, 0))) return st;
    if (out->allow_tf32 < -1 || out->allow_tf32 > 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: allow_tf32 is %d; it must be -1, 0 or 1", op,
                                 (int)out->allow_tf32);
    const gpucore_tensor *opt_tensors[] = {out->c,       out->bias,    out->aux,   out->bias_grad,
                                           out->scale_a, out->scale_b, out->amax_d};
    static const char *opt_names[] = {"c", "bias", "aux", "bias_grad", "scale_a", "scale_b", "amax_d"};
    for (int i = 0; i < 7; i++)
        if (opt_tensors[i] && (st = check_member(opt_tensors[i], ctx, op, opt_names[i]))) return st;
    return GPUCORE_OK;
}

/* fp8 options: scales and amax only with fp8 operands. */
static gpucore_status matmul_fp8_options(const char *op, const gpucore_matmul_options *o, const matmul_plan *p)
{
    if (!p->fp8 && (o->scale_a || o->scale_b || o->amax_d))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: scale_a, scale_b and amax_d are for fp8 operands; "
                                 "a is %s", op, gpucore_dtype_name((gpucore_dtype)p->A.dtype));
    return GPUCORE_OK;
}

/* Shapes, dtypes, layouts, alignment and aliasing of a, b, d and c, and the
 * descriptor's operands (the user's row-major D = op(A)·op(B) as Dᵀ = op(B)ᵀ·op(A)ᵀ). */
static gpucore_status matmul_shapes(const char *op, gpucore_context *ctx, const gpucore_tensor *a,
                                    const gpucore_tensor *b, gpucore_tensor *d, const gpucore_matmul_options *po,
                                    matmul_plan *p)
{
    gpucore_status st;
    const gpucore_matmul_options o = *po;
    if ((st = mat_of(a, op, "a", o.trans_a, &p->A)) || (st = mat_of(b, op, "b", o.trans_b, &p->B)) ||
        (st = mat_of(d, op, "d", 0, &p->D)))
        return st;
    const mat A = p->A, B = p->B, D = p->D;
    if (A.cols != B.rows)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %sa is %lldx%lld but %sb is %lldx%lld: inner dimensions "
                                 "differ", op, o.trans_a ? "op(a)=aᵀ " : "", (long long)A.rows, (long long)A.cols,
                                 o.trans_b ? "op(b)=bᵀ " : "", (long long)B.rows, (long long)B.cols);
    const int64_t M = A.rows, K = A.cols, N = B.cols;
    p->M = M; p->K = K; p->N = N;
    if (D.rows != M || D.cols != N)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: d is %lldx%lld but op(a)·op(b) is %lldx%lld", op,
                                 (long long)D.rows, (long long)D.cols, (long long)M, (long long)N);
    const int64_t batch = D.batch;
    p->batch = batch;
    if ((A.batch != 1 && A.batch != batch) || (B.batch != 1 && B.batch != batch))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: batch counts differ: a %lld, b %lld, d %lld (a and b "
                                 "need d's batch, or 1 / 2-d to share one matrix)", op, (long long)A.batch,
                                 (long long)B.batch, (long long)batch);
    if ((st = check_dtypes(op, A.dtype, B.dtype, D.dtype))) return st;
    p->fp8 = ops_dtype_is_fp8(A.dtype);
    if ((st = matmul_fp8_options(op, &o, p))) return st;
    const int fp8 = p->fp8;
    gpucore_gemm_desc *gp = &p->g;
    memset(gp, 0, sizeof *gp);
    gp->m = N;
    gp->n = M;
    gp->k = K;
    gp->batch = batch;
    /* desc A = op(b)ᵀ: [N, K] with strides (B.sc, B.sr); desc B = op(a)ᵀ: [K, M] with (A.sc, A.sr) */
    if (!blas_operand(N, K, B.sc, B.sr, &gp->a.trans, &gp->a.ld)) return layout_error(op, &B);
    if (!blas_operand(K, M, A.sc, A.sr, &gp->b.trans, &gp->b.ld)) return layout_error(op, &A);
    gp->a.data = B.data;
    gp->a.dtype = B.dtype;
    gp->a.batch_stride = B.sb;
    gp->b.data = A.data;
    gp->b.dtype = A.dtype;
    gp->b.batch_stride = A.sb;
    if ((st = rowmajor_ld(op, &D, &gp->ldd))) return st;
    gp->d = D.data;
    gp->d_dtype = D.dtype;
    gp->batch_stride_d = D.sb;
    if (batch > 1 && D.sb < M * gp->ldd && M * N > 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: d's batch stride %lld is smaller than one %lldx%lld "
                                 "matrix (row stride %lld): the batches would overlap", op, (long long)D.sb, (long long)M,
                                 (long long)N, (long long)gp->ldd);
    gp->alpha = (float)o.alpha;
    gp->beta = (float)o.beta;
    gp->allow_tf32 = A.dtype == GPUCORE_F32 && (o.allow_tf32 < 0 ? atomic_load(&ctx->matmul_allow_tf32) : o.allow_tf32);

    /* alignment: element size everywhere; fp8 kernels need 16 bytes */
    const gpucore_tensor *all[] = {a, b, d, o.c, o.bias, o.aux, o.bias_grad};
    static const char *all_names[] = {"a", "b", "d", "c", "bias", "aux", "bias_grad"};
    for (int i = 0; i < 7; i++) {
        if (!all[i]) continue;
        int64_t al = gpucore_dtype_size((gpucore_dtype)all[i]->dtype);
        if (fp8 && i < 2) al = 16;
        if ((st = check_aligned(op, all_names[i], ops_tensor_data(all[i]), al))) return st;
    }

    /* aliasing: outputs must not overlap inputs or each other (c may be d exactly) */
    if (gpucore_tensors_overlap(d, a) || gpucore_tensors_overlap(d, b))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: d overlaps %s; the output must not share memory with "
                                 "an operand", op, gpucore_tensors_overlap(d, a) ? "a" : "b");

    /* beta's addend */
    if (o.c && !same_view(o.c, d)) {
        mat C;
        if ((st = mat_of(o.c, op, "c", 0, &C))) return st;
        if (C.rows != M || C.cols != N || (C.batch != batch && C.batch != 1))
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: c is %lldx%lld (batch %lld) but d is %lldx%lld "
                                     "(batch %lld)", op, (long long)C.rows, (long long)C.cols, (long long)C.batch,
                                     (long long)M, (long long)N, (long long)batch);
        if (C.dtype != D.dtype)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: c is %s but d is %s; they must match", op,
                                     gpucore_dtype_name((gpucore_dtype)C.dtype), gpucore_dtype_name((gpucore_dtype)D.dtype));
        if ((st = rowmajor_ld(op, &C, &gp->ldc))) return st;
        if (gpucore_tensors_overlap(d, o.c))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: c partly overlaps d; pass d itself (or NULL) to "
                                     "accumulate in place", op);
        gp->c = C.data;
        gp->batch_stride_c = C.sb;
    } else if (gp->beta != 0.0f) {
        gp->c = gp->d;
        gp->ldc = gp->ldd;
        gp->batch_stride_c = gp->batch_stride_d;
    }
    return GPUCORE_OK;
}

/* The epilogue: which optional tensors it needs, their checks, and the descriptor's epilogue steps. */
static gpucore_status matmul_epilogue(const char *op, const gpucore_tensor *a, const gpucore_tensor *b,
                                      const gpucore_tensor *d, const gpucore_matmul_options *po, matmul_plan *p)
{
    gpucore_status st;
    const gpucore_matmul_options o = *po;
    const mat D = p->D;
    const int64_t M = p->M, N = p->N, batch = p->batch;
    gpucore_gemm_desc *gp = &p->g;
    int epi = o.epilogue;
    int wants_bias = epi == GPUCORE_EPILOGUE_BIAS || epi == GPUCORE_EPILOGUE_BIAS_RELU || epi == GPUCORE_EPILOGUE_BIAS_GELU;
    int gelu = epi == GPUCORE_EPILOGUE_GELU || epi == GPUCORE_EPILOGUE_BIAS_GELU;
    int dgelu = epi == GPUCORE_EPILOGUE_DGELU || epi == GPUCORE_EPILOGUE_DGELU_BGRAD;
    int bgrad = epi == GPUCORE_EPILOGUE_DGELU_BGRAD || epi == GPUCORE_EPILOGUE_BGRAD_A || epi == GPUCORE_EPILOGUE_BGRAD_B;
    if (wants_bias && !o.bias)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the epilogue adds a bias but opts->bias is NULL", op);
    if (!wants_bias && o.bias)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->bias is set but epilogue %d adds no bias (use "
                                 "a BIAS epilogue)", op, epi);
    if (dgelu && !o.aux)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: DGELU epilogues read the GELU input from opts->aux, "
                                 "which is NULL", op);
    if (o.aux && !gelu && !dgelu)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->aux is set but epilogue %d uses none (GELU "
                                 "writes it, DGELU reads it)", op, epi);
    if (bgrad && !o.bias_grad)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the epilogue computes a bias gradient but "
                                 "opts->bias_grad is NULL", op);
    if (!bgrad && o.bias_grad)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->bias_grad is set but epilogue %d computes no "
                                 "bias gradient", op, epi);
    if ((o.aux || bgrad) && batch > 1)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: epilogues with aux or bias_grad take one matrix, not a "
                                 "batch of %lld (merge the batch into the rows: a [batch*M, K])", op, (long long)batch);
    if (wants_bias) {
        if ((st = check_vector(op, "bias", o.bias, D.dtype, N, "one per column of d"))) return st;
        if (gpucore_tensors_overlap(d, o.bias))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: d overlaps bias", op);
        gp->epilogue |= GPUCORE_GEMM_EPI_BIAS;
        gp->bias = ops_tensor_data(o.bias);
    }
    if (epi == GPUCORE_EPILOGUE_RELU || epi == GPUCORE_EPILOGUE_BIAS_RELU) gp->epilogue |= GPUCORE_GEMM_EPI_RELU;
    if (gelu) gp->epilogue |= GPUCORE_GEMM_EPI_GELU;
    if (dgelu) gp->epilogue |= GPUCORE_GEMM_EPI_DGELU;
    if (o.aux) {
        mat X;
        if ((st = mat_of(o.aux, op, "aux", 0, &X))) return st;
        if (X.rows != M || X.cols != N || X.batch != 1)
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: aux is %lldx%lld but d is %lldx%lld; they must match",
                                     op, (long long)X.rows, (long long)X.cols, (long long)M, (long long)N);
        if (X.dtype != D.dtype)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: aux is %s but d is %s; they must match", op,
                                     gpucore_dtype_name((gpucore_dtype)X.dtype), gpucore_dtype_name((gpucore_dtype)D.dtype));
        if ((st = rowmajor_ld(op, &X, &gp->ldaux))) return st;
        if (gpucore_tensors_overlap(d, o.aux) && !(dgelu && same_view(d, o.aux)))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: aux overlaps d", op);
        if (gelu && (gpucore_tensors_overlap(o.aux, a) || gpucore_tensors_overlap(o.aux, b)))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: aux (an output here) overlaps an operand", op);
        if (gelu) gp->epilogue |= GPUCORE_GEMM_EPI_AUX_OUT;
        gp->aux = X.data;
    }
    if (bgrad) {
        /* user BGRAD_A (length M) reduces op(a) = desc B; user BGRAD_B (length N) reduces op(b) = desc A */
        int64_t len = epi == GPUCORE_EPILOGUE_BGRAD_A ? M : N;
        if ((st = check_vector(op, "bias_grad", o.bias_grad, D.dtype, len,
                               epi == GPUCORE_EPILOGUE_BGRAD_A ? "one per row of d" : "one per column of d")))
            return st;
        if (gpucore_tensors_overlap(o.bias_grad, d) || gpucore_tensors_overlap(o.bias_grad, a) ||
            gpucore_tensors_overlap(o.bias_grad, b))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: bias_grad overlaps another operand", op);
        gp->epilogue |= epi == GPUCORE_EPILOGUE_DGELU_BGRAD ? GPUCORE_GEMM_EPI_BGRAD_D
                      : epi == GPUCORE_EPILOGUE_BGRAD_A   ? GPUCORE_GEMM_EPI_BGRAD_B
                                                          : GPUCORE_GEMM_EPI_BGRAD_A;
        gp->bias_grad = ops_tensor_data(o.bias_grad);
    }
    return GPUCORE_OK;
}

/* fp8 operands: the TN layout, 16-element row strides, the scales, a CUDA device. */
static gpucore_status matmul_fp8(const char *op, gpucore_context *ctx, const gpucore_matmul_options *po, matmul_plan *p)
{
    gpucore_status st;
    const gpucore_matmul_options o = *po;
    gpucore_gemm_desc *gp = &p->g;
    if (!p->fp8) return GPUCORE_OK;
    if (gp->a.trans != 1 || gp->b.trans != 0)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: fp8 GEMMs need the TN layout: a row-major [M,K] and "
                                 "op(b) the transpose of a row-major [N,K] (as in x·Wᵀ: pass W with trans_b=1); "
                                 "a is %s and op(b) is %s", op, gp->b.trans == 0 ? "row-major" : "column-major",
                                 gp->a.trans == 1 ? "the transpose of a row-major matrix" : "row-major");
    if ((gp->a.ld % 16) || (gp->b.ld % 16))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: fp8 operands need row strides that are multiples of "
                                 "16 elements (a: %lld, b: %lld)", op, (long long)gp->b.ld, (long long)gp->a.ld);
    if (o.scale_a && (st = check_scalar(op, "scale_a", o.scale_a))) return st;
    if (o.scale_b && (st = check_scalar(op, "scale_b", o.scale_b))) return st;
    if (o.amax_d && (st = check_scalar(op, "amax_d", o.amax_d))) return st;
    /* desc A is the user's b: the scales swap with the operands */
    gp->scale_a = ops_tensor_data(o.scale_b);
    gp->scale_b = ops_tensor_data(o.scale_a);
    gp->amax_d = ops_tensor_data(o.amax_d);
    if (ctx->type != GPUCORE_DEVICE_CUDA)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: fp8 operands need a CUDA device of compute "
                                 "capability 8.9 or newer; the %s backend has no fp8 GEMM (convert to bf16)", op,
                                 ctx->be->name);
    return GPUCORE_OK;
}

static gpucore_status matmul_impl(const char *op, const gpucore_tensor *a, const gpucore_tensor *b, gpucore_tensor *d,
                                  const gpucore_matmul_options *opts, gpucore_stream *stream)
{
    gpucore_status st;
    if ((st = gpucore_check_tensor(d, op, "d"))) return st;
    gpucore_context *ctx = d->ctx;
    if ((st = check_member(a, ctx, op, "a")) || (st = check_member(b, ctx, op, "b"))) return st;
    gpucore_matmul_options o;
    matmul_plan p;
    if ((st = matmul_options(op, ctx, opts, &o)) || (st = matmul_shapes(op, ctx, a, b, d, &o, &p)) ||
        (st = matmul_epilogue(op, a, b, d, &o, &p)) || (st = matmul_fp8(op, ctx, &o, &p)))
        return st;
    gpucore_gemm_desc g = p.g;
    const int64_t M = p.M, N = p.N;
    const int epi = o.epilogue;
    const int bgrad = epi == GPUCORE_EPILOGUE_DGELU_BGRAD || epi == GPUCORE_EPILOGUE_BGRAD_A || epi == GPUCORE_EPILOGUE_BGRAD_B;

    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;
    if (!ctx->be->matmul)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend has no matmul in this build", op,
                                 ctx->be->name);
    if (M == 0 || N == 0) {
        if (!bgrad || (epi == GPUCORE_EPILOGUE_BGRAD_A ? M : N) == 0) return GPUCORE_OK;
    }

    void *ws = NULL;
    if (ctx->type == GPUCORE_DEVICE_CUDA) {
        int64_t wsb = atomic_load(&ctx->matmul_workspace_bytes);
        if (wsb == 0) wsb = MATMUL_DEFAULT_WORKSPACE;
        if ((st = gpucore_memory_alloc(ctx, wsb, s, &ws))) return st;
        g.workspace = ws;
        g.workspace_bytes = wsb;
    }
    int32_t fallback = 0;
    g.fallback_out = &fallback;
    void *prof = gpucore_prof_begin(ctx, s, op, gpucore_prof_bytes(a) + gpucore_prof_bytes(b) + gpucore_prof_bytes(d));
    st = ctx->be->matmul(ctx->bctx, &g, s->bstream);
    atomic_fetch_add(&ctx->matmul_gemms, 1);
    if (fallback > 0 && fallback <= GPUCORE_MATMUL_FALLBACK_REASONS) {
        atomic_fetch_add(&ctx->matmul_fallbacks[fallback - 1], 1);
        if (atomic_load_explicit(&ctx->profile_flags, memory_order_relaxed)) gpucore_profile_count(ctx, "matmul_fallback");
    }
    gpucore_prof_end(ctx, prof);
    if (ws) gpucore_memory_free(ctx, ws, s->bstream);
    return st;
}

gpucore_status gpucore_matmul(const gpucore_tensor *a, const gpucore_tensor *b, gpucore_tensor *d,
                              const gpucore_matmul_options *opts, gpucore_stream *stream)
{
    return matmul_impl("matmul", a, b, d, opts, stream);
}

/* ---- linear layer ---- */

/* A 2-d [rows, features] view of t whose leading dims are merged into rows (they
 * must be evenly strided, as in any contiguous tensor); destroy *out after use. */
static gpucore_status as_rows(const gpucore_tensor *t, const char *op, const char *name, gpucore_tensor **out)
{
    *out = NULL;
    const int nd = t->ndim;
    if (nd < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s is a scalar; it needs a feature dim", op, name);
    int64_t rows = 1, row_stride = 0;
    int inner = -1; /* innermost leading dim of extent > 1 */
    for (int i = nd - 2; i >= 0; i--) {
        rows *= t->shape[i];
        if (t->shape[i] <= 1) continue;
        if (inner >= 0 && t->strides[i] != t->strides[inner] * t->shape[inner])
            return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s's leading dims cannot be merged into rows (dim %d "
                                     "has stride %lld, expected %lld); make it contiguous with gpucore_copy", op, name, i,
                                     (long long)t->strides[i], (long long)(t->strides[inner] * t->shape[inner]));
        if (inner < 0) row_stride = t->strides[i];
        inner = i;
    }
    if (inner < 0) row_stride = t->shape[nd - 1] > 0 ? t->shape[nd - 1] : 1; /* one row: any stride does */
    gpucore_tensor *v = NULL;
    gpucore_status st = gpucore_tensor_slice((gpucore_tensor *)t, 0, 0, INT64_MAX, 1, &v);
    if (st) return st;
    /* the view shares t's storage; give it the merged 2-d geometry */
    int64_t feat = t->shape[nd - 1], feat_stride = t->strides[nd - 1];
    memset(v->shape, 0, sizeof v->shape);
    memset(v->strides, 0, sizeof v->strides);
    v->ndim = 2;
    v->shape[0] = rows;
    v->shape[1] = feat;
    v->strides[0] = row_stride;
    v->strides[1] = feat_stride;
    *out = v;
    return GPUCORE_OK;
}

gpucore_status gpucore_linear_forward(const gpucore_tensor *x, const gpucore_tensor *w, const gpucore_tensor *bias,
                                      gpucore_activation act, gpucore_tensor *y, gpucore_tensor *aux,
                                      gpucore_stream *stream)
{
    const char *op = "linear_forward";
    gpucore_status st;
    if ((st = gpucore_check_tensor(x, op, "x")) || (st = gpucore_check_tensor(w, op, "w")) ||
        (st = gpucore_check_tensor(y, op, "y")))
        return st;
    if (aux && (st = gpucore_check_tensor(aux, op, "aux"))) return st;
    if (act != GPUCORE_ACT_NONE && act != GPUCORE_ACT_RELU && act != GPUCORE_ACT_GELU_TANH)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: activation %d cannot be fused; use GPUCORE_ACT_NONE, "
                                 "GPUCORE_ACT_RELU or GPUCORE_ACT_GELU_TANH (the GELU form the GEMM epilogue computes)",
                                 op, (int)act);
    if (aux && act != GPUCORE_ACT_GELU_TANH)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: aux holds the GELU input; it is only written with "
                                 "GPUCORE_ACT_GELU_TANH", op);
    if (w->ndim != 2)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: w has %d dims; it must be [out, in]", op, (int)w->ndim);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: x has %lld features but w is [%lld, %lld] ([out, in])",
                                 op, (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)w->shape[0],
                                 (long long)w->shape[1]);
    if (bias && (st = gpucore_check_tensor(bias, op, "bias"))) return st;
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: bias has %lld elements but w has %lld outputs", op,
                                 (long long)gpucore_tensor_numel_unchecked(bias), (long long)w->shape[0]);
    gpucore_tensor *x2 = NULL, *y2 = NULL, *aux2 = NULL;
    if ((st = as_rows(x, op, "x", &x2)) || (st = as_rows(y, op, "y", &y2)) || (aux && (st = as_rows(aux, op, "aux", &aux2))))
        goto out;
    gpucore_matmul_options o;
    gpucore_matmul_options_init(&o);
    o.trans_b = 1;
    o.bias = bias;
    o.aux = aux2;
    if (act == GPUCORE_ACT_NONE) o.epilogue = bias ? GPUCORE_EPILOGUE_BIAS : GPUCORE_EPILOGUE_NONE;
    else if (act == GPUCORE_ACT_RELU) o.epilogue = bias ? GPUCORE_EPILOGUE_BIAS_RELU : GPUCORE_EPILOGUE_RELU;
    else o.epilogue = bias ? GPUCORE_EPILOGUE_BIAS_GELU : GPUCORE_EPILOGUE_GELU;
    st = matmul_impl(op, x2, w, y2, &o, stream);
out:
    if (x2) gpucore_tensor_destroy(x2);
    if (y2) gpucore_tensor_destroy(y2);
    if (aux2) gpucore_tensor_destroy(aux2);
    return st;
}

gpucore_status gpucore_linear_backward(const gpucore_tensor *dy, const gpucore_tensor *x, const gpucore_tensor *w,
                                       const gpucore_tensor *x_gelu_aux, gpucore_tensor *dx, gpucore_tensor *dw,
                                       gpucore_tensor *db, gpucore_stream *stream)
{
    const char *op = "linear_backward";
    gpucore_status st;
    if ((st = gpucore_check_tensor(dy, op, "dy")) || (st = gpucore_check_tensor(w, op, "w"))) return st;
    if (dw && !x) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: dw needs x, which is NULL", op);
    if (x && (st = gpucore_check_tensor(x, op, "x"))) return st;
    if (db && !dw)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: db is computed by dw's GEMM (its bias-gradient "
                                 "epilogue); pass dw too", op);
    if (x_gelu_aux && !dx)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: x_gelu_aux only changes dx, which is NULL", op);
    if (w->ndim != 2)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: w has %d dims; it must be [out, in]", op, (int)w->ndim);
    if (dy->ndim < 1 || dy->shape[dy->ndim - 1] != w->shape[0])
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: dy has %lld features but w has %lld outputs", op,
                                 (long long)(dy->ndim ? dy->shape[dy->ndim - 1] : 0), (long long)w->shape[0]);
    gpucore_tensor *dy2 = NULL, *x2 = NULL, *dx2 = NULL, *aux2 = NULL, *dyt = NULL;
    void *prof = gpucore_prof_begin(dy->ctx, stream, op, gpucore_prof_bytes(dy) + gpucore_prof_bytes(x) + gpucore_prof_bytes(w) +
                                                             gpucore_prof_bytes(dx) + gpucore_prof_bytes(dw));
    if ((st = as_rows(dy, op, "dy", &dy2))) goto out;
    if (dx) {
        if ((st = as_rows(dx, op, "dx", &dx2))) goto out;
        if (x_gelu_aux && (st = as_rows(x_gelu_aux, op, "x_gelu_aux", &aux2))) goto out;
        gpucore_matmul_options o;
        gpucore_matmul_options_init(&o);
        if (aux2) {
            o.epilogue = GPUCORE_EPILOGUE_DGELU;
            o.aux = aux2;
        }
        if ((st = matmul_impl(op, dy2, w, dx2, &o, stream))) goto out; /* dx = dy·W */
    }
    if (dw) {
        if ((st = as_rows(x, op, "x", &x2))) goto out;
        if ((st = gpucore_tensor_transpose(dy2, 0, 1, &dyt))) goto out;
        gpucore_matmul_options o;
        gpucore_matmul_options_init(&o);
        if (db) {
            o.epilogue = GPUCORE_EPILOGUE_BGRAD_A; /* db[n] = Σ_t dyᵀ[n, t] */
            o.bias_grad = db;
        }
        if ((st = matmul_impl(op, dyt, x2, dw, &o, stream))) goto out; /* dW = dyᵀ·x */
    }
out:
    gpucore_prof_end(dy->ctx, prof);
    if (dy2) gpucore_tensor_destroy(dy2);
    if (dyt) gpucore_tensor_destroy(dyt);
    if (x2) gpucore_tensor_destroy(x2);
    if (dx2) gpucore_tensor_destroy(dx2);
    if (aux2) gpucore_tensor_destroy(aux2);
    return st;
}

/* ---- fallback-kernel statistics ---- */

gpucore_status gpucore_matmul_get_stats(gpucore_context *ctx, gpucore_matmul_stats *stats)
{
    return ops_engine_stats_get(ctx, OPS_STATS_MATMUL, stats);
}

gpucore_status gpucore_matmul_reset_stats(gpucore_context *ctx)
{
    return ops_engine_stats_reset(ctx, OPS_STATS_MATMUL);
}

const char *gpucore_matmul_fallback_reason_text(int reason)
{
    switch (reason) {
    case GPUCORE_MATMUL_FALLBACK_NO_ALGORITHM: return "cuBLASLt has no algorithm for the shape, epilogue, dtypes "
                                                      "or alignment";
    case GPUCORE_MATMUL_FALLBACK_AUX_LD: return "cuBLASLt takes an aux leading dimension only when it is a multiple "
                                                "of 8 and at least the rows";
    case GPUCORE_MATMUL_FALLBACK_WORKSPACE: return "every cuBLASLt algorithm wants more workspace than is set";
    case GPUCORE_MATMUL_FALLBACK_REFUSED: return "cublasLtMatmul refused every algorithm the heuristic offered";
    case GPUCORE_MATMUL_FALLBACK_BATCH: return "more than INT32_MAX batches";
    default: return "unknown reason";
    }
}
