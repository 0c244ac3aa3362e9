/*
 * matmul_nd.c — torch.matmul's shape rules on top of gpucore_matmul: 1-d
 * operands (a row [1, K] on the left, a column [K, 1] on the right, the added
 * dim dropped from the result; both 1-d is a dot product with a 0-d result)
 * and batch dims of any count that broadcast numpy-style. Each operand becomes
 * a strided view (no copy) as a 2-d matrix (no batch dims, or every batch dim
 * broadcast: the GEMM reuses it for each batch) or a 3-d [batch, rows, cols]
 * view when its batch dims merge into one stride; only an operand whose
 * broadcast batch dims do not merge is copied (expanded) into a dense block,
 * and d likewise, so the work is one (batched) GEMM.
 */
#include <string.h>
#include "ops_internal.h"

/* A view sharing t's storage and offset with the given geometry (elements). */
static gpucore_status view_geometry(const gpucore_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                                    gpucore_tensor **out)
{
    gpucore_tensor *v = NULL;
    const int64_t one = 1; /* a 0-d t (a dot product's d) has no dim to slice */
    gpucore_status st = t->ndim ? gpucore_tensor_slice((gpucore_tensor *)t, 0, 0, INT64_MAX, 1, &v)
                                : gpucore_tensor_reshape((gpucore_tensor *)t, 1, &one, &v);
    if (st) return st;
    memset(v->shape, 0, sizeof v->shape);
    memset(v->strides, 0, sizeof v->strides);
    v->ndim = ndim;
    memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(v->strides, strides, sizeof(int64_t) * (size_t)ndim);
    *out = v;
    return GPUCORE_OK;
}

/* One operand (or d) seen as batch dims (broadcast to `batch`) + a 2-d matrix. */
typedef struct nd_operand {
    int nbd;                              /* batch dims after broadcasting */
    int64_t shape[GPUCORE_MAX_DIMS + 2];  /* batch..., rows, cols */
    int64_t strides[GPUCORE_MAX_DIMS + 2];
} nd_operand;

/* Whether the batch dims of x merge into one stride (*stride; 0 when every batch
 * dim is broadcast or of extent 1). */
static int batch_merges(const nd_operand *x, int64_t *stride)
{
    int inner = -1;
    *stride = 0;
    for (int i = x->nbd - 1; i >= 0; i--) {
        if (x->shape[i] <= 1) continue;
        if (inner < 0) *stride = x->strides[i];
        else if (x->strides[i] != x->strides[inner] * x->shape[inner]) return 0;
        inner = i;
    }
    return 1;
}

/* x (a geometry over src's storage) copied, expanded, into a new dense block
 * (*staged) and viewed as [nb, rows, cols] (*view). */
static gpucore_status nd_stage(const gpucore_tensor *src, const nd_operand *x, int64_t nb, gpucore_stream *s,
                               gpucore_tensor **view, gpucore_tensor **staged)
{
    const int r = x->nbd, nd = x->nbd + 2;
    gpucore_tensor *expanded = NULL;
    gpucore_status st = view_geometry(src, nd, x->shape, x->strides, &expanded);
    if (st) return st;
    if (!(st = gpucore_tensor_create(src->ctx, (gpucore_dtype)src->dtype, nd, x->shape, staged)))
        st = gpucore_copy(*staged, expanded, s);
    gpucore_tensor_destroy(expanded);
    if (!st) {
        int64_t sh3[3] = {nb, x->shape[r], x->shape[r + 1]}, st3[3] = {x->shape[r] * x->shape[r + 1], x->shape[r + 1], 1};
        st = view_geometry(*staged, 3, sh3, st3, view);
    }
    if (st && *staged) { gpucore_tensor_destroy(*staged); *staged = NULL; }
    return st;
}

/* x as the GEMM operand without a copy: 2-d when its batch is all broadcast (or
 * there is none; the GEMM reuses it for every batch), 3-d [nb, rows, cols] when
 * its batch dims merge into one stride; else the dense expanded copy. */
static gpucore_status nd_view(const gpucore_tensor *src, const nd_operand *x, int64_t nb, gpucore_stream *s,
                              gpucore_tensor **view, gpucore_tensor **staged)
{
    *view = *staged = NULL;
    const int r = x->nbd;
    int64_t bstride;
    if (!batch_merges(x, &bstride)) return nd_stage(src, x, nb, s, view, staged);
    if (bstride == 0) {
        int64_t sh2[2] = {x->shape[r], x->shape[r + 1]}, st2[2] = {x->strides[r], x->strides[r + 1]};
        return view_geometry(src, 2, sh2, st2, view);
    }
    int64_t sh3[3] = {nb, x->shape[r], x->shape[r + 1]}, st3[3] = {bstride, x->strides[r], x->strides[r + 1]};
    return view_geometry(src, 3, sh3, st3, view);
}

/* Row-major strides of shape (elements). */
static void dense_strides(int nd, const int64_t *shape, int64_t *strides)
{
    int64_t acc = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = acc;
        acc *= shape[i] > 1 ? shape[i] : 1;
    }
}

/* t's geometry as an nd_operand over `nbd` broadcast batch dims; vec_side: 1-d t
 * becomes a row (0) or a column (1). */
static void as_operand(const gpucore_tensor *t, int nbd, const int64_t *batch, int vec_side, nd_operand *x)
{
    memset(x, 0, sizeof *x);
    x->nbd = nbd;
    int64_t rows, cols, rs, cs;
    const int n = t->ndim;
    if (n == 1) { /* unit stride: row-major [1, K] / column-major [K, 1]; else the other order */
        const int64_t len = t->shape[0], s0 = t->strides[0], ld = len > 1 ? len : 1;
        rows = vec_side ? len : 1;
        cols = vec_side ? 1 : len;
        rs = vec_side ? s0 : (s0 == 1 ? ld : 1);
        cs = vec_side ? (s0 == 1 ? ld : 1) : s0;
    } else {
        rows = t->shape[n - 2];
        cols = t->shape[n - 1];
        rs = t->strides[n - 2];
        cs = t->strides[n - 1];
    }
    const int tb = n > 2 ? n - 2 : 0; /* t's own batch dims, right-aligned under batch */
    for (int i = 0; i < nbd; i++) {
        int j = i - (nbd - tb);
        x->shape[i] = batch[i];
        x->strides[i] = j >= 0 && t->shape[j] == batch[i] ? t->strides[j] : 0;
    }
    x->shape[nbd] = rows;
    x->shape[nbd + 1] = cols;
    x->strides[nbd] = rs;
    x->strides[nbd + 1] = cs;
}

gpucore_status gpucore_matmul_nd(const gpucore_tensor *a, const gpucore_tensor *b, gpucore_tensor *d,
                                 gpucore_stream *stream)
{
    const char *op = "matmul_nd";
    gpucore_status st = gpucore_check_tensor(a, op, "a");
    if (st || (st = gpucore_check_tensor(b, op, "b")) || (st = gpucore_check_tensor(d, op, "d"))) return st;
    char x[200], y[200], z[200];
    if (a->ndim < 1 || b->ndim < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: both operands need at least 1 dim, but a is %s and "
                                 "b is %s", op, gpucore_shape_str(a->ndim, a->shape, x, sizeof x),
                                 gpucore_shape_str(b->ndim, b->shape, y, sizeof y));
    const int64_t K = a->shape[a->ndim - 1], Kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (K != Kb)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: inner dimensions differ: a is %s and b is %s (a's "
                                 "last dim must equal b's %s)", op, gpucore_shape_str(a->ndim, a->shape, x, sizeof x),
                                 gpucore_shape_str(b->ndim, b->shape, y, sizeof y),
                                 b->ndim == 1 ? "only dim" : "second-to-last dim");
    /* broadcast batch dims, right-aligned */
    const int ab = a->ndim > 2 ? a->ndim - 2 : 0, bb = b->ndim > 2 ? b->ndim - 2 : 0, nbd = ab > bb ? ab : bb;
    int64_t batch[GPUCORE_MAX_DIMS], nb = 1;
    for (int i = 0; i < nbd; i++) {
        int ia = i - (nbd - ab), ib = i - (nbd - bb);
        int64_t ea = ia >= 0 ? a->shape[ia] : 1, eb = ib >= 0 ? b->shape[ib] : 1;
        if (ea != eb && ea != 1 && eb != 1)
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: batch dims do not broadcast: a is %s and b is %s",
                                     op, gpucore_shape_str(a->ndim, a->shape, x, sizeof x),
                                     gpucore_shape_str(b->ndim, b->shape, y, sizeof y));
        batch[i] = ea == 1 ? eb : ea;
        nb *= batch[i];
    }
    const int64_t M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    int64_t want[GPUCORE_MAX_DIMS + 2];
    int nw = nbd;
    memcpy(want, batch, sizeof(int64_t) * (size_t)nbd);
    if (a->ndim > 1) want[nw++] = M;
    if (b->ndim > 1) want[nw++] = N;
    if (d->ndim != nw || memcmp(d->shape, want, sizeof(int64_t) * (size_t)nw))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: a %s times b %s gives %s, but d has shape %s", op,
                                 gpucore_shape_str(a->ndim, a->shape, x, sizeof x),
                                 gpucore_shape_str(b->ndim, b->shape, y, sizeof y),
                                 gpucore_shape_str(nw, want, z, sizeof z),
                                 gpucore_shape_str(d->ndim, d->shape, x + 100, 100));
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(d->ctx, stream, op, &s))) return st;
    if (nb == 0 || M == 0 || N == 0) return GPUCORE_OK; /* d is empty */
    nd_operand oa, ob, od;
    as_operand(a, nbd, batch, 0, &oa);
    as_operand(b, nbd, batch, 1, &ob);
    /* d: batch + [M, N] with the dropped dims given extent 1 */
    memset(&od, 0, sizeof od);
    od.nbd = nbd;
    for (int i = 0; i < nbd; i++) { od.shape[i] = batch[i]; od.strides[i] = d->strides[i]; }
    od.shape[nbd] = M;
    od.shape[nbd + 1] = N;
    od.strides[nbd] = a->ndim > 1 ? d->strides[nbd] : N * (b->ndim > 1 ? d->strides[d->ndim - 1] : 1);
    od.strides[nbd + 1] = b->ndim > 1 ? d->strides[d->ndim - 1] : 1;
    int64_t dstride;
    const int d_direct = batch_merges(&od, &dstride) && (nb <= 1 || dstride != 0) && (N <= 1 || od.strides[nbd + 1] == 1);
    gpucore_tensor *va = NULL, *sa = NULL, *vb = NULL, *sb = NULL, *vd = NULL, *sd = NULL;
    if ((st = nd_view(a, &oa, nb, s, &va, &sa)) || (st = nd_view(b, &ob, nb, s, &vb, &sb))) goto done;
    const int batched = nb > 1 || va->ndim == 3 || vb->ndim == 3;
    if (batched && va->ndim == 2 && vb->ndim == 2) { /* every batch the same product: expand a */
        gpucore_tensor_destroy(va);
        va = NULL;
        if ((st = nd_stage(a, &oa, nb, s, &va, &sa))) goto done;
    }
    int64_t sh3[3] = {nb, M, N}, st3[3] = {dstride, od.strides[nbd], od.strides[nbd + 1]};
    if (d_direct) {
        st = batched ? view_geometry(d, 3, sh3, st3, &vd) : view_geometry(d, 2, sh3 + 1, st3 + 1, &vd);
    } else if (!(st = gpucore_tensor_create(d->ctx, (gpucore_dtype)d->dtype, batched ? 3 : 2, batched ? sh3 : sh3 + 1,
                                             &sd))) {
        vd = sd;
        sd = NULL;
    }
    if (st) goto done;
    if ((st = gpucore_matmul(va, vb, vd, NULL, s))) goto done;
    if (!d_direct) { /* the dense result into d's own strides */
        int64_t dst[GPUCORE_MAX_DIMS];
        gpucore_tensor *dv = NULL;
        dense_strides(d->ndim, d->shape, dst);
        if (!(st = view_geometry(vd, d->ndim, d->shape, dst, &dv))) {
            st = gpucore_copy(d, dv, s);
            gpucore_tensor_destroy(dv);
        }
    }
done:;
    gpucore_tensor *ts[] = {va, sa, vb, sb, vd, sd};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
        if (ts[k]) gpucore_tensor_destroy(ts[k]);
    return st;
}
