/*
 * weights.c — the mapping between Hugging Face state-dict names and the model's
 * tensors (the registry), and loading them from model.safetensors or from the
 * shards a model.safetensors.index.json names: every expected tensor present with
 * the shape the config implies, no tensor left over that the model would ignore
 * (a bias the architecture does not have, say), dtype converted and GPT-2's
 * Conv1D weights transposed to [out, in] on the way in; a folder that transformers saved
 * with bitsandbytes' 4-bit weights (quantization_config) keeps them quantized (bnb_folder.c).
 * On any failure everything loaded so far is released.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "lm_internal.h"
#include "bnb_folder.h"
#include "io/safetensors.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

static gpucore_status add_param(gpucore_lm *lm, char *name, gpucore_tensor **slot, gpucore_tensor **grad, int ndim,
                                int64_t s0, int64_t s1, int transposed)
{
    if (!name) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    lm_param *p = &lm->params[lm->n_params++];
    p->name = name;
    p->slot = slot;
    p->grad = grad;
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = s1;
    p->transposed = transposed;
    return GPUCORE_OK;
}

static gpucore_status add_linear(gpucore_lm *lm, lm_linear *l, const char *module, int64_t in, int64_t out, int bias,
                                 int conv1d)
{
    l->in = in;
    l->out = out;
    l->conv1d = conv1d;
    l->module = lm_strdupf("%s", module);
    if (!l->module) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    l->leaf = strrchr(l->module, '.') + 1;
    gpucore_status st = add_param(lm, lm_strdupf("%s.weight", module), &l->w, &l->dw, 2, out, in, conv1d);
    if (!st) lm->params[lm->n_params - 1].lin = l;
    if (!st && bias) st = add_param(lm, lm_strdupf("%s.bias", module), &l->b, &l->db, 1, out, 0, 0);
    return st;
}

/* A norm's weight, and its bias for a LayerNorm. */
static gpucore_status add_norm(gpucore_lm *lm, const char *module, gpucore_tensor **w, gpucore_tensor **dw,
                               gpucore_tensor **b, gpucore_tensor **db)
{
    int64_t D = lm->cfg.hidden;
    gpucore_status st = add_param(lm, lm_strdupf("%s.weight", module), w, dw, 1, D, 0, 0);
    if (!st && lm->cfg.def->norm == LM_NORM_LAYER) st = add_param(lm, lm_strdupf("%s.bias", module), b, db, 1, D, 0, 0);
    return st;
}

/* The registry from the architecture's entry (arch.h): its names, linear counts, biases and layouts. */
gpucore_status lm_build_registry(gpucore_lm *lm)
{
    const lm_config *c = &lm->cfg;
    const lm_arch *a = c->def;
    int64_t n = 6 + c->layers * 18;
    lm->params = calloc((size_t)n, sizeof *lm->params);
    lm->layer = calloc((size_t)c->layers, sizeof *lm->layer);
    if (!lm->params || !lm->layer) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    int64_t D = c->hidden, F = c->inter, qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
    int na = lm_arch_n_attn(a), nm = lm_arch_n_mlp(a);
    /* in, out, bias of each linear in lm_layer's order */
    int64_t ain[4] = {D, D, D, qd}, aout[4] = {qd, kvd, kvd, D};
    int abias[4] = {c->qkv_bias, c->qkv_bias, c->qkv_bias, c->o_bias};
    if (a->fused_qkv) {
        ain[1] = qd; aout[0] = qd + 2 * kvd; aout[1] = D; abias[1] = c->o_bias;
    }
    int64_t min_[3] = {D, D, F}, mout[3] = {F, F, D};
    if (nm == 2) { min_[1] = F; mout[1] = D; }
    char m[160];
    gpucore_status st = add_param(lm, lm_strdupf("%s.%s.weight", a->prefix, a->embed), &lm->wte, &lm->dwte, 2,
                                  c->vocab, D, 0);
    if (!st && a->pos == LM_POS_LEARNED)
        st = add_param(lm, lm_strdupf("%s.%s.weight", a->prefix, a->pos_embed), &lm->wpe, &lm->dwpe, 2, c->max_pos, D, 0);
    for (int64_t i = 0; i < c->layers && !st; i++) {
        lm_layer *L = &lm->layer[i];
        L->lm = lm;
        L->index = i;
        L->n_attn = na;
        L->n_mlp = nm;
        snprintf(m, sizeof m, "%s.%lld.%s", a->layer_prefix, (long long)i, a->norm1);
        st = add_norm(lm, m, &L->n1_w, &L->dn1_w, &L->n1_b, &L->dn1_b);
        for (int k = 0; k < na && !st; k++) {
            snprintf(m, sizeof m, "%s.%lld.%s", a->layer_prefix, (long long)i, a->attn[k]);
            st = add_linear(lm, &L->attn[k], m, ain[k], aout[k], abias[k], a->conv1d);
        }
        snprintf(m, sizeof m, "%s.%lld.%s", a->layer_prefix, (long long)i, a->norm2);
        if (!st) st = add_norm(lm, m, &L->n2_w, &L->dn2_w, &L->n2_b, &L->dn2_b);
        for (int k = 0; k < nm && !st; k++) {
            snprintf(m, sizeof m, "%s.%lld.%s", a->layer_prefix, (long long)i, a->mlp_names[k]);
            st = add_linear(lm, &L->mlp[k], m, min_[k], mout[k], c->mlp_bias, a->conv1d);
        }
    }
    snprintf(m, sizeof m, "%s.%s", a->prefix, a->final_norm);
    if (!st) st = add_norm(lm, m, &lm->nf_w, &lm->dnf_w, &lm->nf_b, &lm->dnf_b);
    if (!st && !c->tie) st = add_param(lm, lm_strdupf("lm_head.weight"), &lm->head, &lm->dhead, 2, c->vocab, D, 0);
    return st;
}

/* ---- the files ---- */

typedef struct st_source {
    char *file;                 /* shard file name (relative) */
    gpucore_safetensors *h;
} st_source;

typedef struct loader {
    gpucore_lm *lm;
    st_source *src;
    int64_t n_src;
    char **map_names;           /* index: tensor name -> source index */
    int64_t *map_src, n_map;
    int bare;                   /* files without the "<prefix>." of the entry's names (prefix_optional) */
#if GPUCORE_HAVE_CJSON
    lm_bnb bnb;                 /* config.json's bitsandbytes quantization (bnb.fmt -1: none) */
#endif
} loader;

static void loader_free(loader *ld)
{
    for (int64_t i = 0; i < ld->n_src; i++) { gpucore_safetensors_close(ld->src[i].h); free(ld->src[i].file); }
    free(ld->src);
    for (int64_t i = 0; i < ld->n_map; i++) free(ld->map_names[i]);
    free(ld->map_names);
    free(ld->map_src);
#if GPUCORE_HAVE_CJSON
    lm_bnb_free(&ld->bnb);
#endif
}

static gpucore_status open_source(loader *ld, const char *file, int64_t *index, const char *index_path)
{
    for (int64_t i = 0; i < ld->n_src; i++)
        if (!strcmp(ld->src[i].file, file)) { *index = i; return GPUCORE_OK; }
    if (strchr(file, '/') || !strcmp(file, "..") || !*file)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: '%s' names the shard '%s', which is not a "
                                 "file name inside the folder", index_path, file);
    st_source *ns = realloc(ld->src, (size_t)(ld->n_src + 1) * sizeof *ns);
    if (!ns) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    ld->src = ns;
    st_source *s = &ld->src[ld->n_src];
    s->file = lm_strdupf("%s", file);
    s->h = NULL;
    char *path = lm_strdupf("%s/%s", ld->lm->folder, file);
    if (!s->file || !path) { free(s->file); free(path); return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory"); }
    if (index_path && access(path, F_OK) != 0) {
        gpucore_status st = gpucore_set_error(GPUCORE_ERR_IO, "gpucore_lm_create: the shard '%s' named by '%s' is missing",
                                              path, index_path);
        free(s->file); free(path);
        return st;
    }
    gpucore_status st = gpucore_safetensors_open(path, &s->h);
    free(path);
    if (st) { free(s->file); return st; }
    *index = ld->n_src++;
    return GPUCORE_OK;
}

static gpucore_status read_index(loader *ld, const char *index_path)
{
#if GPUCORE_HAVE_CJSON
    char *text = NULL;
    void *jv = NULL;
    gpucore_status st = gpucore_io_read_json(index_path, &text, &jv, "gpucore_lm_create");
    if (st) return st;
    free(text);
    cJSON *root = jv;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: '%s' has no \"weight_map\" object", index_path);
    }
    int64_t n = cJSON_GetArraySize(wm);
    ld->map_names = calloc((size_t)(n ? n : 1), sizeof *ld->map_names);
    ld->map_src = calloc((size_t)(n ? n : 1), sizeof *ld->map_src);
    if (!ld->map_names || !ld->map_src) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (st) break;
        if (!cJSON_IsString(e)) {
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: '%s': weight_map entry '%s' is not a file name",
                                   index_path, e->string);
            break;
        }
        int64_t si;
        st = open_source(ld, e->valuestring, &si, index_path);
        if (st) break;
        ld->map_names[ld->n_map] = lm_strdupf("%s", e->string);
        if (!ld->map_names[ld->n_map]) { st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory"); break; }
        ld->map_src[ld->n_map++] = si;
        gpucore_dtype dt;
        int nd;
        int64_t shp[GPUCORE_MAX_DIMS];
        if (gpucore_safetensors_info(ld->src[si].h, e->string, &dt, &nd, shp) != GPUCORE_OK)
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: '%s' places tensor '%s' in '%s', which "
                                   "does not hold it", index_path, e->string, e->valuestring);
    }
    cJSON_Delete(root);
    return st;
#else
    (void)ld;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_create: '%s': this build has no JSON library", index_path);
#endif
}

/* Which source holds `name` (-1: none). */
static int64_t find_source(const loader *ld, const char *name)
{
    if (ld->n_map) {
        for (int64_t i = 0; i < ld->n_map; i++)
            if (!strcmp(ld->map_names[i], name)) return ld->map_src[i];
        return -1;
    }
    return gpucore_st_has(ld->src[0].h, name) ? 0 : -1;
}

/* The name a registry tensor has in the files. */
static const char *file_name(const loader *ld, const char *name)
{
    const char *pre = ld->lm->cfg.def->prefix;
    size_t pl = strlen(pre);
    if (ld->bare && !strncmp(name, pre, pl) && name[pl] == '.') return name + pl + 1;
    return name;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Tensors the files may hold that the model does not use: buffers transformers never loads. */
static int skippable(const gpucore_lm *lm, const char *name)
{
    if (ends_with(name, "rotary_emb.inv_freq")) return 1;
    for (int k = 0; k < 2; k++)
        if (lm->cfg.def->skip[k] && ends_with(name, lm->cfg.def->skip[k])) return 1;
    if (lm->cfg.tie && !strcmp(name, "lm_head.weight")) return 1; /* tied: transformers overwrites it */
    return 0;
}

static int is_float(gpucore_dtype dt)
{
    return dt == GPUCORE_F32 || dt == GPUCORE_BF16 || dt == GPUCORE_F16 || dt == GPUCORE_F64;
}

#if GPUCORE_HAVE_CJSON
static gpucore_safetensors *bnb_find(void *user, const char *name, const char **file)
{
    loader *ld = user;
    int64_t si = find_source(ld, name);
    if (si < 0) return NULL;
    *file = ld->src[si].file;
    return ld->src[si].h;
}

/* A linear layer of a bitsandbytes folder: quantized unless llm_int8_skip_modules keeps it dense. */
static int bnb_quantized(const loader *ld, const lm_param *p)
{
    return p->lin && ld->bnb.fmt >= 0 && !lm_bnb_skipped(&ld->bnb, p->lin->module);
}
#endif

static gpucore_status load_param(loader *ld, lm_param *p, int *dtype)
{
    gpucore_lm *lm = ld->lm;
#if GPUCORE_HAVE_CJSON
    if (bnb_quantized(ld, p)) return lm_bnb_load_linear(lm, &ld->bnb, p->lin, bnb_find, ld);
#endif
    const char *fname = file_name(ld, p->name);
    int64_t si = find_source(ld, fname);
    if (si < 0)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: tensor '%s' is missing from %s in '%s' "
                                 "(config.json's model needs it)", fname,
                                 ld->n_map ? "model.safetensors.index.json's weight_map" : "model.safetensors", lm->folder);
    gpucore_safetensors *h = ld->src[si].h;
    gpucore_dtype dt;
    int nd;
    int64_t shp[GPUCORE_MAX_DIMS];
    gpucore_status st = gpucore_safetensors_info(h, fname, &dt, &nd, shp);
    if (st) return st;
    if (!is_float(dt))
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "gpucore_lm_create: tensor '%s' in '%s' is %s; weights must "
                                 "be f32, bf16, f16 or f64", fname, ld->src[si].file, gpucore_dtype_name(dt));
    int64_t want[2] = {p->shape[0], p->shape[1]};
    if (p->transposed) { want[0] = p->shape[1]; want[1] = p->shape[0]; }
    if (nd != p->ndim || shp[0] != want[0] || (nd == 2 && shp[1] != want[1])) {
        char got[96], exp[96];
        gpucore_shape_str(nd, shp, got, sizeof got);
        gpucore_shape_str(p->ndim, want, exp, sizeof exp);
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "gpucore_lm_create: tensor '%s' in '%s' has shape %s but "
                                 "config.json implies %s", fname, ld->src[si].file, got, exp);
    }
    if (*dtype < 0) *dtype = dt == GPUCORE_F64 ? GPUCORE_F32 : dt;
    gpucore_tensor *t = NULL;
    if (p->lin && lm->quant_fmt >= 0) { /* quantized from the file's values, one tensor at a time */
        gpucore_context *hc = lm->quant_host ? lm->quant_host : lm->ctx;
        st = gpucore_safetensors_load_tensor(h, hc, fname, &t);
        if (!st && (dt == GPUCORE_F64 || p->transposed)) {
            gpucore_tensor *c = NULL;
            st = lm_convert(t, dt == GPUCORE_F64 ? GPUCORE_F32 : (int)dt, p->transposed, &c);
            gpucore_tensor_destroy(t);
            t = c;
        }
        if (!st) st = lm_quantize_linear(lm, p->lin, t);
        gpucore_tensor_destroy(t);
        return st;
    }
    st = gpucore_safetensors_load_tensor(h, lm->ctx, fname, &t);
    if (st) return st;
    if ((int)dt != *dtype || p->transposed) {
        gpucore_tensor *c = NULL;
        st = lm_convert(t, *dtype, p->transposed, &c);
        gpucore_tensor_destroy(t);
        if (st) return st;
        t = c;
    }
    *p->slot = t;
    return GPUCORE_OK;
}

/* Every tensor in the files is one the model reads (or a known buffer). */
static gpucore_status check_leftovers(loader *ld)
{
    gpucore_lm *lm = ld->lm;
    for (int64_t s = 0; s < ld->n_src; s++) {
        int64_t n = gpucore_safetensors_count(ld->src[s].h);
        for (int64_t i = 0; i < n; i++) {
            const char *name = gpucore_safetensors_name(ld->src[s].h, i);
            if (skippable(lm, name)) continue;
            int used = 0;
            for (int64_t k = 0; k < lm->n_params && !used; k++) {
                const lm_param *p = &lm->params[k];
                used = !strcmp(file_name(ld, p->name), name) ||
                       (p->lin && p->lin->wq && lm_bnb_state_key(p->lin->q.format, p->name, name));
            }
            if (!used)
                return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "gpucore_lm_create: '%s' holds tensor '%s', which a "
                                         "%s model with this config.json does not have (a field such as a bias flag may "
                                         "disagree with the weights)", ld->src[s].file, name, gpucore_lm_arch_name(lm));
        }
    }
    return GPUCORE_OK;
}

gpucore_status lm_load_weights(gpucore_lm *lm, int dtype)
{
    loader ld;
    memset(&ld, 0, sizeof ld);
    ld.lm = lm;
    char *index = lm_strdupf("%s/model.safetensors.index.json", lm->folder);
    char *single = lm_strdupf("%s/model.safetensors", lm->folder);
    gpucore_status st = GPUCORE_OK;
    if (!index || !single) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_create: out of host memory");
    else if (access(single, F_OK) == 0) {
        int64_t si;
        st = open_source(&ld, "model.safetensors", &si, NULL);
    } else if (access(index, F_OK) == 0) {
        st = read_index(&ld, index);
    } else {
        st = gpucore_set_error(GPUCORE_ERR_IO, "gpucore_lm_create: '%s' holds neither model.safetensors nor "
                               "model.safetensors.index.json (only safetensors checkpoints are read)", lm->folder);
    }
#if GPUCORE_HAVE_CJSON
    if (!st) st = lm_bnb_read_config(lm->cfg.json, &ld.bnb);
    if (!st && ld.bnb.fmt >= 0) {
        if (lm->quant_fmt >= 0)
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "gpucore_lm_create: '%s' holds bitsandbytes-quantized "
                                   "weights (config.json's quantization_config); load it without quantize", lm->folder);
        if (dtype < 0) dtype = ld.bnb.compute_dtype;
        if (!st && lm->ctx->type != GPUCORE_DEVICE_CPU && !lm->quant_host) /* the tensors pass through the host */
            st = gpucore_context_create("cpu", &lm->quant_host);
    }
#endif
    if (!st && lm->cfg.def->prefix_optional && find_source(&ld, lm->params[0].name) < 0) {
        ld.bare = 1; /* the embedding (params[0]) named without the prefix? */
        ld.bare = find_source(&ld, file_name(&ld, lm->params[0].name)) >= 0;
    }
    for (int64_t i = 0; i < lm->n_params && !st; i++) st = load_param(&ld, &lm->params[i], &dtype);
    if (!st) st = check_leftovers(&ld);
    if (!st) lm->dtype = dtype;
    loader_free(&ld);
    free(index);
    free(single);
    if (st) lm_free_weights(lm);
    return st;
}

void lm_free_weights(gpucore_lm *lm)
{
    for (int64_t i = 0; i < lm->n_params; i++) {
        lm_destroy_tensor(lm->params[i].slot);
        lm_destroy_tensor(lm->params[i].grad);
        if (lm->params[i].lin) lm_destroy_tensor(&lm->params[i].lin->wq);
    }
    lm_destroy_tensor(&lm->head_q.wq);
    free(lm->head_q.module);
    memset(&lm->head_q, 0, sizeof lm->head_q);
}
