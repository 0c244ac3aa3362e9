/*
 * config.c — a Hugging Face config.json read into lm_config: the sizes of the
 * model, its norm / RoPE / bias / tying choices, and the refusal, by field name,
 * of everything that would change the math and is not implemented here (so no
 * field is silently ignored). Also the run-time length checks the config implies
 * (max_position_embeddings, an active sliding window).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>

typedef struct reader { const cJSON *root; const char *path; gpucore_status st; } reader;

static const cJSON *field(reader *r, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->root, name);
    return cJSON_IsNull(v) ? NULL : v;
}

static gpucore_status bad(reader *r, gpucore_status st, const char *fmt, const char *name, const char *what)
{
    if (!r->st) {
        char msg[512];
        snprintf(msg, sizeof msg, fmt, name, what);
        r->st = gpucore_set_error(st, "gpucore_lm_create: %s: %s", r->path, msg);
    }
    return r->st;
}

/* Integer field; required when dflt is NULL. Must be >= lo. */
static int64_t get_int(reader *r, const char *name, const int64_t *dflt, int64_t lo)
{
    const cJSON *v = field(r, name);
    if (!v) {
        if (dflt) return *dflt;
        bad(r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' is missing%s", name, "");
        return 0;
    }
    double d = v->valuedouble;
    if (!cJSON_IsNumber(v) || d != floor(d) || d < (double)lo || d > 9.0e15) {
        bad(r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' must be an integer >= %s", name, lo > 0 ? "1" : "0");
        return 0;
    }
    return (int64_t)d;
}

static double get_num(reader *r, const char *name, double dflt)
{
    const cJSON *v = field(r, name);
    if (!v) return dflt;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        bad(r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' must be a finite number%s", name, "");
        return dflt;
    }
    return v->valuedouble;
}

static int get_bool(reader *r, const char *name, int dflt)
{
    const cJSON *v = field(r, name);
    if (!v) return dflt;
    if (!cJSON_IsBool(v)) { bad(r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' must be true or false%s", name, ""); return dflt; }
    return cJSON_IsTrue(v);
}

static const char *get_str(reader *r, const char *name, const char *dflt)
{
    const cJSON *v = field(r, name);
    if (!v) return dflt;
    if (!cJSON_IsString(v)) { bad(r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' must be a string%s", name, ""); return dflt; }
    return v->valuestring;
}

/* bos/eos/pad: an int, a list (its first entry) or absent (-1). */
static int64_t get_token(reader *r, const char *name)
{
    const cJSON *v = field(r, name);
    if (v && cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (!v || !cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) return -1;
    return (int64_t)v->valuedouble;
}

/* A field whose presence with this value the implementation cannot honour. */
static void refuse_if(reader *r, int cond, const char *name, const char *why)
{
    if (cond) bad(r, GPUCORE_ERR_NOT_SUPPORTED, "config field '%s' is not supported: %s", name, why);
}

static void read_gpt2(reader *r, lm_config *c)
{
    c->vocab = get_int(r, "vocab_size", NULL, 1);
    c->hidden = get_int(r, "n_embd", NULL, 1);
    c->layers = get_int(r, "n_layer", NULL, 1);
    c->heads = get_int(r, "n_head", NULL, 1);
    c->max_pos = get_int(r, "n_positions", NULL, 1);
    int64_t four = 4 * c->hidden;
    c->inter = get_int(r, "n_inner", &four, 1);
    c->eps = get_num(r, "layer_norm_epsilon", 1e-5);
    const char *act = get_str(r, "activation_function", "gelu_new");
    refuse_if(r, strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"), "activation_function",
              "only the tanh GELU (\"gelu_new\", \"gelu_pytorch_tanh\") is implemented");
    refuse_if(r, !get_bool(r, "scale_attn_weights", 1), "scale_attn_weights", "attention without the 1/sqrt(head_dim) scale");
    refuse_if(r, get_bool(r, "scale_attn_by_inverse_layer_idx", 0), "scale_attn_by_inverse_layer_idx",
              "scores scaled by 1/(layer+1)");
    refuse_if(r, get_bool(r, "add_cross_attention", 0), "add_cross_attention", "cross-attention layers");
    c->tie = get_bool(r, "tie_word_embeddings", 1);
    c->kv_heads = c->heads;
    if (!r->st && c->hidden % c->heads)
        bad(r, GPUCORE_ERR_CORRUPT_FILE, "'%s' is not a multiple of n_head%s", "n_embd", "");
    c->head_dim = r->st ? 0 : c->hidden / c->heads;
}

static void read_rope_scaling(reader *r, lm_config *c)
{
    const cJSON *rs = field(r, "rope_scaling");
    if (!rs) return;
    if (!cJSON_IsObject(rs)) { bad(r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' must be an object or null%s", "rope_scaling", ""); return; }
    reader sub = {rs, r->path, GPUCORE_OK};
    const char *type = get_str(&sub, "rope_type", NULL);
    if (!type) type = get_str(&sub, "type", "");
    if (strcmp(type, "llama3")) {
        char why[160];
        snprintf(why, sizeof why, "rope_type \"%.64s\" (only \"llama3\" is implemented)", type);
        refuse_if(r, 1, "rope_scaling", why);
        return;
    }
    c->rope_llama3 = 1;
    c->rs_factor = get_num(&sub, "factor", 0);
    c->rs_low = get_num(&sub, "low_freq_factor", 0);
    c->rs_high = get_num(&sub, "high_freq_factor", 0);
    c->rs_orig = get_int(&sub, "original_max_position_embeddings", NULL, 1);
    if (!sub.st && (!(c->rs_factor > 0) || !(c->rs_low > 0) || !(c->rs_high > c->rs_low)))
        bad(&sub, GPUCORE_ERR_CORRUPT_FILE, "field '%s' needs factor > 0 and high_freq_factor > low_freq_factor > 0%s",
            "rope_scaling", "");
    if (sub.st && !r->st) r->st = sub.st;
}

static void read_llama_family(reader *r, lm_config *c, const lm_arch *a)
{
    c->vocab = get_int(r, "vocab_size", NULL, 1);
    c->hidden = get_int(r, "hidden_size", NULL, 1);
    c->inter = get_int(r, "intermediate_size", NULL, 1);
    c->layers = get_int(r, "num_hidden_layers", NULL, 1);
    c->heads = get_int(r, "num_attention_heads", NULL, 1);
    c->kv_heads = get_int(r, "num_key_value_heads", &c->heads, 1);
    int64_t p2048 = 2048;
    c->max_pos = get_int(r, "max_position_embeddings", &p2048, 1);
    c->eps = get_num(r, "rms_norm_eps", 1e-6);
    c->rope_theta = get_num(r, "rope_theta", 10000.0);
    if (r->st) return;
    if (c->hidden % c->heads) { bad(r, GPUCORE_ERR_CORRUPT_FILE, "'%s' is not a multiple of num_attention_heads%s", "hidden_size", ""); return; }
    if (c->heads % c->kv_heads) { bad(r, GPUCORE_ERR_CORRUPT_FILE, "'%s' does not divide num_attention_heads%s", "num_key_value_heads", ""); return; }
    int64_t hd = c->hidden / c->heads;
    c->head_dim = hd;
    if (a->head_dim_key) c->head_dim = get_int(r, "head_dim", &hd, 1);
    else refuse_if(r, get_int(r, "head_dim", &hd, 1) != hd, "head_dim",
                   "transformers 4.44 uses hidden_size / num_attention_heads for this model_type");
    if (c->head_dim % 2) bad(r, GPUCORE_ERR_CORRUPT_FILE, "'%s' must be even for RoPE%s", "head_dim", "");
    refuse_if(r, !(c->rope_theta > 0), "rope_theta", "must be > 0");
    const char *act = get_str(r, "hidden_act", "silu");
    refuse_if(r, strcmp(act, "silu"), "hidden_act", "only \"silu\" (SwiGLU) is implemented");
    refuse_if(r, get_num(r, "partial_rotary_factor", 1.0) != 1.0, "partial_rotary_factor", "RoPE on part of head_dim");
    read_rope_scaling(r, c);
    c->tie = get_bool(r, "tie_word_embeddings", 0);
}

/* The biases and the sliding window, as the architecture's entry says. */
static void read_bias_window(reader *r, lm_config *c, const lm_arch *a)
{
    if (a->bias == LM_BIAS_KEYS) {
        c->qkv_bias = c->o_bias = get_bool(r, "attention_bias", 0);
        c->mlp_bias = get_bool(r, "mlp_bias", 0);
    } else if (a->bias != LM_BIAS_ALL) {
        refuse_if(r, get_bool(r, "attention_bias", 0), "attention_bias",
                  "this architecture's attention has no such biases in transformers");
        refuse_if(r, get_bool(r, "mlp_bias", 0), "mlp_bias", "this architecture's MLP has no biases in transformers");
    }
    if (a->bias != LM_BIAS_KEYS) {
        c->qkv_bias = a->bias == LM_BIAS_ALL || a->bias == LM_BIAS_QKV;
        c->o_bias = c->mlp_bias = a->bias == LM_BIAS_ALL;
    }
    int64_t none = -1, w4096 = 4096;
    c->sliding_window = -1;
    if (a->window == LM_WINDOW_KEY) c->sliding_window = get_int(r, "sliding_window", &none, 1);
    else if (a->window == LM_WINDOW_FLAG && get_bool(r, "use_sliding_window", 0))
        c->sliding_window = get_int(r, "sliding_window", &w4096, 1);
}

int lm_dtype_from_torch(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "float32")) return GPUCORE_F32;
    if (!strcmp(s, "bfloat16")) return GPUCORE_BF16;
    if (!strcmp(s, "float16")) return GPUCORE_F16;
    return -1;
}

const char *lm_torch_dtype(int dtype)
{
    return dtype == GPUCORE_BF16 ? "bfloat16" : dtype == GPUCORE_F16 ? "float16" : "float32";
}

/* The config from its JSON text (owned: kept in c->json on success, freed otherwise) and its parse
 * (deleted here); path names the source in messages. */
static gpucore_status config_from_json(char *text, void *jv, const char *path, lm_config *c)
{
    reader r = {(const cJSON *)jv, path, GPUCORE_OK};
    const char *type = get_str(&r, "model_type", NULL);
    if (!r.st && !type) bad(&r, GPUCORE_ERR_CORRUPT_FILE, "field '%s' is missing%s", "model_type", "");
    if (!r.st) {
        c->def = lm_arch_by_type(type);
        if (c->def) {
            c->arch = c->def->id;
            if (c->def->keys == LM_KEYS_GPT2) read_gpt2(&r, c);
            else read_llama_family(&r, c, c->def);
            read_bias_window(&r, c, c->def);
            c->layer_norm = c->def->norm == LM_NORM_LAYER;
            if (c->def->pos != LM_POS_ROPE) c->rope_theta = 0;
        } else {
            char why[256], known[160];
            snprintf(why, sizeof why, "model_type \"%.64s\" (%s are implemented)", type,
                     lm_arch_list(0, known, sizeof known));
            refuse_if(&r, 1, "model_type", why);
        }
    }
    if (!r.st) {
        c->bos = get_token(&r, "bos_token_id");
        c->eos = get_token(&r, "eos_token_id");
        c->pad = get_token(&r, "pad_token_id");
        c->file_dtype = lm_dtype_from_torch(get_str(&r, "torch_dtype", NULL));
        if (!c->rope_llama3) c->rs_factor = 1.0;
        /* products used for sizes stay far from int64 limits */
        if (c->vocab > ((int64_t)1 << 31) || c->hidden > ((int64_t)1 << 20) || c->inter > ((int64_t)1 << 22) ||
            c->layers > 4096 || c->max_pos > ((int64_t)1 << 24) || c->heads > 4096 || c->head_dim > 256)
            bad(&r, GPUCORE_ERR_NOT_SUPPORTED, "a size in '%s' is out of the supported range%s",
                "config.json (vocab_size <= 2^31, hidden <= 2^20, layers <= 4096, head_dim <= 256)", "");
    }
    cJSON_Delete((cJSON *)jv);
    if (r.st) { free(text); memset(c, 0, sizeof *c); return r.st; }
    c->json = text;
    return GPUCORE_OK;
}

gpucore_status lm_config_read(const char *folder, lm_config *c)
{
    memset(c, 0, sizeof *c);
    char *path = lm_strdupf("%s/config.json", folder);
    if (!path) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    char *text = NULL;
    void *jv = NULL;
    gpucore_status st = gpucore_io_read_json(path, &text, &jv, "gpucore_lm_create");
    if (!st) st = config_from_json(text, jv, path, c);
    free(path);
    return st;
}

gpucore_status lm_config_from_text(const char *text, const char *label, lm_config *c)
{
    memset(c, 0, sizeof *c);
    char *copy = lm_strdupf("%s", text);
    cJSON *jv = copy ? cJSON_Parse(copy) : NULL;
    if (!jv) {
        gpucore_status st = copy ? gpucore_set_error(GPUCORE_ERR_INTERNAL, "gpucore_lm_create: %s: the config made "
                                                     "from it is not JSON", label)
                                 : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
        free(copy);
        return st;
    }
    return config_from_json(copy, jv, label, c);
}

#else /* no cJSON */

gpucore_status lm_config_from_text(const char *text, const char *label, lm_config *c)
{
    (void)text;
    memset(c, 0, sizeof *c);
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_create: %s: this build has no JSON library (cJSON)", label);
}

gpucore_status lm_config_read(const char *folder, lm_config *c)
{
    (void)folder;
    memset(c, 0, sizeof *c);
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_create: this build has no JSON library (cJSON) "
                             "to read config.json");
}
#endif

void lm_config_free(lm_config *c)
{
    free(c->json);
    c->json = NULL;
}

gpucore_status lm_check_length(const gpucore_lm *lm, int64_t total, const char *op)
{
    const lm_config *c = &lm->cfg;
    if (total > c->max_pos)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %lld positions exceed the model's %s (%lld)", op,
                                 (long long)total, c->def->keys == LM_KEYS_GPT2 ? "n_positions" : "max_position_embeddings",
                                 (long long)c->max_pos);
    if (c->sliding_window >= 0 && total > c->sliding_window)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: %lld positions exceed the config's sliding_window "
                                 "(%lld); sliding-window attention is not implemented, so sequences are limited to it",
                                 op, (long long)total, (long long)c->sliding_window);
    return GPUCORE_OK;
}
