/*
 * head_loss.c — the head and the causal-LM loss over row chunks, so that training and the
 * loss never hold the [B, T, vocab] logits: for each chunk of rows of the final hidden
 * states, the chunk's logits (x·Wᵀ), its summed cross-entropy, and (training) the
 * cross-entropy's gradient written over those logits in place, the hidden states' gradient
 * (dlogits·W) and the head weight's (dlogitsᵀ·x, added into dW by the GEMM's beta). One
 * chunk's logits exist at a time: about LM_HEAD_CHUNK_BYTES, at least LM_HEAD_MIN_ROWS rows
 * (or the rows gpucore_lm_set_head_chunk_rows asks for), and the cross-entropy's gradient
 * takes their place. The loss is the chunks' sums (added in f64 on the host) divided by the
 * counted label tokens (or the caller's total), so it equals the mean cross-entropy of the
 * whole logits to rounding.
 */
#include <math.h>
#include <stdlib.h>
#include "lm_internal.h"

/* Each chunk streams the whole head weight (twice in training): below a few hundred rows its GEMMs
 * are bound by reading it, not by their arithmetic (Qwen2's 151936 x 896 f32 head: 545 MB a read). */
#define LM_HEAD_CHUNK_BYTES ((int64_t)32 << 20)
#define LM_HEAD_MIN_ROWS 256

int64_t lm_head_chunk_rows(const gpucore_lm *lm, int64_t rows)
{
    return lm_head_chunk_rows_for(lm->cfg.vocab, lm->dtype, lm->head_chunk_rows, rows);
}

int64_t lm_head_chunk_rows_for(int64_t vocab, int dtype, int64_t asked, int64_t rows)
{
    int64_t r = asked;
    if (r <= 0) {
        const int64_t row_bytes = vocab * gpucore_dtype_size((gpucore_dtype)dtype);
        r = LM_HEAD_CHUNK_BYTES / (row_bytes > 0 ? row_bytes : 1);
        if (r < LM_HEAD_MIN_ROWS) r = LM_HEAD_MIN_ROWS;
    }
    return r < rows ? r : rows;
}

/* Rows [r0, r1) of a [N, ...] tensor. */
static gpucore_status rows_of(gpucore_tensor *t, int64_t r0, int64_t r1, gpucore_tensor **out)
{
    return gpucore_tensor_slice(t, 0, r0, r1, 1, out);
}

gpucore_status lm_head_loss(gpucore_lm *lm, const gpucore_tensor *h, const gpucore_tensor *targets, int64_t divisor,
                            gpucore_tensor *dh, gpucore_tensor *dw, int dw_add, double *loss)
{
    const int64_t N = h->shape[0] * h->shape[1], D = h->shape[2], V = lm->cfg.vocab;
    const int64_t R = lm_head_chunk_rows(lm, N), nchunks = (N + R - 1) / R;
    const gpucore_tensor *w = lm_head_weight(lm);
    int64_t hs[2] = {N, D}, ts[1] = {N}, ls[2] = {R, V}, one = 1;
    gpucore_tensor *h2 = NULL, *t1 = NULL, *dh2 = NULL, *logits = NULL, *losses = NULL, *dloss = NULL;
    gpucore_tensor *hc = NULL, *tc = NULL, *dhc = NULL, *lc = NULL, *lossc = NULL;
    float *host = malloc((size_t)nchunks * sizeof *host);
    gpucore_status st = host ? GPUCORE_OK : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "lm head and loss: out of host memory");
    if (!st) st = gpucore_tensor_reshape((gpucore_tensor *)h, 2, hs, &h2);
    if (!st) st = gpucore_tensor_reshape((gpucore_tensor *)targets, 1, ts, &t1);
    if (!st && dh) st = gpucore_tensor_reshape(dh, 2, hs, &dh2);
    if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, ls, &logits);
    int64_t nl = nchunks;
    if (!st) st = gpucore_tensor_create(lm->ctx, GPUCORE_F32, 1, &nl, &losses);
    if (!st && dh) st = gpucore_tensor_create(lm->ctx, GPUCORE_F32, 1, &one, &dloss);
    if (!st && dh) st = gpucore_fill(dloss, divisor ? 1.0 / (double)divisor : 0.0, NULL);
    gpucore_matmul_options mo;
    gpucore_matmul_options_init(&mo);
    mo.trans_a = 1;
    for (int64_t c = 0; c < nchunks && !st; c++) {
        const int64_t r0 = c * R, r1 = r0 + R < N ? r0 + R : N;
        st = rows_of(h2, r0, r1, &hc);
        if (!st) st = rows_of(t1, r0, r1, &tc);
        if (!st) st = rows_of(logits, 0, r1 - r0, &lc);
        if (!st) st = rows_of(losses, c, c + 1, &lossc);
        if (!st) st = gpucore_linear_forward(hc, w, NULL, GPUCORE_ACT_NONE, lc, NULL, NULL);
        if (!st) st = gpucore_cross_entropy(lossc, lc, tc, LM_IGNORE_INDEX, GPUCORE_LOSS_SUM, NULL);
        if (!st && dh) {
            st = gpucore_cross_entropy_backward(lc, dloss, lc, tc, LM_IGNORE_INDEX, GPUCORE_LOSS_SUM, NULL);
            if (!st) st = rows_of(dh2, r0, r1, &dhc);
            if (!st) st = gpucore_linear_backward(lc, hc, w, NULL, dhc, NULL, NULL, NULL);
            mo.beta = c > 0 || dw_add ? 1.0 : 0.0;
            if (!st && dw) st = gpucore_matmul(lc, hc, dw, &mo, NULL);
        }
        gpucore_tensor *views[] = {hc, tc, dhc, lc, lossc};
        for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) gpucore_tensor_destroy(views[i]);
        hc = tc = dhc = lc = lossc = NULL;
    }
    if (!st) st = gpucore_copy_to_host(host, nchunks * 4, losses);
    if (!st) {
        double sum = 0;
        for (int64_t c = 0; c < nchunks; c++) sum += host[c];
        *loss = divisor ? sum / (double)divisor : NAN;
    }
    gpucore_tensor *all[] = {h2, t1, dh2, logits, losses, dloss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    free(host);
    return st;
}

gpucore_status gpucore_lm_set_head_chunk_rows(gpucore_lm *lm, int64_t rows)
{
    const char *op = "gpucore_lm_set_head_chunk_rows";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (rows < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: rows is %lld; give a positive number of rows, "
                                 "or 0 to size the chunks automatically", op, (long long)rows);
    lm->head_chunk_rows = rows;
    return GPUCORE_OK;
}
