/*
 * load_gguf.c — a language model from a GGUF file (llama.cpp's format) instead of a Hugging
 * Face folder: the file's metadata written as the config.json transformers would have (so the
 * config reader's checks and refusals apply unchanged), llama.cpp's tensor names mapped to the
 * Hugging Face names of the registry (the architecture's entry, arch.c); the linear layers' weights
 * in a block format (Q4_0 .. Q6_K) kept as those blocks (quantize.c), every other weight decoded
 * to the model's dtype, one tensor at a time. llama.cpp's converter permutes the rows of Llama's q
 * and k projections so that rotary pairs sit side by side (interleaved); the model here rotates
 * the two halves of each head (as transformers does), so those rows are put back on the way in.
 * Anything the math would not honour (another architecture, RoPE scaling, partial rotary,
 * experts, a tensor the model does not have) is refused with a message naming it.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "lm_internal.h"
#include "io/gguf.h"

#define OP "gpucore_lm_create"

/* The GGUF name of registry name hf into buf; 0 when the table has none. */
static int gguf_name(const lm_arch *t, const char *hf, char *buf, size_t len)
{
    for (int i = 0; i < t->n_gguf_global; i++)
        if (!strcmp(hf, t->gguf_global[i].hf)) { snprintf(buf, len, "%s", t->gguf_global[i].gguf); return 1; }
    size_t pl = strlen(t->layer_prefix);
    if (strncmp(hf, t->layer_prefix, pl) || hf[pl] != '.') return 0;
    pl++;
    char *end;
    long long layer = strtoll(hf + pl, &end, 10);
    if (end == hf + pl || *end != '.') return 0;
    for (int i = 0; i < t->n_gguf_layer; i++)
        if (!strcmp(end + 1, t->gguf_layer[i].hf)) { snprintf(buf, len, "blk.%lld.%s", layer, t->gguf_layer[i].gguf); return 1; }
    return 0;
}

int lm_is_gguf(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ---- metadata ---- */

typedef struct meta { gpucore_gguf *f; const char *path, *arch; gpucore_status st; } meta;

static int64_t meta_int(meta *m, const char *suffix, int64_t dflt, int required)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    int64_t i = gpucore_gguf_kv_find(m->f, key), v = dflt;
    if (m->st) return dflt;
    if (i < 0) {
        if (required)
            m->st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s' has no metadata key '%s' (a %s model needs "
                                      "it)", m->path, key, m->arch);
        return dflt;
    }
    int type = 0;
    gpucore_gguf_kv_info(m->f, i, NULL, &type, NULL, NULL);
    if (type == GPUCORE_GGUF_ARRAY) { /* per-layer values (OpenELM's head counts, say) */
        m->st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, OP ": '%s': metadata key '%s' holds one value per layer; "
                                  "layers of different sizes are not supported", m->path, key);
        return dflt;
    }
    gpucore_status st = gpucore_gguf_kv_int(m->f, i, 0, &v);
    if (st || v < 0) {
        m->st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s': metadata key '%s' must be a non-negative "
                                  "integer", m->path, key);
        return dflt;
    }
    return v;
}

static double meta_float(meta *m, const char *suffix, double dflt)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", m->arch, suffix);
    int64_t i = gpucore_gguf_kv_find(m->f, key);
    double v = dflt;
    if (m->st || i < 0) return dflt;
    if (gpucore_gguf_kv_float(m->f, i, 0, &v))
        m->st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s': metadata key '%s' must be a float", m->path, key);
    return v;
}

static int64_t token_id(gpucore_gguf *f, const char *key)
{
    int64_t i = gpucore_gguf_kv_find(f, key), v = -1;
    if (i < 0 || gpucore_gguf_kv_int(f, i, 0, &v)) return -1;
    return v;
}

static void refuse(meta *m, const char *what)
{
    if (!m->st)
        m->st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, OP ": '%s': %s is not supported", m->path, what);
}

/* The file's metadata as the config.json transformers would have for it (new string in *json). */
static gpucore_status config_json(gpucore_gguf *f, const char *path, const lm_arch *t, int dtype, char **json)
{
    meta m = {f, path, t->gguf_arch, GPUCORE_OK};
    int64_t layers = meta_int(&m, "block_count", 0, 1), hidden = meta_int(&m, "embedding_length", 0, 1);
    int64_t heads = meta_int(&m, "attention.head_count", 0, 1);
    int64_t kv = meta_int(&m, "attention.head_count_kv", heads, 0);
    int64_t ctx = meta_int(&m, "context_length", 0, 1), ffn = meta_int(&m, "feed_forward_length", 4 * hidden, 0);
    if (!m.st && (heads < 1 || hidden % heads))
        m.st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s': %s.embedding_length (%lld) is not a multiple "
                                 "of %s.attention.head_count (%lld)", path, t->gguf_arch, (long long)hidden, t->gguf_arch,
                                 (long long)heads);
    int64_t head_dim = m.st ? 0 : hidden / heads;
    char what[320];
    if (meta_int(&m, "expert_count", 0, 0) > 0) refuse(&m, "a mixture of experts (expert_count)");
    int64_t rot = meta_int(&m, "rope.dimension_count", head_dim, 0);
    if (t->pos == LM_POS_ROPE && rot != head_dim) {
        snprintf(what, sizeof what, "RoPE on %lld of the head's %lld dimensions (rope.dimension_count)", (long long)rot,
                 (long long)head_dim);
        refuse(&m, what);
    }
    if (meta_int(&m, "attention.key_length", head_dim, 0) != head_dim ||
        meta_int(&m, "attention.value_length", head_dim, 0) != head_dim)
        refuse(&m, "a head size other than embedding_length / head_count (attention.key_length / value_length)");
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", t->gguf_arch);
    int64_t ki = gpucore_gguf_kv_find(f, key);
    const char *scaling = NULL;
    if (ki >= 0 && gpucore_gguf_kv_string(f, ki, 0, &scaling, NULL) == GPUCORE_OK && strcmp(scaling, "none")) {
        snprintf(what, sizeof what, "RoPE scaling \"%.64s\" (%s)", scaling, key);
        refuse(&m, what);
    }
    if (gpucore_gguf_tensor_find(f, "rope_freqs.weight") >= 0)
        refuse(&m, "the tensor rope_freqs.weight (per-frequency RoPE factors, as Llama 3.1 files carry)");
    /* vocabulary: the token list, else <arch>.vocab_size, else the embedding's rows */
    int64_t vocab = -1, ti = gpucore_gguf_kv_find(f, "tokenizer.ggml.tokens");
    if (ti >= 0) gpucore_gguf_kv_info(f, ti, NULL, NULL, NULL, &vocab);
    if (vocab < 0) vocab = meta_int(&m, "vocab_size", -1, 0);
    int64_t emb = gpucore_gguf_tensor_find(f, "token_embd.weight"), dims[4] = {0};
    if (vocab < 0 && emb >= 0) gpucore_gguf_tensor_info(f, emb, NULL, NULL, NULL, dims, NULL, NULL), vocab = dims[1];
    if (!m.st && vocab < 1)
        m.st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s' gives no vocabulary size (no tokenizer.ggml.tokens, "
                                 "%s.vocab_size or token_embd.weight)", path, t->gguf_arch);
    if (m.st) return m.st;
    int tie = gpucore_gguf_tensor_find(f, "output.weight") < 0;
    int64_t bos = token_id(f, "tokenizer.ggml.bos_token_id"), eos = token_id(f, "tokenizer.ggml.eos_token_id");
    int64_t pad = token_id(f, "tokenizer.ggml.padding_token_id");
    const char *torch = dtype == GPUCORE_BF16 ? "bfloat16" : dtype == GPUCORE_F16 ? "float16" : "float32";
    if (t->keys == LM_KEYS_GPT2) {
        double eps = meta_float(&m, "attention.layer_norm_epsilon", 1e-5);
        *json = lm_strdupf("{\"model_type\": \"%s\", \"vocab_size\": %lld, \"n_embd\": %lld, \"n_layer\": %lld, "
                           "\"n_head\": %lld, \"n_positions\": %lld, \"n_inner\": %lld, \"layer_norm_epsilon\": %.17g, "
                           "\"activation_function\": \"gelu_new\", \"tie_word_embeddings\": %s, \"bos_token_id\": %lld, "
                           "\"eos_token_id\": %lld, \"pad_token_id\": %lld, \"torch_dtype\": \"%s\"}",
                           t->model_type, (long long)vocab, (long long)hidden, (long long)layers, (long long)heads,
                           (long long)ctx, (long long)ffn, eps, tie ? "true" : "false", (long long)bos, (long long)eos, (long long)pad,
                           torch);
    } else {
        double eps = meta_float(&m, "attention.layer_norm_rms_epsilon", 1e-6);
        double theta = meta_float(&m, "rope.freq_base", 10000.0);
        int qkv_bias = gpucore_gguf_tensor_find(f, "blk.0.attn_q.bias") >= 0;
        int mlp_bias = gpucore_gguf_tensor_find(f, "blk.0.ffn_up.bias") >= 0;
        char extra[96];
        if (t->bias == LM_BIAS_KEYS)
            snprintf(extra, sizeof extra, "\"attention_bias\": %s, \"mlp_bias\": %s", qkv_bias ? "true" : "false",
                     mlp_bias ? "true" : "false");
        else
            snprintf(extra, sizeof extra, "\"use_sliding_window\": false");
        *json = lm_strdupf("{\"model_type\": \"%s\", \"vocab_size\": %lld, \"hidden_size\": %lld, "
                           "\"intermediate_size\": %lld, \"num_hidden_layers\": %lld, \"num_attention_heads\": %lld, "
                           "\"num_key_value_heads\": %lld, \"max_position_embeddings\": %lld, \"rms_norm_eps\": %.17g, "
                           "\"rope_theta\": %.17g, \"hidden_act\": \"silu\", \"tie_word_embeddings\": %s, %s, "
                           "\"bos_token_id\": %lld, \"eos_token_id\": %lld, \"pad_token_id\": %lld, "
                           "\"torch_dtype\": \"%s\"}",
                           t->model_type, (long long)vocab, (long long)hidden, (long long)ffn, (long long)layers,
                           (long long)heads, (long long)kv, (long long)ctx, eps, theta, tie ? "true" : "false", extra,
                           (long long)bos, (long long)eos, (long long)pad, torch);
    }
    if (m.st) { free(*json); *json = NULL; return m.st; }
    return *json ? GPUCORE_OK : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, OP ": out of host memory");
}

/* ---- weights ---- */

/* llama.cpp's converter stores row h*hd + 2*i + half of each head where transformers has
 * h*hd + half*hd/2 + i (rotary halves); put the rows back. rows = n_head * hd, each row_bytes
 * bytes (f32 values, or whole blocks of a quantized matrix). */
static gpucore_status unpermute_byte_rows(uint8_t *w, int64_t rows, int64_t row_bytes, int64_t n_head)
{
    int64_t hd = rows / n_head;
    uint8_t *tmp = malloc((size_t)(hd * row_bytes));
    if (!tmp) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, OP ": out of host memory");
    for (int64_t h = 0; h < n_head; h++) {
        uint8_t *head = w + h * hd * row_bytes;
        for (int64_t half = 0; half < 2; half++)
            for (int64_t i = 0; i < hd / 2; i++)
                memcpy(tmp + (half * (hd / 2) + i) * row_bytes, head + (2 * i + half) * row_bytes, (size_t)row_bytes);
        memcpy(head, tmp, (size_t)(hd * row_bytes));
    }
    free(tmp);
    return GPUCORE_OK;
}

/* Which q/k head count the rows of p are permuted by (0: none). */
static int64_t permuted_heads(const gpucore_lm *lm, const lm_arch *t, const lm_param *p)
{
    if (!t->gguf_unpermute_qk) return 0;
    if (strstr(p->name, t->attn[0])) return lm->cfg.heads;
    if (strstr(p->name, t->attn[1])) return lm->cfg.kv_heads;
    return 0;
}

/* A linear weight in a block format: its bytes kept, rows put back in place. */
static gpucore_status adopt_blocks(gpucore_lm *lm, gpucore_gguf *f, const lm_arch *t, lm_param *p, int64_t i,
                                   int fmt)
{
    void *raw = NULL;
    int64_t nbytes = 0;
    gpucore_status st = gguf_read_raw(f, i, &raw, &nbytes, OP);
    if (st) return st;
    int64_t heads = permuted_heads(lm, t, p), rows = p->shape[0];
    if (heads && nbytes % rows == 0) st = unpermute_byte_rows(raw, rows, nbytes / rows, heads);
    if (!st) st = lm_adopt_quantized(lm, p->lin, fmt, 0, raw, nbytes);
    free(raw);
    return st;
}

static gpucore_status load_param(gpucore_lm *lm, gpucore_gguf *f, const lm_arch *t, lm_param *p, int dtype)
{
    char gname[200];
    if (!gguf_name(t, p->name, gname, sizeof gname))
        return gpucore_set_error(GPUCORE_ERR_INTERNAL, OP ": no GGUF name for the %s weight '%s'", t->gguf_arch, p->name);
    int64_t i = gpucore_gguf_tensor_find(f, gname);
    if (i < 0)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s' has no tensor '%s' (the %s model's '%s', implied "
                                 "by its metadata)", lm->folder, gname, t->gguf_arch, p->name);
    int nd;
    int64_t dims[4];
    gpucore_gguf_tensor_info(f, i, NULL, NULL, &nd, dims, NULL, NULL);
    int same = nd == p->ndim;
    for (int d = 0; same && d < nd; d++) same = dims[nd - 1 - d] == p->shape[d];
    if (!same) {
        int64_t got[4];
        for (int d = 0; d < nd; d++) got[d] = dims[nd - 1 - d];
        char a[96], b[96];
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, OP ": tensor '%s' in '%s' is %s but the metadata implies %s",
                                 gname, lm->folder, gpucore_shape_str(nd, got, a, sizeof a),
                                 gpucore_shape_str(p->ndim, p->shape, b, sizeof b));
    }
    int type = 0;
    gpucore_gguf_tensor_info(f, i, NULL, &type, NULL, NULL, NULL, NULL);
    if (p->lin && gguf_quant_format(type) >= 0) return adopt_blocks(lm, f, t, p, i, gguf_quant_format(type));
    float *v = NULL;
    gpucore_status st = gguf_read_f32(f, i, &v, OP);
    if (st) return st;
    int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1, heads = permuted_heads(lm, t, p);
    if (heads) st = unpermute_byte_rows((uint8_t *)v, rows, cols * (int64_t)sizeof *v, heads);
    if (!st) {
        gguf_f32_to_dtype(v, rows * cols, dtype);
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)dtype, p->ndim, p->shape, p->slot);
    }
    if (!st) st = gpucore_copy_from_host(*p->slot, v, rows * cols * gpucore_dtype_size((gpucore_dtype)dtype));
    free(v);
    return st;
}

/* The head's GGUF tensor (output.weight, or the tied token_embd.weight) kept in its quantized blocks
 * as lm->head_q beside the dense head load_param made, when it is quantized and at most a third of the
 * dense head's bytes (dtype): a decode step then reads it instead. Decoding a block costs about as much
 * whatever its format, so a Q8_0 head beside a bf16 one (0.53 of its bytes) made the SmolLM2 step slower
 * (21.96-23.57 -> 23.84-26.76 ms), beside an f32 one (0.27) faster (21.69-26.48 -> 18.26-22.51 ms). */
static gpucore_status keep_head_blocks(gpucore_lm *lm, gpucore_gguf *f, const lm_arch *t, int dtype)
{
    gpucore_tensor **head = lm->cfg.tie ? &lm->wte : &lm->head;
    char gname[200];
    int64_t i = -1;
    for (int64_t k = 0; k < lm->n_params && i < 0; k++)
        if (lm->params[k].slot == head && gguf_name(t, lm->params[k].name, gname, sizeof gname))
            i = gpucore_gguf_tensor_find(f, gname);
    int type = 0;
    if (i >= 0) gpucore_gguf_tensor_info(f, i, NULL, &type, NULL, NULL, NULL, NULL);
    const int fmt = i >= 0 ? gguf_quant_format(type) : -1;
    if (fmt < 0) return GPUCORE_OK; /* a float head: the dense one is what there is */
    int64_t nbytes = 0;
    gpucore_status st = gpucore_quant_size((gpucore_quant_format)fmt, lm->cfg.vocab, lm->cfg.hidden, 0, 0, &nbytes);
    if (st || 3 * nbytes > lm->cfg.vocab * lm->cfg.hidden * (int64_t)gpucore_dtype_size((gpucore_dtype)dtype))
        return GPUCORE_OK; /* not a third of the dense head's bytes (or a shape the format cannot hold): dense */
    void *raw = NULL;
    st = gguf_read_raw(f, i, &raw, &nbytes, OP);
    if (st) return st;
    lm->head_q.in = lm->cfg.hidden;
    lm->head_q.out = lm->cfg.vocab;
    lm->head_q.module = lm_strdupf("%s", gname);
    if (!lm->head_q.module) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, OP ": out of host memory");
    if (!st) st = lm_adopt_quantized(lm, &lm->head_q, fmt, 0, raw, nbytes);
    free(raw);
    return st;
}

/* Every tensor of the file is one the model reads. */
static gpucore_status check_leftovers(gpucore_lm *lm, gpucore_gguf *f, const lm_arch *t)
{
    char gname[200];
    for (int64_t i = 0; i < gpucore_gguf_tensor_count(f); i++) {
        const char *name;
        gpucore_gguf_tensor_info(f, i, &name, NULL, NULL, NULL, NULL, NULL);
        int used = 0;
        for (int64_t k = 0; k < lm->n_params && !used; k++)
            used = gguf_name(t, lm->params[k].name, gname, sizeof gname) && !strcmp(gname, name);
        if (!used)
            return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, OP ": '%s' holds tensor '%s', which a %s model as "
                                     "implemented here does not have", lm->folder, name, t->gguf_arch);
    }
    return GPUCORE_OK;
}

static int float_dtype_of(int ggml_type)
{
    return ggml_type == 1 ? GPUCORE_F16 : ggml_type == 30 ? GPUCORE_BF16 : GPUCORE_F32;
}

gpucore_status lm_load_gguf(gpucore_lm *lm, int dtype)
{
    gpucore_gguf *f = NULL;
    gpucore_status st = gpucore_gguf_open(lm->folder, &f);
    if (st && strstr(gpucore_last_error(), "magic")) {
        char why[512];
        snprintf(why, sizeof why, "%s", gpucore_last_error()); /* rewritten below */
        return gpucore_set_error(st, OP ": %s; a model is a Hugging Face folder (pass the folder, not a file in it) "
                                 "or a GGUF file", why);
    }
    if (st) return st;
    const char *arch = NULL;
    int64_t ai = gpucore_gguf_kv_find(f, "general.architecture");
    if (ai < 0 || gpucore_gguf_kv_string(f, ai, 0, &arch, NULL) != GPUCORE_OK) {
        gpucore_gguf_close(f);
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, OP ": '%s' has no string general.architecture",
                                 lm->folder);
    }
    const lm_arch *t = lm_arch_by_gguf(arch);
    if (!t) {
        char known[160];
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, OP ": '%s' is a GGUF model of architecture \"%.64s\"; the "
                               "architectures read from GGUF files are %s", lm->folder, arch,
                               lm_arch_list(1, known, sizeof known));
        gpucore_gguf_close(f);
        return st;
    }
    if (dtype < 0) {
        int64_t emb = gpucore_gguf_tensor_find(f, "token_embd.weight");
        int type = 0;
        if (emb >= 0) gpucore_gguf_tensor_info(f, emb, NULL, &type, NULL, NULL, NULL, NULL);
        dtype = float_dtype_of(type);
    }
    char *json = NULL;
    st = config_json(f, lm->folder, t, dtype, &json);
    if (!st) st = lm_config_from_text(json, lm->folder, &lm->cfg);
    free(json);
    if (!st) st = lm_build_registry(lm);
    for (int64_t i = 0; i < lm->n_params && !st; i++) st = load_param(lm, f, t, &lm->params[i], dtype);
    if (!st) st = check_leftovers(lm, f, t);
    if (!st) st = keep_head_blocks(lm, f, t, dtype);
    if (!st) lm->dtype = dtype;
    gpucore_gguf_close(f);
    if (st) lm_free_weights(lm);
    return st;
}
