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

static gpucore_status write_config(gpucore_lm *lm, const char *folder, const char *op)
{
    cJSON *root = cJSON_Parse(lm->cfg.json);
    if (!root) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "torch_dtype");
    cJSON_AddStringToObject(root, "torch_dtype", torch_dtype(lm->dtype));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    char *path = lm_strdupf("%s/config.json", folder);
    gpucore_status st = text && path ? lm_write_text(path, text, op)
                                     : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    cJSON_free(text);
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
