/*
 * save.c — save_pretrained: the base model back as a Hugging Face folder that
 * transformers loads: config.json (the one read, torch_dtype set to the weights'
 * dtype) and model.safetensors under the state-dict names, GPT-2's Conv1D weights
 * transposed back to the file's [in, out] and a tied head stored once.
 */
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>

static const char *torch_dtype(int dt)
{
    return dt == GPUCORE_BF16 ? "bfloat16" : dt == GPUCORE_F16 ? "float16" : "float32";
}

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

static gpucore_status write_config(gpucore_lm *lm, const char *folder, const char *op)
{
    char *text = with_dtype(lm->cfg.json, torch_dtype(lm->dtype));
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
    if (lm->quant_name[0])
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the base weights are quantized (%s); writing them "
                                 "is not implemented: save the adapter (gpucore_lm_save_adapter) or merge it "
                                 "(gpucore_lm_merge_adapter dequantizes what it merges into) and load the model dense",
                                 op, lm->quant_name);
    if ((st = lm_make_dir(folder, op))) return st;
    int64_t n = lm->n_params;
    const char **names = calloc((size_t)n, sizeof *names);
    gpucore_tensor **ts = calloc((size_t)n, sizeof *ts), **tmp = calloc((size_t)n, sizeof *tmp);
    char *path = lm_strdupf("%s/model.safetensors", folder);
    if (!names || !ts || !tmp || !path) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t i = 0; i < n && !st; i++) {
        lm_param *p = &lm->params[i];
        names[i] = p->name;
        ts[i] = *p->slot;
        if (p->transposed) {
            st = lm_convert(*p->slot, lm->dtype, 1, &tmp[i]);
            ts[i] = tmp[i];
        }
    }
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    if (!st) st = gpucore_safetensors_save(path, names, ts, n, mk, mv, 1);
    if (!st) st = write_config(lm, folder, op);
    for (int64_t i = 0; tmp && i < n; i++) gpucore_tensor_destroy(tmp[i]);
    free(names); free(ts); free(tmp); free(path);
    return st;
}
#else
gpucore_status gpucore_lm_save_pretrained(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_save_pretrained: this build has no JSON library (cJSON)");
}
#endif
