/*
 * quantize.c — quantized base weights of the language-model layer: the linear layers' weights
 * quantized one tensor at a time while loading (NF4, FP4 or bitsandbytes' int8 rows, as
 * gpucore_lm_create_ex asks) or adopted as they are from a GGUF file's blocks, read by
 * gpucore_qlinear_* and gpucore_lora_* (opts.w_quant) in layers.c and never held dequantized,
 * except by merge_adapter, which dequantizes the layers it merges into. Also the queries
 * gpucore_lm_quantization and gpucore_lm_weight_bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

static const char *format_name(int fmt)
{
    static const char *const names[] = {"nf4", "fp4", "int8", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                        "Q8_0", "Q4_K", "Q5_K", "Q6_K"};
    return fmt >= 0 && fmt < (int)(sizeof names / sizeof names[0]) ? names[fmt] : "?";
}

static void set_qweight(lm_linear *l, int fmt, int64_t block)
{
    memset(&l->q, 0, sizeof l->q);
    l->q.data = l->wq;
    l->q.format = (gpucore_quant_format)fmt;
    l->q.block_size = block;
    l->q.flags = 0;
    l->q.rows = l->out;
    l->q.cols = l->in;
}

/* A u8 tensor of n bytes on the model's context holding the n bytes of src (any context). */
static gpucore_status bytes_to_model(gpucore_lm *lm, const gpucore_tensor *src, const void *host, int64_t n,
                                     gpucore_tensor **out)
{
    gpucore_status st = gpucore_tensor_create(lm->ctx, GPUCORE_U8, 1, &n, out);
    if (st) return st;
    if (src && src->ctx == lm->ctx) return gpucore_copy(*out, src, NULL);
    void *buf = NULL;
    if (src) {
        buf = malloc((size_t)(n ? n : 1));
        if (!buf) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
        if (!st) st = gpucore_copy_to_host(buf, n, (gpucore_tensor *)src);
        host = buf;
    }
    if (!st) st = gpucore_copy_from_host(*out, host, n);
    free(buf);
    if (st) lm_destroy_tensor(out);
    return st;
}

gpucore_status lm_quantize_linear(gpucore_lm *lm, lm_linear *l, const gpucore_tensor *t)
{
    int64_t n = 0;
    gpucore_status st = gpucore_quant_size((gpucore_quant_format)lm->quant_fmt, l->out, l->in, lm->quant_block, 0, &n);
    if (st) return st;
    gpucore_tensor *q = NULL;
    st = gpucore_tensor_create(t->ctx, GPUCORE_U8, 1, &n, &q);
    if (!st) st = gpucore_quantize(t, (gpucore_quant_format)lm->quant_fmt, lm->quant_block, 0, q, NULL);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", gpucore_last_error());
        gpucore_tensor_destroy(q);
        return gpucore_set_error(st, "gpucore_lm_create: quantizing '%s.weight' to %s: %s", l->module,
                                 format_name(lm->quant_fmt), why);
    }
    if (q->ctx == lm->ctx) l->wq = q;
    else {
        st = bytes_to_model(lm, q, NULL, n, &l->wq);
        gpucore_tensor_destroy(q);
        if (st) return st;
    }
    set_qweight(l, lm->quant_fmt, lm->quant_block);
    return GPUCORE_OK;
}

gpucore_status lm_adopt_quantized(gpucore_lm *lm, lm_linear *l, int fmt, int64_t block, const void *bytes,
                                  int64_t nbytes)
{
    int64_t want = 0;
    gpucore_status st = gpucore_quant_size((gpucore_quant_format)fmt, l->out, l->in, block, 0, &want);
    if (st) return st;
    if (want != nbytes)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: '%s.weight' holds %lld bytes of %s, "
                                 "but a %lld x %lld matrix takes %lld", l->module, (long long)nbytes,
                                 format_name(fmt), (long long)l->out, (long long)l->in, (long long)want);
    if ((st = bytes_to_model(lm, NULL, bytes, nbytes, &l->wq))) return st;
    set_qweight(l, fmt, block);
    return GPUCORE_OK;
}

gpucore_status lm_dequantize_linear(gpucore_lm *lm, lm_linear *l)
{
    if (!l->wq) return GPUCORE_OK;
    int64_t shape[2] = {l->out, l->in};
    gpucore_tensor *w = NULL;
    gpucore_status st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, shape, &w);
    if (!st) st = gpucore_dequantize(l->wq, l->q.format, l->q.block_size, l->q.flags, w, NULL);
    if (st) { gpucore_tensor_destroy(w); return st; }
    l->w = w;
    lm_destroy_tensor(&l->wq);
    memset(&l->q, 0, sizeof l->q);
    return GPUCORE_OK;
}

gpucore_tensor *lm_param_tensor(const lm_param *p)
{
    return *p->slot ? *p->slot : p->lin ? p->lin->wq : NULL;
}

void lm_quant_finish(gpucore_lm *lm)
{
    if (lm->quant_host) gpucore_context_destroy(lm->quant_host);
    lm->quant_host = NULL;
    /* the formats held, most bytes first: "nf4", or "Q4_1+Q8_0" for a GGUF file's mixture */
    int64_t bytes[GPUCORE_QUANT_Q6_K + 1] = {0};
    for (int64_t i = 0; i < lm->n_params; i++) {
        const lm_linear *l = lm->params[i].lin;
        if (l && l->wq) bytes[l->q.format] += gpucore_tensor_nbytes(l->wq);
    }
    lm->quant_name[0] = 0;
    for (;;) {
        int best = -1;
        for (int f = 0; f <= GPUCORE_QUANT_Q6_K; f++)
            if (bytes[f] > 0 && (best < 0 || bytes[f] > bytes[best])) best = f;
        if (best < 0) break;
        size_t len = strlen(lm->quant_name);
        snprintf(lm->quant_name + len, sizeof lm->quant_name - len, "%s%s", len ? "+" : "", format_name(best));
        bytes[best] = 0;
    }
}

void gpucore_lm_load_options_init(gpucore_lm_load_options *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = (int64_t)sizeof *opts;
    opts->dtype = -1;
    opts->quantize = -1;
}

const char *gpucore_lm_quantization(const gpucore_lm *lm)
{
    if (lm_check(lm, "gpucore_lm_quantization") != GPUCORE_OK) return NULL;
    return lm->quant_name;
}

gpucore_status gpucore_lm_weight_bytes(const gpucore_lm *lm, int64_t *bytes)
{
    const char *op = "gpucore_lm_weight_bytes";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!bytes) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: bytes is NULL", op);
    int64_t n = lm->head_q.wq ? gpucore_tensor_nbytes(lm->head_q.wq) : 0;
    for (int64_t i = 0; i < lm->n_params; i++) {
        const gpucore_tensor *t = lm_param_tensor(&lm->params[i]);
        if (t) n += gpucore_tensor_nbytes(t);
    }
    *bytes = n;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_decode_bytes(const gpucore_lm *lm, int64_t *bytes)
{
    const char *op = "gpucore_lm_decode_bytes";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!bytes) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: bytes is NULL", op);
    /* the head once: its quantized blocks where the model keeps them, else the dense head (the tied
     * embedding table); the tables a step reads a row of (embeddings, learned positions) not counted */
    int64_t n = lm->head_q.wq ? gpucore_tensor_nbytes(lm->head_q.wq) : gpucore_tensor_nbytes(lm_head_weight(lm));
    for (int64_t i = 0; i < lm->n_params; i++) {
        const lm_param *p = &lm->params[i];
        const gpucore_tensor *t = lm_param_tensor(p);
        if (t && p->slot != &((gpucore_lm *)lm)->wte && p->slot != &((gpucore_lm *)lm)->wpe &&
            p->slot != &((gpucore_lm *)lm)->head)
            n += gpucore_tensor_nbytes(t);
    }
    *bytes = n;
    return GPUCORE_OK;
}
