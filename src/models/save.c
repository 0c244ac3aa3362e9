/*
 * save.c — save_pretrained: the base model back as a Hugging Face folder that
 * transformers loads: config.json (the one read, torch_dtype set to the weights'
 * dtype) and model.safetensors under the state-dict names, GPT-2's Conv1D weights
 * transposed back to the file's [in, out] and a tied head stored once. NF4/FP4 linear
 * layers are written in bitsandbytes' layout with transformers' quantization_config
 * (bnb_folder.c), as transformers saves a model loaded in 4 bits.
 */
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"
#include "bnb_folder.h"
#include "io/safetensors.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>

/* config.json as read, with torch_dtype's value replaced (or the key added): the text is
 * kept, not re-printed, so numbers keep their form (8.0 stays a float for transformers). */
static char *with_dtype(const char *json, const char *dtype)
{
    const char *key = strstr(json, "\"torch_dtype\"");
    if (key) {
        const char *p = key + 13;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (*p == ':') {
            p++;
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
            const char *end = p;
            if (*p == '"') { end = strchr(p + 1, '"'); end = end ? end + 1 : NULL; }
            else if (!strncmp(p, "null", 4)) end = p + 4;
            else end = NULL;
            if (end) return lm_strdupf("%.*s\"%s\"%s", (int)(p - json), json, dtype, end);
        }
    }
    const char *brace = strchr(json, '{');
    if (!brace) return NULL;
    return lm_strdupf("%.*s\n  \"torch_dtype\": \"%s\",%s", (int)(brace + 1 - json), json, dtype, brace + 1);
}

/* json without its top-level "quantization_config" member (the text kept otherwise), or NULL. */
static char *without_quantization(const char *json)
{
    const char *key = strstr(json, "\"quantization_config\"");
    const char *p = key ? strchr(key, '{') : NULL;
    if (!p) return NULL;
    int depth = 0, in_str = 0;
    for (; *p; p++) {
        if (in_str) { if (*p == '\\' && p[1]) p++; else if (*p == '"') in_str = 0; continue; }
        if (*p == '"') in_str = 1;
        else if (*p == '{') depth++;
        else if (*p == '}' && --depth == 0) break;
    }
    if (!*p) return NULL;
    const char *end = p + 1, *start = key;
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') end++;
    if (*end == ',') end++; /* the member and its comma */
    else { /* the last member: drop the comma before it */
        while (start > json && strchr(" \t\n\r", start[-1])) start--;
        if (start > json && start[-1] == ',') start--;
    }
    return lm_strdupf("%.*s%s", (int)(start - json), json, end);
}

/* config.json for the weights written: a 4-bit model's gets transformers' quantization_config
 * (the one read, when it was loaded from such a folder); a dense model's loses it. */
static gpucore_status write_config(gpucore_lm *lm, const char *folder, int qfmt, int has_qc, const char *op)
{
    char *base = qfmt >= 0 && !has_qc ? lm_bnb_config_text(lm->cfg.json, qfmt, lm->dtype)
                 : qfmt < 0 && has_qc ? without_quantization(lm->cfg.json) : NULL;
    char *text = with_dtype(base ? base : lm->cfg.json, lm_torch_dtype(lm->dtype));
    free(base);
    cJSON *check = text ? cJSON_Parse(text) : NULL;
    char *path = lm_strdupf("%s/config.json", folder);
    gpucore_status st = !text || !path ? gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op)
                        : !check ? gpucore_set_error(GPUCORE_ERR_INTERNAL, "%s: rewriting torch_dtype in config.json "
                                                     "gave invalid JSON", op)
                                 : lm_write_text(path, text, op);
    cJSON_Delete(check);
    free(text);
    free(path);
    return st;
}

gpucore_status gpucore_lm_save_pretrained(gpucore_lm *lm, const char *folder)
{
    const char *op = "gpucore_lm_save_pretrained";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!folder) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: folder is NULL", op);
    if (lm->lora_count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the model has LoRA adapters; merge them first "
                                 "(gpucore_lm_merge_adapter) or save them with gpucore_lm_save_adapter", op);
    /* bitsandbytes' layout holds NF4, FP4 or int8 linears, one format, dense only where llm_int8_skip_modules says */
    lm_bnb b;
    if ((st = lm_bnb_read_config(lm->cfg.json, &b))) return st;
    int qfmt = -1, has_qc = b.fmt >= 0;
    const char *dense = NULL;
    int64_t nq = 0;
    for (int64_t i = 0; i < lm->n_params && !st; i++) {
        const lm_linear *l = lm->params[i].lin;
        if (!l) continue;
        if (!l->wq) {
            if (!has_qc || !lm_bnb_skipped(&b, l->module)) dense = l->module;
            continue;
        }
        nq++;
        int f = l->q.format;
        if ((f != GPUCORE_QUANT_NF4 && f != GPUCORE_QUANT_FP4 && f != GPUCORE_QUANT_INT8_ROW) ||
            (l->q.flags & GPUCORE_QUANT_DOUBLE))
            st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the base weights are quantized (%s); only NF4, FP4 and "
                                   "int8 have a Hugging Face layout here (bitsandbytes'): save the adapter "
                                   "(gpucore_lm_save_adapter), or load the model dense to save it", op, lm->quant_name);
        else if (qfmt >= 0 && f != qfmt)
            st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the linear layers mix formats (%s); bitsandbytes' "
                                   "layout holds one", op, lm->quant_name);
        qfmt = f;
    }
    lm_bnb_free(&b);
    if (!st && qfmt >= 0 && dense)
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: '%s' is dense (gpucore_lm_merge_adapter dequantized it) "
                               "while other linear layers are %s; bitsandbytes' layout quantizes them all: merge into a "
                               "dense model (load it without quantize), or save the adapter", op, dense, lm->quant_name);
    if (st) return st;
    if ((st = lm_make_dir(folder, op))) return st;
    int64_t n = lm->n_params, cap = n + 3 * nq, k = 0;
    const char **names = calloc((size_t)cap, sizeof *names), **i8 = calloc((size_t)cap, sizeof *i8);
    char **owned = calloc((size_t)(4 * nq + 1), sizeof *owned);
    gpucore_tensor **ts = calloc((size_t)cap, sizeof *ts), **tmp = calloc((size_t)cap, sizeof *tmp);
    char *path = lm_strdupf("%s/model.safetensors", folder);
    gpucore_context *hc = NULL;
    if (!names || !i8 || !owned || !ts || !tmp || !path)
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (!st && nq && lm->ctx->type != GPUCORE_DEVICE_CPU) st = gpucore_context_create("cpu", &hc);
    for (int64_t i = 0, o = 0; i < n && !st; i++) {
        lm_param *p = &lm->params[i];
        if (p->lin && p->lin->wq) { /* bitsandbytes' tensors (4-bit: four; int8: three) */
            int got = 0;
            st = lm_bnb_save_linear(lm, p->lin, hc ? hc : lm->ctx, owned + o, tmp + k, i8 + k, &got);
            for (int j = 0; j < got; j++, k++) { names[k] = owned[o + j]; ts[k] = tmp[k]; }
            o += 4;
            continue;
        }
        names[k] = p->name;
        ts[k] = *p->slot;
        if (p->transposed) {
            st = lm_convert(*p->slot, lm->dtype, 1, &tmp[k]);
            ts[k] = tmp[k];
        }
        k++;
    }
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    if (!st) st = gpucore_st_save_i8(path, names, ts, i8, k, mk, mv, 1);
    if (!st) st = write_config(lm, folder, qfmt, has_qc, op);
    for (int64_t i = 0; tmp && i < cap; i++) gpucore_tensor_destroy(tmp[i]);
    for (int64_t i = 0; owned && i < 4 * nq; i++) free(owned[i]);
    if (hc) gpucore_context_destroy(hc);
    free(names); free(i8); free(owned); free(ts); free(tmp); free(path);
    return st;
}
#else
gpucore_status gpucore_lm_save_pretrained(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_save_pretrained: this build has no JSON library (cJSON)");
}
#endif
