/*
 * standin_cublaslt.c — a strict stand-in for the cuBLASLt calls of the CUDA
 * backend (compiled against the real cublasLt.h, CUDA 13.0 / cuBLAS 13.1).
 *
 * Checked: live handles and descriptors; every attribute's size and value
 * against its documented type; layout shape/ld rules; operand types; epilogue
 * bias type and aux leading dimension; fp8 layout (TN) and scale rules; the
 * heuristic records the alignment of A/B/C/D it was asked for and of the
 * bias/aux/scale pointers it saw (cublasLt.h:1334, 1364: the heuristic "depends
 * on its value to determine expected pointer alignment"), and cublasLtMatmul
 * refuses pointers that do not match; workspace bound; every device pointer's
 * range; handle, stream and current device agree.
 * Executed: the described GEMM and epilogue, in double, in stream order.
 * Not known: the real library's algorithms, their numerics (TF32 rounding,
 * fp8 accumulation order) and speed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include "gemm_desc.h"
#include "numeric.h"
#include "standin.h"

/* The vendor entry points are exported, as the real libraries export them (tests call them directly). */
#pragma GCC visibility push(default)

#define LT_MAGIC 0x4c544d4du
#define ALGO_MAGIC 0x414c474fu
#define H "cublasLt.h"

struct cublasLtContext { unsigned magic; int device; };

typedef struct lt_desc {
    unsigned magic;
    int32_t compute, scale_type, pointer_mode;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias; int32_t bias_type; int64_t bias_stride;
    void *aux; int64_t aux_ld, aux_stride; int32_t aux_type;
    const void *scale_a, *scale_b, *scale_c, *scale_d; void *amax_d;
    int8_t fast_accum;
} lt_desc;

typedef struct lt_layout { unsigned magic; int32_t type; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; int32_t order; } lt_layout;
typedef struct lt_pref { unsigned magic; uint64_t max_ws; uint32_t align[4]; } lt_pref;

static standin_set live = STANDIN_SET_INIT;

static int bad_handle(const char *api, const void *p, const char *what)
{
    if (standin_set_has(&live, (void *)p)) return 0;
    standin_violation(api, H, "%s %p is not a live cuBLASLt object (destroyed, or never created)", what, p);
    return 1;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    standin_api_enter("cublasLtCreate");
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *c = calloc(1, sizeof *c);
    c->magic = LT_MAGIC;
    c->device = standin_current_device(); /* a handle belongs to the device current at creation */
    standin_set_add(&live, c);
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    if (!standin_set_remove(&live, h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void) { return CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH; }

/* ---- descriptors ---- */

static void *lt_new(size_t size, unsigned magic)
{
    unsigned *p = calloc(1, size);
    *p = magic;
    standin_set_add(&live, p);
    return p;
}

static cublasStatus_t lt_free(const char *api, void *p)
{
    if (bad_handle(api, p, "descriptor")) return CUBLAS_STATUS_INVALID_VALUE;
    standin_set_remove(&live, p);
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

static int is_type(int32_t t)
{
    return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF || t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2;
}
static int type_size(int32_t t) { return t == CUDA_R_32F ? 4 : (t == CUDA_R_16F || t == CUDA_R_16BF) ? 2 : 1; }
static int is_fp8(int32_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale)
{
    standin_api_enter("cublasLtMatmulDescCreate");
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_32F_FAST_16F &&
        compute != CUBLAS_COMPUTE_32F_FAST_16BF) {
        standin_violation("cublasLtMatmulDescCreate", H ":1274", "compute type %d is not one the stand-in models", (int)compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    lt_desc *x = lt_new(sizeof *x, LT_MAGIC);
    x->compute = compute;
    x->scale_type = scale;
    x->bias_type = -1;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return lt_free("cublasLtMatmulDescDestroy", d); }

/* An attribute's buffer must be exactly its documented type's size. */
static int size_ok(const char *api, const char *where, const char *name, size_t got, size_t want)
{
    if (got == want) return 1;
    standin_violation(api, where, "%s is %zu bytes per the header, sizeInBytes was %zu", name, want, got);
    return 0;
}

#define ATTR(where, name, type, field)                                                                 \
    do {                                                                                               \
        if (!size_ok(api, H ":" where, name, n, sizeof(type))) return CUBLAS_STATUS_INVALID_VALUE;      \
        type v_;                                                                                       \
        memcpy(&v_, buf, sizeof v_);                                                                   \
        x->field = v_;                                                                                 \
    } while (0)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n)
{
    const char *api = "cublasLtMatmulDescSetAttribute";
    standin_api_enter(api);
    if (bad_handle(api, d, "matmul descriptor") || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc *x = (lt_desc *)d;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ATTR("1295", "TRANSA (int32_t)", int32_t, transa); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ATTR("1301", "TRANSB (int32_t)", int32_t, transb); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ATTR("1321", "EPILOGUE (uint32_t)", uint32_t, epilogue); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ATTR("1340", "BIAS_POINTER (void *)", const void *, bias); break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: ATTR("1348", "BIAS_BATCH_STRIDE (int64_t)", int64_t, bias_stride); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ATTR("1372", "EPILOGUE_AUX_POINTER (void *)", void *, aux); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ATTR("1386", "EPILOGUE_AUX_LD (int64_t)", int64_t, aux_ld); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: ATTR("1400", "EPILOGUE_AUX_BATCH_STRIDE (int64_t)", int64_t, aux_stride); break;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: ATTR("1430", "A_SCALE_POINTER (void *)", const void *, scale_a); break;
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: ATTR("1443", "B_SCALE_POINTER (void *)", const void *, scale_b); break;
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: ATTR("1481", "AMAX_D_POINTER (void *)", void *, amax_d); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: ATTR("1501", "EPILOGUE_AUX_DATA_TYPE (int32_t)", int32_t, aux_type); break;
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: ATTR("1533", "FAST_ACCUM (int8_t)", int8_t, fast_accum); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ATTR("1547", "BIAS_DATA_TYPE (int32_t)", int32_t, bias_type); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: ATTR("1289", "POINTER_MODE (int32_t)", int32_t, pointer_mode); break;
    default:
        standin_violation(api, H, "attribute %d is not modelled by the stand-in", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if ((a == CUBLASLT_MATMUL_DESC_TRANSA || a == CUBLASLT_MATMUL_DESC_TRANSB) &&
        ((a == CUBLASLT_MATMUL_DESC_TRANSA ? x->transa : x->transb) & ~1)) {
        standin_violation(api, H ":1295", "TRANSA/TRANSB must be CUBLAS_OP_N or CUBLAS_OP_T here");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (a == CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE && !is_type(x->bias_type)) {
        standin_violation(api, H ":1547", "bias data type %d is not a cudaDataType the stand-in knows", (int)x->bias_type);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
    standin_api_enter("cublasLtMatrixLayoutCreate");
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    if (!is_type(type)) {
        standin_violation("cublasLtMatrixLayoutCreate", H ":1113", "data type %d not modelled", (int)type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (ld < 0 || (uint64_t)ld < rows) {
        standin_violation("cublasLtMatrixLayoutCreate", H ":1143", "ld %lld is smaller than rows %llu (column order: \"greater "
                          "or equal to CUBLASLT_MATRIX_LAYOUT_ROWS\")", (long long)ld, (unsigned long long)rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    lt_layout *x = lt_new(sizeof *x, LT_MAGIC);
    *x = (lt_layout){LT_MAGIC, type, rows, cols, ld, 1, 0, CUBLASLT_ORDER_COL};
    *l = (cublasLtMatrixLayout_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { return lt_free("cublasLtMatrixLayoutDestroy", l); }

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t n)
{
    const char *api = "cublasLtMatrixLayoutSetAttribute";
    standin_api_enter(api);
    if (bad_handle(api, l, "matrix layout") || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout *x = (lt_layout *)l;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: ATTR("1155", "BATCH_COUNT (int32_t)", int32_t, batch); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ATTR("1171", "STRIDED_BATCH_OFFSET (int64_t)", int64_t, stride); break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: ATTR("1113", "ORDER (int32_t)", int32_t, order); break;
    default:
        standin_violation(api, H, "layout attribute %d is not modelled by the stand-in", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (x->batch < 1) {
        standin_violation(api, H ":1155", "batch count %d is below 1", (int)x->batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    standin_api_enter("cublasLtMatmulPreferenceCreate");
    if (!p) return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *x = lt_new(sizeof *x, LT_MAGIC);
    for (int i = 0; i < 4; i++) x->align[i] = 256; /* default: 256-byte alignment assumed */
    *p = (cublasLtMatmulPreference_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    return lt_free("cublasLtMatmulPreferenceDestroy", p);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n)
{
    const char *api = "cublasLtMatmulPreferenceSetAttribute";
    standin_api_enter(api);
    if (bad_handle(api, p, "preference") || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref *x = (lt_pref *)p;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ATTR("2088", "MAX_WORKSPACE_BYTES (uint64_t)", uint64_t, max_ws); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ATTR("2106", "MIN_ALIGNMENT_A_BYTES (uint32_t)", uint32_t, align[0]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ATTR("2106", "MIN_ALIGNMENT_B_BYTES (uint32_t)", uint32_t, align[1]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ATTR("2106", "MIN_ALIGNMENT_C_BYTES (uint32_t)", uint32_t, align[2]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ATTR("2106", "MIN_ALIGNMENT_D_BYTES (uint32_t)", uint32_t, align[3]); break;
    default:
        standin_violation(api, H, "preference attribute %d is not modelled by the stand-in", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the problem a descriptor set describes ---- */

static int log2_align(const void *p)
{
    if (!p) return 0xff; /* "not set" */
    uintptr_t u = (uintptr_t)p;
    int l = 0;
    while (l < 8 && !(u & ((uintptr_t)1 << l))) l++;
    return l; /* alignment 2^l, capped at 256 */
}

/* Everything that must hold for the heuristic and again for the matmul. Returns 0 or a status. */
static cublasStatus_t check_problem(const char *api, const lt_desc *d, const lt_layout *a, const lt_layout *b,
                                    const lt_layout *c, const lt_layout *o)
{
    uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
    uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
    if (am != o->rows || bn != o->cols || ak != bk || c->rows != o->rows || c->cols != o->cols) {
        standin_violation(api, H ":1011", "shapes do not chain: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
                          (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn,
                          (unsigned long long)c->rows, (unsigned long long)c->cols, (unsigned long long)o->rows,
                          (unsigned long long)o->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (a->batch != o->batch || b->batch != o->batch || c->batch != o->batch) {
        standin_violation(api, H ":1155", "batch counts differ (A %d, B %d, C %d, D %d)", a->batch, b->batch, c->batch, o->batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    const int fp8 = is_fp8(a->type) || is_fp8(b->type);
    if (c->type != o->type || (!fp8 && a->type != b->type) || (fp8 && !(is_fp8(a->type) && is_fp8(b->type))) ||
        (a->type == CUDA_R_32F && o->type != CUDA_R_32F) || is_fp8(o->type)) {
        standin_violation(api, "cuBLAS docs cublasLtMatmul type table", "type combination A %d, B %d, C %d, D %d is not "
                          "supported", (int)a->type, (int)b->type, (int)c->type, (int)o->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (fp8) {
        if (!d->transa || d->transb) {
            standin_violation(api, "cuBLAS docs cublasLtMatmul fp8", "fp8 needs A transposed and B not (\"TN\"); got %s%s",
                              d->transa ? "T" : "N", d->transb ? "T" : "N");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if ((a->ld % 16) || (b->ld % 16)) {
            standin_violation(api, "cuBLAS docs cublasLtMatmul fp8", "fp8 leading dimensions must be multiples of 16 "
                              "(lda %lld, ldb %lld)", (long long)a->ld, (long long)b->ld);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    const uint32_t e = d->epilogue;
    const int has_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
                         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD ||
                         e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
    if (has_bias) {
        /* cublasLt.h:1539-1546: the bias is D's type, except fp8 with an f32 output (bf16 bias) */
        int32_t want = fp8 && o->type == CUDA_R_32F ? CUDA_R_16BF : o->type;
        int32_t got = d->bias_type == -1 ? o->type : d->bias_type;
        if (got != want) {
            standin_violation(api, H ":1539", "bias data type %d, but D is %d%s: the bias must be %d", (int)got, (int)o->type,
                              fp8 && o->type == CUDA_R_32F ? " with fp8 inputs (the fp8 -> f32 exception: bf16 bias)" : "",
                              (int)want);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    const int has_aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                        e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    if (has_aux && (d->aux_ld < (int64_t)o->rows || d->aux_ld % 8)) {
        standin_violation(api, H ":1382", "EPILOGUE_AUX_LD %lld: \"Must be divisible by 8 and be no less than the number of "
                          "rows in the output matrix\" (%llu)", (long long)d->aux_ld, (unsigned long long)o->rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

static int epi_has_aux(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
static int epi_has_bias(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA ||
           e == CUBLASLT_EPILOGUE_BGRADB;
}

/* The pointers whose alignment the heuristic derives from the descriptor (cublasLt.h:1334, 1364, 1425...). */
enum { P_BIAS, P_AUX, P_SCALE_A, P_SCALE_B, P_AMAX, NPTR };
static const char *const ptr_names[NPTR] = {"BIAS_POINTER", "EPILOGUE_AUX_POINTER", "A_SCALE_POINTER", "B_SCALE_POINTER",
                                            "AMAX_D_POINTER"};
static const char *const ptr_lines[NPTR] = {H ":1334", H ":1364", H ":1425", H ":1438", H ":1477"};
static void desc_ptrs(const lt_desc *d, const void *out[NPTR])
{
    out[P_BIAS] = d->bias;
    out[P_AUX] = d->aux;
    out[P_SCALE_A] = d->scale_a;
    out[P_SCALE_B] = d->scale_b;
    out[P_AMAX] = d->amax_d;
}

/* algo.data: [0] magic, [1] descriptor, [2] workspace bytes, [3] A..D alignments asked (log2, 8 bits each),
 * [4] the descriptor pointers' alignments seen (log2 or 0xff for NULL, 8 bits each). */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, cublasLtMatrixLayout_t la,
                                              cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                              cublasLtMatrixLayout_t ld, cublasLtMatmulPreference_t pp, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *count)
{
    const char *api = "cublasLtMatmulAlgoGetHeuristic";
    standin_api_enter(api);
    if (bad_handle(api, h, "handle") || bad_handle(api, dd, "matmul descriptor") || bad_handle(api, la, "layout A") ||
        bad_handle(api, lb, "layout B") || bad_handle(api, lc, "layout C") || bad_handle(api, ld, "layout D") ||
        bad_handle(api, pp, "preference") || requested < 1 || !results || !count)
        return CUBLAS_STATUS_INVALID_VALUE;
    *count = 0;
    const lt_desc *d = (const lt_desc *)dd;
    const lt_pref *p = (const lt_pref *)pp;
    cublasStatus_t st = check_problem(api, d, (lt_layout *)la, (lt_layout *)lb, (lt_layout *)lc, (lt_layout *)ld);
    if (st) return st;
    if (getenv("STANDIN_LT_NO_ALGO")) return CUBLAS_STATUS_NOT_SUPPORTED; /* drives the fallback path */
    const void *ptrs[NPTR];
    desc_ptrs(d, ptrs);
    uint64_t seen = 0, asked = 0;
    for (int i = 0; i < NPTR; i++) seen |= (uint64_t)log2_align(ptrs[i]) << (8 * i);
    for (int i = 0; i < 4; i++) {
        int l = 0;
        while (l < 8 && (1u << l) < p->align[i]) l++;
        asked |= (uint64_t)l << (8 * i);
    }
    int n = requested < 3 ? requested : 3;
    for (int r = 0; r < n; r++) {
        memset(&results[r], 0, sizeof results[r]);
        /* algorithm r wants min(max workspace, r MiB) */
        uint64_t ws = (uint64_t)r << 20;
        results[r].workspaceSize = ws < p->max_ws ? ws : p->max_ws;
        uint64_t *a = results[r].algo.data;
        a[0] = ALGO_MAGIC | ((uint64_t)r << 32);
        a[1] = (uint64_t)(uintptr_t)d;
        a[2] = results[r].workspaceSize;
        a[3] = asked;
        a[4] = seen;
        results[r].state = CUBLAS_STATUS_SUCCESS;
        results[r].wavesCount = 1.0f;
    }
    *count = n;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cublasLtMatmul: check, then compute in stream order ---- */

static double load(int32_t t, const void *base, int64_t i)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)base)[i];
    case CUDA_R_16F: return gpucore_f16_to_f32(((const uint16_t *)base)[i]);
    case CUDA_R_16BF: return gpucore_bf16_to_f32(((const uint16_t *)base)[i]);
    default: {
        uint8_t v = ((const uint8_t *)base)[i];
        int s = v >> 7, e4 = t == CUDA_R_8F_E4M3;
        int eb = e4 ? 4 : 5, mb = 7 - eb, bias = e4 ? 7 : 15;
        int ex = (v >> mb) & ((1 << eb) - 1), m = v & ((1 << mb) - 1);
        double r;
        if (e4 && ex == 15 && m == 7) r = NAN;
        else if (!e4 && ex == 31) r = m ? NAN : INFINITY;
        else if (ex == 0) r = ldexp((double)m / (1 << mb), 1 - bias);
        else r = ldexp(1.0 + (double)m / (1 << mb), ex - bias);
        return s ? -r : r;
    }
    }
}

static void store(int32_t t, void *base, int64_t i, float v)
{
    if (t == CUDA_R_32F) ((float *)base)[i] = v;
    else if (t == CUDA_R_16F) ((uint16_t *)base)[i] = gpucore_f32_to_f16(v);
    else ((uint16_t *)base)[i] = gpucore_f32_to_bf16(v);
}

static uint32_t gpucore_epilogue_bits(uint32_t e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return GPUCORE_GEMM_EPI_BIAS;
    case CUBLASLT_EPILOGUE_RELU: return GPUCORE_GEMM_EPI_RELU;
    case CUBLASLT_EPILOGUE_RELU_BIAS: return GPUCORE_GEMM_EPI_RELU | GPUCORE_GEMM_EPI_BIAS;
    case CUBLASLT_EPILOGUE_GELU: return GPUCORE_GEMM_EPI_GELU;
    case CUBLASLT_EPILOGUE_GELU_AUX: return GPUCORE_GEMM_EPI_GELU | GPUCORE_GEMM_EPI_AUX_OUT;
    case CUBLASLT_EPILOGUE_GELU_BIAS: return GPUCORE_GEMM_EPI_GELU | GPUCORE_GEMM_EPI_BIAS;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return GPUCORE_GEMM_EPI_GELU | GPUCORE_GEMM_EPI_AUX_OUT | GPUCORE_GEMM_EPI_BIAS;
    case CUBLASLT_EPILOGUE_DGELU: return GPUCORE_GEMM_EPI_DGELU;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return GPUCORE_GEMM_EPI_DGELU | GPUCORE_GEMM_EPI_BGRAD_D;
    case CUBLASLT_EPILOGUE_BGRADA: return GPUCORE_GEMM_EPI_BGRAD_A;
    case CUBLASLT_EPILOGUE_BGRADB: return GPUCORE_GEMM_EPI_BGRAD_B;
    default: return 0;
    }
}

typedef struct mm_job {
    lt_desc d;
    lt_layout a, b, c, o;
    const void *pa, *pb, *pc;
    void *pd;
    float alpha, beta;
} mm_job;

static int mm_task(void *arg)
{
    mm_job *j = *(mm_job **)arg;
    const lt_desc *d = &j->d;
    const uint64_t m = j->o.rows, n = j->o.cols, k = d->transa ? j->a.rows : j->a.cols;
    const uint32_t epi = gpucore_epilogue_bits(d->epilogue);
    const int32_t bias_t = d->bias_type == -1 ? j->o.type : d->bias_type, aux_t = d->aux_type ? d->aux_type : j->o.type;
    const double scale = (d->scale_a ? *(const float *)d->scale_a : 1.0) * (d->scale_b ? *(const float *)d->scale_b : 1.0);
    double amax = 0;
    for (int32_t bt = 0; bt < j->o.batch; bt++) {
        const char *A = (const char *)j->pa + bt * j->a.stride * type_size(j->a.type);
        const char *B = (const char *)j->pb + bt * j->b.stride * type_size(j->b.type);
        const char *C = (const char *)j->pc + bt * j->c.stride * type_size(j->c.type);
        char *D = (char *)j->pd + bt * j->o.stride * type_size(j->o.type);
        char *aux = d->aux ? (char *)d->aux + bt * d->aux_stride * type_size(aux_t) : NULL;
        const char *bias = d->bias ? (const char *)d->bias + bt * d->bias_stride * type_size(bias_t) : NULL;
        for (uint64_t jj = 0; jj < n; jj++)
            for (uint64_t i = 0; i < m; i++) {
                double acc = 0;
                for (uint64_t p = 0; p < k; p++)
                    acc += load(j->a.type, A, d->transa ? (int64_t)(p + i * j->a.ld) : (int64_t)(i + p * j->a.ld)) *
                           load(j->b.type, B, d->transb ? (int64_t)(jj + p * j->b.ld) : (int64_t)(p + jj * j->b.ld));
                acc = j->alpha * acc * scale;
                if (j->beta != 0.0f) acc += j->beta * load(j->c.type, C, (int64_t)(i + jj * j->c.ld));
                int64_t ai = (int64_t)(i + jj * d->aux_ld);
                float aux_in = (epi & GPUCORE_GEMM_EPI_DGELU) ? (float)load(aux_t, aux, ai) : 0.0f, aux_out = 0;
                float bv = (epi & GPUCORE_GEMM_EPI_BIAS) ? (float)load(bias_t, bias, (int64_t)i) : 0.0f;
                float v = gpucore_gemm_epilogue_value(epi, (float)acc, bv, aux_in, &aux_out);
                if (epi & GPUCORE_GEMM_EPI_AUX_OUT) store(aux_t, aux, ai, aux_out);
                if (fabs(v) > amax) amax = fabs(v);
                store(j->o.type, D, (int64_t)(i + jj * j->o.ld), v);
            }
        if (epi & (GPUCORE_GEMM_EPI_BGRAD_D | GPUCORE_GEMM_EPI_BGRAD_A | GPUCORE_GEMM_EPI_BGRAD_B)) {
            void *bg = (void *)bias;
            uint64_t len = (epi & GPUCORE_GEMM_EPI_BGRAD_B) ? n : m;
            for (uint64_t i = 0; i < len; i++) {
                double s = 0;
                if (epi & GPUCORE_GEMM_EPI_BGRAD_D)
                    for (uint64_t jj = 0; jj < n; jj++) s += load(j->o.type, D, (int64_t)(i + jj * j->o.ld));
                else if (epi & GPUCORE_GEMM_EPI_BGRAD_A)
                    for (uint64_t p = 0; p < k; p++)
                        s += load(j->a.type, A, d->transa ? (int64_t)(p + i * j->a.ld) : (int64_t)(i + p * j->a.ld));
                else
                    for (uint64_t p = 0; p < k; p++)
                        s += load(j->b.type, B, d->transb ? (int64_t)(i + p * j->b.ld) : (int64_t)(p + i * j->b.ld));
                store(bias_t, bg, (int64_t)i, (float)s);
            }
        }
    }
    if (d->amax_d) *(float *)d->amax_d = (float)amax;
    free(j);
    standin_count("lt_matmul_executed");
    return 0;
}

static size_t layout_bytes(const lt_layout *l)
{
    if (!l->rows || !l->cols) return 0;
    uint64_t elems = (uint64_t)(l->batch - 1) * (uint64_t)l->stride + (l->cols - 1) * (uint64_t)l->ld + l->rows;
    return (size_t)(elems * (uint64_t)type_size(l->type));
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,
                              const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream)
{
    const char *api = "cublasLtMatmul";
    standin_api_enter(api);
    if (bad_handle(api, h, "handle") || bad_handle(api, dd, "matmul descriptor") || bad_handle(api, la, "layout A") ||
        bad_handle(api, lb, "layout B") || bad_handle(api, lc, "layout C") || bad_handle(api, ld, "layout D") ||
        !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    const lt_desc *d = (const lt_desc *)dd;
    const lt_layout *a = (lt_layout *)la, *b = (lt_layout *)lb, *c = (lt_layout *)lc, *o = (lt_layout *)ld;
    struct CUstream_st *s = standin_stream(api, stream);
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    if (h->device != standin_current_device() || standin_stream_device(s) != h->device) {
        standin_violation(api, H ":69", "handle created on device %d used while device %d is current, on a stream of "
                          "device %d (a cuBLASLt handle is bound to the device current at cublasLtCreate)", h->device,
                          standin_current_device(), standin_stream_device(s));
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    cublasStatus_t st = check_problem(api, d, a, b, c, o);
    if (st) return st;
    if (!algo || (algo->data[0] & 0xffffffffu) != ALGO_MAGIC) {
        standin_violation(api, H ":2227", "algo was not returned by cublasLtMatmulAlgoGetHeuristic");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* STANDIN_LT_REFUSE="0,2": those algorithms answer NOT_SUPPORTED at run time (a legitimate refusal) */
    const char *refuse = getenv("STANDIN_LT_REFUSE");
    if (refuse && strchr(refuse, (char)('0' + (int)(algo->data[0] >> 32)))) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* alignment the heuristic was asked for (preference) vs what is passed now */
    const void *mats[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        int asked = (int)((algo->data[3] >> (8 * i)) & 0xff), now = log2_align(mats[i]);
        if (now != 0xff && now < asked) {
            standin_violation(api, H ":2106", "%c is %d-byte aligned but the heuristic was asked for %d-byte alignment "
                              "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", "ABCD"[i], 1 << now, 1 << asked, "ABCD"[i]);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    /* descriptor pointers: their value when the heuristic ran decided the expected alignment */
    const void *ptrs[NPTR];
    desc_ptrs(d, ptrs);
    for (int i = 0; i < NPTR; i++) {
        int seen = (int)((algo->data[4] >> (8 * i)) & 0xff), now = log2_align(ptrs[i]);
        if (now == 0xff) continue;
        if (seen == 0xff || now < seen) {
            standin_violation(api, ptr_lines[i], "%s is %p (%d-byte aligned) but was %s when the algorithm was chosen: "
                              "\"Routines that don't dereference this pointer, like cublasLtMatmulAlgoGetHeuristic() "
                              "depend on its value to determine expected pointer alignment\"", ptr_names[i], ptrs[i],
                              1 << now, seen == 0xff ? "NULL" : "more aligned");
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    if (ws_bytes < algo->data[2]) {
        standin_violation(api, H ":2231", "workspace of %zu bytes is smaller than the algorithm's workspaceSize %llu",
                          ws_bytes, (unsigned long long)algo->data[2]);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ws_bytes && !standin_check_device_range(api, H ":1011", "workspace", ws, ws_bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!standin_check_device_range(api, H ":1011", "A", A, layout_bytes(a)) ||
        !standin_check_device_range(api, H ":1011", "B", B, layout_bytes(b)) ||
        !standin_check_device_range(api, H ":1011", "D", D, layout_bytes(o)))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float be = *(const float *)beta;
    if (be != 0.0f && !standin_check_device_range(api, H ":1011", "C", C, layout_bytes(c))) return CUBLAS_STATUS_INVALID_VALUE;
    const int fp8 = is_fp8(a->type);
    const int32_t bias_t = d->bias_type == -1 ? o->type : d->bias_type;
    if (epi_has_bias(d->epilogue)) {
        uint64_t len = d->epilogue == CUBLASLT_EPILOGUE_BGRADB ? o->cols : o->rows;
        if (!d->bias) {
            standin_violation(api, H ":1340", "epilogue %u needs BIAS_POINTER", d->epilogue);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if (!standin_check_device_range(api, H ":1340", "bias", d->bias, (size_t)(len * (uint64_t)type_size(bias_t))))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (epi_has_aux(d->epilogue)) {
        int32_t aux_t = d->aux_type ? d->aux_type : o->type;
        size_t bytes = (size_t)(((o->cols - 1) * (uint64_t)d->aux_ld + o->rows +
                                 (uint64_t)(o->batch - 1) * (uint64_t)d->aux_stride) * (uint64_t)type_size(aux_t));
        if (!d->aux) {
            standin_violation(api, H ":1372", "epilogue %u needs EPILOGUE_AUX_POINTER", d->epilogue);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        if (!standin_check_device_range(api, H ":1372", "aux", d->aux, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((d->scale_a && !standin_check_device_range(api, H ":1430", "A scale", d->scale_a, 4)) ||
        (d->scale_b && !standin_check_device_range(api, H ":1443", "B scale", d->scale_b, 4)) ||
        (d->amax_d && !standin_check_device_range(api, H ":1481", "amax", d->amax_d, 4)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!fp8 && (d->scale_a || d->scale_b || d->amax_d)) {
        standin_violation(api, H ":1425", "scale/amax pointers set for non-fp8 operands");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    /* AMAX_D is computed for fp8 outputs only (cuBLAS's fp8 type table; TransformerEngine sets it only then):
     * "If set for an unsupported matrix data, scale, and compute type combination, calling cublasLtMatmul()
     * will return CUBLAS_INVALID_VALUE" */
    if (d->amax_d && !is_fp8(o->type)) {
        standin_violation(api, H ":1476", "AMAX_D_POINTER set with a D of type %d, not fp8: an unsupported combination "
                          "(\"calling cublasLtMatmul() will return CUBLAS_INVALID_VALUE\")", (int)o->type);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    mm_job *j = malloc(sizeof *j);
    if (!j) return CUBLAS_STATUS_ALLOC_FAILED;
    *j = (mm_job){*d, *a, *b, *c, *o, A, B, C, D, *(const float *)alpha, be};
    standin_count("lt_matmul");
    if (standin_stream_enqueue(s, mm_task, &j, sizeof j)) { free(j); return CUBLAS_STATUS_ALLOC_FAILED; }
    return CUBLAS_STATUS_SUCCESS;
}
