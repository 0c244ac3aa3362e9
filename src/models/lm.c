/*
 * lm.c — the gpucore_lm handle: create from a folder or a GGUF file (config, registry,
 * weights, RoPE tables, all or nothing), destroy, configuration and parameter queries, the
 * list of trainable tensors, and small helpers the other model files share.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

static gpucore_handle_pool lm_pool = GPUCORE_HANDLE_POOL_INIT(sizeof(struct gpucore_lm));

char *lm_strdupf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void lm_destroy_tensor(gpucore_tensor **t)
{
    if (t && *t) { gpucore_tensor_destroy(*t); *t = NULL; }
}

gpucore_status lm_check(const gpucore_lm *lm, const char *op)
{
    if (!lm) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the model is NULL", op);
    if (lm->magic != LM_MAGIC)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the model handle was destroyed or never created", op);
    return GPUCORE_OK;
}

gpucore_status lm_new(gpucore_lm *lm, int dtype, int ndim, const int64_t *shape, gpucore_tensor **out)
{
    return gpucore_tensor_create(lm->ctx, (gpucore_dtype)dtype, ndim, shape, out);
}

gpucore_status lm_convert(gpucore_tensor *t, int dtype, int transpose, gpucore_tensor **out)
{
    *out = NULL;
    int64_t shape[GPUCORE_MAX_DIMS];
    int nd = t->ndim;
    memcpy(shape, t->shape, sizeof shape);
    gpucore_tensor *src = t, *view = NULL;
    gpucore_status st = GPUCORE_OK;
    if (transpose) {
        st = gpucore_tensor_transpose(t, 0, 1, &view);
        if (st) return st;
        src = view;
        shape[0] = t->shape[1];
        shape[1] = t->shape[0];
    }
    gpucore_tensor *d = NULL;
    st = gpucore_tensor_create(t->ctx, (gpucore_dtype)dtype, nd, shape, &d);
    if (!st) st = dtype == t->dtype ? gpucore_copy(d, src, NULL) : gpucore_cast(d, src, NULL);
    gpucore_tensor_destroy(view);
    if (st) { gpucore_tensor_destroy(d); return st; }
    *out = d;
    return GPUCORE_OK;
}

gpucore_status lm_check_ids(const gpucore_lm *lm, const gpucore_tensor *ids, const char *what, const char *op)
{
    gpucore_status st = gpucore_check_tensor(ids, op, what);
    if (st) return st;
    if (ids->ctx != lm->ctx) return gpucore_context_mismatch(op, what, ids->ctx, "the model", lm->ctx);
    if (ids->dtype != GPUCORE_I32 && ids->dtype != GPUCORE_I64)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s must be i32 or i64 token ids, not %s", op, what,
                                 gpucore_dtype_name((gpucore_dtype)ids->dtype));
    if (ids->ndim != 2 || ids->shape[0] < 1 || ids->shape[1] < 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s must be [batch, seq] with both >= 1", op, what);
    return GPUCORE_OK;
}

gpucore_status lm_ids_from_host(gpucore_lm *lm, const int64_t *ids, int64_t batch, int64_t seq, const char *op,
                                gpucore_tensor **out)
{
    *out = NULL;
    if (!ids) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the id array is NULL", op);
    if (batch < 1 || seq < 1 || batch > ((int64_t)1 << 40) / seq)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: batch (%lld) and seq (%lld) must be >= 1", op,
                                 (long long)batch, (long long)seq);
    for (int64_t i = 0; i < batch * seq; i++)
        if (ids[i] < 0 || ids[i] >= lm->cfg.vocab)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: token id %lld at [%lld, %lld] is outside "
                                     "[0, vocab_size = %lld)", op, (long long)ids[i], (long long)(i / seq),
                                     (long long)(i % seq), (long long)lm->cfg.vocab);
    int64_t shape[2] = {batch, seq};
    gpucore_status st = gpucore_tensor_create(lm->ctx, GPUCORE_I64, 2, shape, out);
    if (!st) st = gpucore_copy_from_host(*out, ids, batch * seq * 8);
    if (st) lm_destroy_tensor(out);
    return st;
}

gpucore_status lm_for_each_linear(gpucore_lm *lm, lm_linear_fn fn, void *user)
{
    for (int64_t i = 0; i < lm->cfg.layers; i++) {
        lm_layer *L = &lm->layer[i];
        for (int k = 0; k < L->n_attn; k++) { gpucore_status st = fn(lm, &L->attn[k], user); if (st) return st; }
        for (int k = 0; k < L->n_mlp; k++) { gpucore_status st = fn(lm, &L->mlp[k], user); if (st) return st; }
    }
    return GPUCORE_OK;
}

void lm_free_trainable(gpucore_lm *lm)
{
    for (int64_t i = 0; i < lm->n_train; i++) free(lm->train[i].name);
    free(lm->train);
    lm->train = NULL;
    lm->n_train = 0;
}

static gpucore_status push_trainable(gpucore_lm *lm, char *name, gpucore_tensor *p, gpucore_tensor *g, int64_t cap)
{
    if (!name || lm->n_train >= cap) { free(name); return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory"); }
    lm->train[lm->n_train].name = name;
    lm->train[lm->n_train].param = p;
    lm->train[lm->n_train++].grad = g;
    return GPUCORE_OK;
}

gpucore_status lm_rebuild_trainable(gpucore_lm *lm)
{
    lm_free_trainable(lm);
    int64_t cap = lm->n_params + 2 * 7 * lm->cfg.layers + 1;
    lm->train = calloc((size_t)cap, sizeof *lm->train);
    if (!lm->train) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory");
    gpucore_status st = GPUCORE_OK;
    if (lm->lora_count) {
        for (int64_t i = 0; i < lm->cfg.layers && !st; i++) {
            lm_layer *L = &lm->layer[i];
            lm_linear *all[7];
            int n = 0;
            for (int k = 0; k < L->n_attn; k++) all[n++] = &L->attn[k];
            for (int k = 0; k < L->n_mlp; k++) all[n++] = &L->mlp[k];
            for (int k = 0; k < n && !st; k++) {
                if (!all[k]->la) continue;
                st = push_trainable(lm, lm_strdupf("base_model.model.%s.lora_A.weight", all[k]->module), all[k]->la,
                                    all[k]->dla, cap);
                if (!st) st = push_trainable(lm, lm_strdupf("base_model.model.%s.lora_B.weight", all[k]->module),
                                             all[k]->lb, all[k]->dlb, cap);
            }
        }
    } else if (lm->full_ft) {
        for (int64_t i = 0; i < lm->n_params && !st; i++)
            st = push_trainable(lm, lm_strdupf("%s", lm->params[i].name), *lm->params[i].slot, *lm->params[i].grad, cap);
    }
    if (st) lm_free_trainable(lm);
    return st;
}

void lm_free_registry(gpucore_lm *lm)
{
    for (int64_t i = 0; lm->layer && i < lm->cfg.layers; i++) {
        lm_layer *L = &lm->layer[i];
        for (int k = 0; k < L->n_attn; k++) free(L->attn[k].module);
        for (int k = 0; k < L->n_mlp; k++) free(L->mlp[k].module);
    }
    for (int64_t i = 0; i < lm->n_params; i++) free(lm->params[i].name);
    free(lm->params);
    free(lm->layer);
    lm->params = NULL;
    lm->layer = NULL;
    lm->n_params = 0;
}

static void lm_free_all(gpucore_lm *lm)
{
    if (lm->ckpt) gpucore_ckpt_destroy(lm->ckpt);
    lm->ckpt = NULL;
    lm_free_trainable(lm);
    if (lm->layer) {
        for (int64_t i = 0; i < lm->cfg.layers; i++) {
            lm_layer *L = &lm->layer[i];
            lm_linear *all[7];
            int n = 0;
            for (int k = 0; k < L->n_attn; k++) all[n++] = &L->attn[k];
            for (int k = 0; k < L->n_mlp; k++) all[n++] = &L->mlp[k];
            for (int k = 0; k < n; k++) {
                lm_destroy_tensor(&all[k]->la); lm_destroy_tensor(&all[k]->lb);
                lm_destroy_tensor(&all[k]->dla); lm_destroy_tensor(&all[k]->dlb);
            }
        }
    }
    lm_free_weights(lm);
    lm_free_registry(lm);
    for (int64_t i = 0; i < lm->n_lora_targets; i++) free(lm->lora_targets[i]);
    free(lm->lora_targets);
    lm_destroy_tensor(&lm->rope_cos);
    lm_destroy_tensor(&lm->rope_sin);
    lm_config_free(&lm->cfg);
    free(lm->folder);
    lm->magic = GPUCORE_MAGIC_DEAD;
    gpucore_handle_release(&lm_pool, lm);
}

gpucore_status gpucore_lm_create(gpucore_context *ctx, const char *folder, int dtype, gpucore_lm **out)
{
    gpucore_lm_load_options o;
    gpucore_lm_load_options_init(&o);
    o.dtype = dtype;
    return gpucore_lm_create_ex(ctx, folder, &o, out);
}

static gpucore_status create_ex(gpucore_context *ctx, const char *folder, const gpucore_lm_load_options *opts,
                                gpucore_lm **out)
{
    const char *op = "gpucore_lm_create";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (!folder) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: folder is NULL", op);
    gpucore_lm_load_options o;
    gpucore_lm_load_options_init(&o);
    if (opts) {
        if (opts->struct_size != (int64_t)sizeof o)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->struct_size is %lld, not "
                                     "sizeof(gpucore_lm_load_options) = %lld (use gpucore_lm_load_options_init)", op,
                                     (long long)opts->struct_size, (long long)sizeof o);
        o = *opts;
    }
    int dtype = o.dtype;
    if (dtype != -1 && dtype != GPUCORE_F32 && dtype != GPUCORE_BF16 && dtype != GPUCORE_F16)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dtype %d: pass -1 (the checkpoint's), GPUCORE_F32, "
                                 "GPUCORE_BF16 or GPUCORE_F16", op, dtype);
    int gguf = lm_is_gguf(folder);
    if (o.quantize != -1 && o.quantize != GPUCORE_QUANT_NF4 && o.quantize != GPUCORE_QUANT_FP4 &&
        o.quantize != GPUCORE_QUANT_INT8_ROW)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: quantize %d: pass -1 (dense), GPUCORE_QUANT_NF4, "
                                 "GPUCORE_QUANT_FP4 or GPUCORE_QUANT_INT8_ROW", op, o.quantize);
    if (o.quantize != -1 && gguf)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: '%s' is a GGUF file, whose weights are quantized "
                                 "already (their blocks are kept); load it without quantize", op, folder);
    if (o.quantize != -1) {
        int64_t probe;
        if ((st = gpucore_quant_size((gpucore_quant_format)o.quantize, 1, 64, o.block_size, 0, &probe))) return st;
        if (dtype == -1) dtype = GPUCORE_BF16;
    }
    gpucore_lm *lm = gpucore_handle_alloc(&lm_pool);
    if (!lm) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    lm->magic = LM_MAGIC;
    lm->ctx = ctx;
    lm->ckpt_policy = GPUCORE_CKPT_KEEP_ALL;
    lm->quant_fmt = o.quantize;
    lm->quant_block = o.block_size;
    lm->folder = lm_strdupf("%s", folder);
    if (!lm->folder) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (!st && o.quantize != -1 && ctx->type != GPUCORE_DEVICE_CPU) /* gpucore_quantize runs on the CPU */
        st = gpucore_context_create("cpu", &lm->quant_host);
    if (!st) st = gguf ? lm_load_gguf(lm, dtype) : lm_config_read(folder, &lm->cfg);
    if (!st && !gguf) st = lm_build_registry(lm);
    if (!st && !gguf) st = lm_load_weights(lm, dtype);
    lm_quant_finish(lm);
    if (!st) st = lm_rope_tables(lm);
    if (!st) st = gpucore_context_synchronize(ctx);
    if (st) {
        /* keep the first error's message: freeing does not set errors */
        lm_free_all(lm);
        return st;
    }
    *out = lm;
    return GPUCORE_OK;
}

/* Everything the load allocates is the model's weights (its scratch is freed before it returns). */
gpucore_status gpucore_lm_create_ex(gpucore_context *ctx, const char *folder, const gpucore_lm_load_options *opts,
                                    gpucore_lm **out)
{
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_WEIGHTS);
    gpucore_status st = create_ex(ctx, folder, opts, out);
    caching_allocator_tag_set(tag);
    return st;
}

gpucore_status gpucore_lm_destroy(gpucore_lm *lm)
{
    if (!lm) return GPUCORE_OK;
    gpucore_status st = lm_check(lm, "gpucore_lm_destroy");
    if (st) return st;
    gpucore_context_synchronize(lm->ctx);
    lm_free_all(lm);
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_context(const gpucore_lm *lm, gpucore_context **ctx)
{
    gpucore_status st = lm_check(lm, "gpucore_lm_context");
    if (st) return st;
    if (!ctx) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "gpucore_lm_context: ctx is NULL");
    *ctx = lm->ctx;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_config_json(const gpucore_lm *lm, const char **json)
{
    const char *op = "gpucore_lm_config_json";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!json) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: json is NULL", op);
    *json = lm->cfg.json;
    return GPUCORE_OK;
}

const char *gpucore_lm_arch_name(const gpucore_lm *lm)
{
    if (!lm || lm->magic != LM_MAGIC) return NULL;
    return lm->cfg.def->model_type;
}

gpucore_status gpucore_lm_config_int(const gpucore_lm *lm, const char *key, int64_t *value)
{
    const char *op = "gpucore_lm_config_int";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!key || !value) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: key or value is NULL", op);
    const lm_config *c = &lm->cfg;
    struct { const char *k, *k2; int64_t v; } t[] = {
        {"arch", NULL, c->arch}, {"dtype", NULL, lm->dtype}, {"vocab_size", NULL, c->vocab},
        {"num_hidden_layers", "n_layer", c->layers}, {"hidden_size", "n_embd", c->hidden},
        {"num_attention_heads", "n_head", c->heads}, {"num_key_value_heads", NULL, c->kv_heads},
        {"head_dim", NULL, c->head_dim}, {"intermediate_size", "n_inner", c->inter},
        {"max_position_embeddings", "n_positions", c->max_pos}, {"sliding_window", NULL, c->sliding_window},
        {"tie_word_embeddings", NULL, c->tie}, {"bos_token_id", NULL, c->bos}, {"eos_token_id", NULL, c->eos},
        {"pad_token_id", NULL, c->pad},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(key, t[i].k) || (t[i].k2 && !strcmp(key, t[i].k2))) { *value = t[i].v; return GPUCORE_OK; }
    return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: unknown key '%s' (vocab_size, num_hidden_layers, "
                             "hidden_size, num_attention_heads, num_key_value_heads, head_dim, ...)", op, key);
}

gpucore_status gpucore_lm_config_double(const gpucore_lm *lm, const char *key, double *value)
{
    const char *op = "gpucore_lm_config_double";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!key || !value) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: key or value is NULL", op);
    if (!strcmp(key, "rope_theta")) *value = lm->cfg.rope_theta;
    else if (!strcmp(key, "rms_norm_eps") || !strcmp(key, "norm_eps") || !strcmp(key, "layer_norm_epsilon")) *value = lm->cfg.eps;
    else if (!strcmp(key, "rope_scaling_factor")) *value = lm->cfg.rs_factor;
    else return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: unknown key '%s' (rope_theta, rms_norm_eps, "
                                  "norm_eps, rope_scaling_factor)", op, key);
    return GPUCORE_OK;
}

int64_t gpucore_lm_parameter_count(const gpucore_lm *lm)
{
    if (!lm || lm->magic != LM_MAGIC) return -1;
    return lm->n_params;
}

gpucore_status gpucore_lm_parameter(gpucore_lm *lm, int64_t i, const char **name, gpucore_tensor **param)
{
    const char *op = "gpucore_lm_parameter";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (i < 0 || i >= lm->n_params)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: index %lld outside [0, %lld)", op, (long long)i,
                                 (long long)lm->n_params);
    if (name) *name = lm->params[i].name;
    if (param) *param = lm_param_tensor(&lm->params[i]);
    return GPUCORE_OK;
}

int64_t gpucore_lm_trainable_count(const gpucore_lm *lm)
{
    if (!lm || lm->magic != LM_MAGIC) return -1;
    return lm->n_train;
}

gpucore_status gpucore_lm_trainable(gpucore_lm *lm, int64_t i, const char **name, gpucore_tensor **param,
                                    gpucore_tensor **grad)
{
    const char *op = "gpucore_lm_trainable";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (i < 0 || i >= lm->n_train)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: index %lld outside [0, %lld)", op, (long long)i,
                                 (long long)lm->n_train);
    if (name) *name = lm->train[i].name;
    if (param) *param = lm->train[i].param;
    if (grad) *grad = lm->train[i].grad;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_set_full_finetune(gpucore_lm *lm, int enable)
{
    const char *op = "gpucore_lm_set_full_finetune";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (enable && lm->lora_count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the model has LoRA adapters; merge them "
                                 "(gpucore_lm_merge_adapter) before full fine-tuning", op);
    if (enable && lm->quant_name[0])
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the base weights are quantized (%s) and frozen; "
                                 "train LoRA adapters on them (gpucore_lm_add_lora), or load the model dense",
                                 op, lm->quant_name);
    if (!!enable == lm->full_ft) return GPUCORE_OK;
    if (lm->ckpt) { gpucore_ckpt_destroy(lm->ckpt); lm->ckpt = NULL; } /* segments hold the gradient set */
    if (!enable) {
        for (int64_t i = 0; i < lm->n_params; i++) lm_destroy_tensor(lm->params[i].grad);
        lm->full_ft = 0;
        return lm_rebuild_trainable(lm);
    }
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_GRADIENTS);
    for (int64_t i = 0; i < lm->n_params && !st; i++) {
        gpucore_tensor *p = *lm->params[i].slot;
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)p->dtype, p->ndim, p->shape, lm->params[i].grad);
        if (!st) st = gpucore_fill(*lm->params[i].grad, 0.0, NULL);
    }
    caching_allocator_tag_set(tag);
    if (!st) { lm->full_ft = 1; st = lm_rebuild_trainable(lm); }
    if (st) {
        gpucore_status keep = st;
        for (int64_t i = 0; i < lm->n_params; i++) lm_destroy_tensor(lm->params[i].grad);
        lm->full_ft = 0;
        lm_free_trainable(lm);
        return keep;
    }
    return GPUCORE_OK;
}
