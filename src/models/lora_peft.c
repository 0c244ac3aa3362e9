/*
 * lora_peft.c — LoRA adapters on the model's linear layers in PEFT's format:
 * add fresh ones (A kaiming-uniform as PEFT initialises it, B zero), load a PEFT
 * adapter folder (adapter_config.json + adapter_model.safetensors, every field
 * that would change the math checked by name), save one that PEFT loads, and
 * merge them into the base weights. New adapters are built completely before the
 * old ones are replaced, so a failed load leaves the model as it was.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "lm_internal.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

/* PEFT's rule for a list of target names: the module name equals it or ends with "." + it. */
int lm_module_matches(const char *module, const char *target)
{
    size_t a = strlen(module), b = strlen(target);
    if (!b) return 0;
    if (a == b) return !strcmp(module, target);
    return a > b && module[a - b - 1] == '.' && !strcmp(module + a - b, target);
}

static int matches(const lm_linear *l, const char *target)
{
    return lm_module_matches(l->module, target);
}

typedef struct pending {
    lm_linear **lin;
    gpucore_tensor **a, **b;
    int64_t n, cap;
} pending;

static gpucore_status collect(gpucore_lm *lm, lm_linear *l, void *user)
{
    (void)lm;
    pending *p = user;
    if (p->n < p->cap) p->lin[p->n++] = l;
    return GPUCORE_OK;
}

static gpucore_status pending_init(gpucore_lm *lm, pending *p)
{
    memset(p, 0, sizeof *p);
    p->cap = 7 * lm->cfg.layers;
    p->lin = calloc((size_t)p->cap, sizeof *p->lin);
    p->a = calloc((size_t)p->cap, sizeof *p->a);
    p->b = calloc((size_t)p->cap, sizeof *p->b);
    if (!p->lin || !p->a || !p->b) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory");
    return lm_for_each_linear(lm, collect, p);
}

static void pending_free(pending *p)
{
    for (int64_t i = 0; i < p->n; i++) { gpucore_tensor_destroy(p->a[i]); gpucore_tensor_destroy(p->b[i]); }
    free(p->lin); free(p->a); free(p->b);
}

static void drop_adapter(lm_linear *l)
{
    lm_destroy_tensor(&l->la); lm_destroy_tensor(&l->lb);
    lm_destroy_tensor(&l->dla); lm_destroy_tensor(&l->dlb);
}

static gpucore_status copy_targets(gpucore_lm *lm, const char *const *t, int64_t n)
{
    char **c = calloc((size_t)(n ? n : 1), sizeof *c);
    if (!c) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory");
    for (int64_t i = 0; i < n; i++)
        if (!(c[i] = lm_strdupf("%s", t[i]))) {
            for (int64_t k = 0; k < i; k++) free(c[k]);
            free(c);
            return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory");
        }
    for (int64_t i = 0; i < lm->n_lora_targets; i++) free(lm->lora_targets[i]);
    free(lm->lora_targets);
    lm->lora_targets = c;
    lm->n_lora_targets = n;
    return GPUCORE_OK;
}

/* Replace every adapter by the pending ones (gradients allocated first). */
static gpucore_status install(gpucore_lm *lm, pending *p, int64_t r, double alpha, double dropout,
                              const char *const *targets, int64_t nt)
{
    gpucore_tensor **ga = calloc((size_t)(p->n ? p->n : 1), sizeof *ga), **gb = calloc((size_t)(p->n ? p->n : 1), sizeof *gb);
    gpucore_status st = ga && gb ? GPUCORE_OK : gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "model: out of host memory");
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_GRADIENTS);
    for (int64_t i = 0; i < p->n && !st; i++) {
        if (!p->a[i]) continue;
        gpucore_memory_tag_tensor(p->a[i], GPUCORE_MEM_WEIGHTS); /* the adapters, made or read by the caller */
        gpucore_memory_tag_tensor(p->b[i], GPUCORE_MEM_WEIGHTS);
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, p->a[i]->shape, &ga[i]);
        if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, p->b[i]->shape, &gb[i]);
        if (!st) st = gpucore_fill(ga[i], 0.0, NULL);
        if (!st) st = gpucore_fill(gb[i], 0.0, NULL);
    }
    caching_allocator_tag_set(tag);
    if (!st) st = copy_targets(lm, targets, nt);
    if (!st && lm->full_ft) st = gpucore_lm_set_full_finetune(lm, 0);
    if (st) {
        for (int64_t i = 0; ga && gb && i < p->n; i++) { gpucore_tensor_destroy(ga[i]); gpucore_tensor_destroy(gb[i]); }
        free(ga); free(gb);
        return st;
    }
    int64_t count = 0;
    for (int64_t i = 0; i < p->n; i++) {
        lm_linear *l = p->lin[i];
        drop_adapter(l);
        if (!p->a[i]) continue;
        l->la = p->a[i]; l->lb = p->b[i]; l->dla = ga[i]; l->dlb = gb[i];
        p->a[i] = p->b[i] = NULL;
        count++;
    }
    free(ga); free(gb);
    lm->lora_r = r;
    lm->lora_alpha = alpha;
    lm->lora_dropout = dropout;
    lm->lora_count = count;
    return lm_rebuild_trainable(lm);
}

/* The distinct leaf names of the architecture's linears ("q_proj, k_proj, ..."), for messages. */
static const char *leaf_list(const gpucore_lm *lm, char *buf, size_t len)
{
    const lm_arch *a = lm->cfg.def;
    const char *names[7];
    int n = 0;
    for (int k = 0; k < lm_arch_n_attn(a); k++) names[n++] = a->attn[k];
    for (int k = 0; k < lm_arch_n_mlp(a); k++) names[n++] = a->mlp_names[k];
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < n && used < len; k++) {
        const char *leaf = strrchr(names[k], '.') ? strrchr(names[k], '.') + 1 : names[k];
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) {
            const char *other = strrchr(names[j], '.') ? strrchr(names[j], '.') + 1 : names[j];
            seen = !strcmp(leaf, other);
        }
        if (!seen) used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", leaf);
    }
    return buf;
}

static gpucore_status check_hyper(int64_t r, double alpha, double dropout, const char *op)
{
    if (r < 1 || r > 65536 || !isfinite(alpha) || !(dropout >= 0 && dropout < 1))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: r (%lld) must be >= 1, lora_alpha finite and "
                                 "lora_dropout in [0, 1) (got %g, %g)", op, (long long)r, alpha, dropout);
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_add_lora(gpucore_lm *lm, int64_t r, double lora_alpha, double lora_dropout,
                                   const char *const *target_modules, int64_t count, uint64_t seed)
{
    const char *op = "gpucore_lm_add_lora";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if ((st = check_hyper(r, lora_alpha, lora_dropout, op))) return st;
    if (!target_modules || count < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: give at least one target module name", op);
    pending p;
    char leaves[200];
    if ((st = pending_init(lm, &p))) { pending_free(&p); return st; }
    for (int64_t t = 0; t < count && !st; t++) {
        int hit = 0;
        if (!target_modules[t]) { st = gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: target_modules[%lld] is NULL", op, (long long)t); break; }
        for (int64_t i = 0; i < p.n; i++) hit |= matches(p.lin[i], target_modules[t]);
        if (!hit)
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: target module '%s' matches no linear layer of this "
                                   "%s model (%s)", op, target_modules[t], gpucore_lm_arch_name(lm),
                                   leaf_list(lm, leaves, sizeof leaves));
    }
    uint64_t offset = 0;
    for (int64_t i = 0; i < p.n && !st; i++) {
        lm_linear *l = p.lin[i];
        int hit = 0;
        for (int64_t t = 0; t < count; t++) hit |= matches(l, target_modules[t]);
        if (!hit) continue;
        int64_t sa[2] = {r, l->in}, sb[2] = {l->out, r};
        double bound = 1.0 / sqrt((double)l->in);
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, sa, &p.a[i]);
        if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, sb, &p.b[i]);
        if (!st) st = gpucore_random(p.a[i], GPUCORE_UNIFORM, -bound, bound, seed, offset, NULL);
        if (!st) st = gpucore_fill(p.b[i], 0.0, NULL);
        offset += gpucore_random_offset_advance(r * l->in, GPUCORE_UNIFORM);
    }
    if (!st) st = install(lm, &p, r, lora_alpha, lora_dropout, target_modules, count);
    pending_free(&p);
    return st;
}

int64_t gpucore_lm_lora_count(const gpucore_lm *lm)
{
    if (!lm || lm->magic != LM_MAGIC) return -1;
    return lm->lora_count;
}

gpucore_status gpucore_lm_merge_adapter(gpucore_lm *lm)
{
    const char *op = "gpucore_lm_merge_adapter";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!lm->lora_count) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the model has no adapters", op);
    pending p;
    if ((st = pending_init(lm, &p))) { pending_free(&p); return st; }
    double scale = lm->lora_alpha / (double)lm->lora_r;
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_WEIGHTS);
    for (int64_t i = 0; i < p.n && !st; i++)
        if (p.lin[i]->la) {
            st = lm_dequantize_linear(lm, p.lin[i]); /* a quantized base merges into its dequantized values */
            if (!st) st = gpucore_lora_merge(p.lin[i]->w, p.lin[i]->la, p.lin[i]->lb, scale, NULL);
        }
    caching_allocator_tag_set(tag);
    if (!st) lm_quant_finish(lm);
    if (!st) {
        for (int64_t i = 0; i < p.n; i++) drop_adapter(p.lin[i]);
        lm->lora_count = 0;
        st = lm_rebuild_trainable(lm);
    }
    pending_free(&p);
    return st;
}

/* ---- PEFT folders ---- */

#if GPUCORE_HAVE_CJSON
GPUCORE_HIDDEN gpucore_status lm_make_dir(const char *folder, const char *op)
{
    if (mkdir(folder, 0777) != 0 && errno != EEXIST)
        return gpucore_set_error(GPUCORE_ERR_IO, "%s: cannot create folder '%s': %s", op, folder, strerror(errno));
    return GPUCORE_OK;
}

/* Write text atomically enough for a config file (temp + rename). */
GPUCORE_HIDDEN gpucore_status lm_write_text(const char *path, const char *text, const char *op)
{
    char *tmp = lm_strdupf("%s.tmp", path);
    if (!tmp) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    FILE *f = fopen(tmp, "wb");
    gpucore_status st = GPUCORE_OK;
    if (!f) st = gpucore_set_error(GPUCORE_ERR_IO, "%s: cannot write '%s': %s", op, tmp, strerror(errno));
    else {
        size_t n = strlen(text);
        int bad = fwrite(text, 1, n, f) != n;
        bad |= fclose(f) != 0;
        if (bad) st = gpucore_set_error(GPUCORE_ERR_IO, "%s: writing '%s' failed", op, tmp);
        else if (rename(tmp, path) != 0) st = gpucore_set_error(GPUCORE_ERR_IO, "%s: cannot rename '%s': %s", op, tmp, strerror(errno));
        if (st) remove(tmp);
    }
    free(tmp);
    return st;
}

static int json_true(const cJSON *root, const char *k)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, k));
}

static int json_nonempty(const cJSON *root, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) return cJSON_GetArraySize(v) > 0;
    return 1;
}

/* The module a PEFT key names, and whether it is A (0) or B (1); NULL when the key is not an adapter key. */
static lm_linear *key_module(pending *p, const char *key, int *which)
{
    static const char *pre = "base_model.model.";
    static const char *suf[4] = {".lora_A.weight", ".lora_A.default.weight", ".lora_B.weight", ".lora_B.default.weight"};
    size_t pl = strlen(pre), kl = strlen(key);
    if (strncmp(key, pre, pl)) return NULL;
    for (int s = 0; s < 4; s++) {
        size_t sl = strlen(suf[s]);
        if (kl <= pl + sl || strcmp(key + kl - sl, suf[s])) continue;
        size_t ml = kl - pl - sl;
        for (int64_t i = 0; i < p->n; i++)
            if (strlen(p->lin[i]->module) == ml && !strncmp(p->lin[i]->module, key + pl, ml)) {
                *which = s / 2;
                return p->lin[i];
            }
    }
    return NULL;
}

typedef struct adapter_cfg {
    int64_t r;
    double alpha, dropout;
    char **targets;
    int64_t n_targets;
} adapter_cfg;

static void adapter_cfg_free(adapter_cfg *a)
{
    for (int64_t i = 0; i < a->n_targets; i++) free(a->targets[i]);
    free(a->targets);
}

static gpucore_status read_adapter_config(gpucore_lm *lm, const char *path, adapter_cfg *a, const char *op)
{
    memset(a, 0, sizeof *a);
    char *text = NULL;
    void *jv = NULL;
    gpucore_status st = gpucore_io_read_json(path, &text, &jv, op);
    if (st) return st;
    free(text);
    cJSON *root = jv;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "r");
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(root, "lora_dropout");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    const char *refused = NULL;
    if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA")) refused = "peft_type (only \"LORA\")";
    else if (json_true(root, "use_rslora")) refused = "use_rslora";
    else if (json_true(root, "use_dora")) refused = "use_dora";
    else if (json_nonempty(root, "rank_pattern")) refused = "rank_pattern";
    else if (json_nonempty(root, "alpha_pattern")) refused = "alpha_pattern";
    else if (json_nonempty(root, "modules_to_save")) refused = "modules_to_save";
    else if (json_nonempty(root, "layers_to_transform")) refused = "layers_to_transform";
    else if (json_nonempty(root, "layer_replication")) refused = "layer_replication";
    else if (bias && !cJSON_IsNull(bias) && (!cJSON_IsString(bias) || strcmp(bias->valuestring, "none")))
        refused = "bias (only \"none\")";
    else if (json_true(root, "fan_in_fan_out") && !lm->cfg.def->conv1d)
        refused = "fan_in_fan_out (this architecture's weights are not Conv1D)";
    else if (tm && cJSON_IsString(tm)) refused = "target_modules as a regular expression (give a list)";
    if (refused) {
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: '%s': field %s is not supported", op, path, refused);
    } else if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble != floor(r->valuedouble) ||
               !cJSON_IsNumber(al) || !cJSON_IsArray(tm) || (dr && !cJSON_IsNull(dr) && !cJSON_IsNumber(dr))) {
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' needs r (an integer >= 1), lora_alpha (a number), "
                               "lora_dropout (a number) and target_modules (a list of names)", op, path);
    } else {
        a->r = (int64_t)r->valuedouble;
        a->alpha = al->valuedouble;
        a->dropout = dr && cJSON_IsNumber(dr) ? dr->valuedouble : 0.0;
        int64_t n = cJSON_GetArraySize(tm);
        a->targets = calloc((size_t)(n ? n : 1), sizeof *a->targets);
        if (!a->targets) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        const cJSON *e;
        cJSON_ArrayForEach(e, tm) {
            if (st) break;
            if (!cJSON_IsString(e)) { st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s': target_modules holds a non-string", op, path); break; }
            if (!(a->targets[a->n_targets] = lm_strdupf("%s", e->valuestring)))
                st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
            else a->n_targets++;
        }
        if (!st) st = check_hyper(a->r, a->alpha, a->dropout, op);
    }
    cJSON_Delete(root);
    if (st) adapter_cfg_free(a);
    return st;
}

static gpucore_status load_pairs(gpucore_lm *lm, pending *p, const adapter_cfg *a, const char *path, const char *op)
{
    gpucore_safetensors *f = NULL;
    gpucore_status st = gpucore_safetensors_open(path, &f);
    if (st) return st;
    int64_t n = gpucore_safetensors_count(f);
    for (int64_t k = 0; k < n && !st; k++) {
        const char *key = gpucore_safetensors_name(f, k);
        int which = 0;
        lm_linear *l = key_module(p, key, &which);
        int64_t idx = -1;
        for (int64_t i = 0; l && i < p->n; i++) if (p->lin[i] == l) idx = i;
        int targeted = 0;
        for (int64_t t = 0; l && t < a->n_targets; t++) targeted |= matches(l, a->targets[t]);
        if (!l || !targeted) {
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' holds '%s', which is not the LoRA A/B weight of a "
                                   "module that adapter_config.json targets in this %s model (expected keys like "
                                   "'base_model.model.%s.lora_A.weight')", op, path, key, gpucore_lm_arch_name(lm),
                                   p->n ? p->lin[0]->module : "");
            break;
        }
        gpucore_tensor **slot = which ? &p->b[idx] : &p->a[idx];
        if (*slot) { st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' holds '%s' twice (with and without .default)", op, path, key); break; }
        gpucore_dtype dt;
        int nd;
        int64_t shp[GPUCORE_MAX_DIMS];
        int64_t w0 = which ? l->out : a->r, w1 = which ? a->r : l->in;
        if ((st = gpucore_safetensors_info(f, key, &dt, &nd, shp))) break;
        if (nd != 2 || shp[0] != w0 || shp[1] != w1) {
            st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s': '%s' is not [%lld, %lld] (r = %lld from "
                                   "adapter_config.json, the module is %lld -> %lld)", op, path, key, (long long)w0,
                                   (long long)w1, (long long)a->r, (long long)l->in, (long long)l->out);
            break;
        }
        if (dt != GPUCORE_F32 && dt != GPUCORE_BF16 && dt != GPUCORE_F16 && dt != GPUCORE_F64) {
            st = gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s': '%s' is %s, not a float dtype", op, path, key,
                                   gpucore_dtype_name(dt));
            break;
        }
        gpucore_tensor *t = NULL;
        if ((st = gpucore_safetensors_load_tensor(f, lm->ctx, key, &t))) break;
        if ((int)dt != lm->dtype) {
            st = lm_convert(t, lm->dtype, 0, slot);
            gpucore_tensor_destroy(t);
        } else {
            *slot = t;
        }
    }
    for (int64_t i = 0; i < p->n && !st; i++) {
        int targeted = 0;
        for (int64_t t = 0; t < a->n_targets; t++) targeted |= matches(p->lin[i], a->targets[t]);
        if (targeted && (!p->a[i] || !p->b[i]))
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' lacks 'base_model.model.%s.lora_%s.weight' "
                                   "(adapter_config.json targets that module)", op, path, p->lin[i]->module,
                                   p->a[i] ? "B" : "A");
    }
    gpucore_safetensors_close(f);
    return st;
}

gpucore_status gpucore_lm_load_adapter(gpucore_lm *lm, const char *folder)
{
    const char *op = "gpucore_lm_load_adapter";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!folder) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: folder is NULL", op);
    char *cpath = lm_strdupf("%s/adapter_config.json", folder), *wpath = lm_strdupf("%s/adapter_model.safetensors", folder);
    adapter_cfg a;
    memset(&a, 0, sizeof a);
    pending p;
    memset(&p, 0, sizeof p);
    if (!cpath || !wpath) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (!st) st = read_adapter_config(lm, cpath, &a, op);
    if (!st) st = pending_init(lm, &p);
    if (!st) st = load_pairs(lm, &p, &a, wpath, op);
    if (!st) st = install(lm, &p, a.r, a.alpha, a.dropout, (const char *const *)a.targets, a.n_targets);
    if (!st && lm->ckpt) { gpucore_ckpt_destroy(lm->ckpt); lm->ckpt = NULL; }
    pending_free(&p);
    adapter_cfg_free(&a);
    free(cpath); free(wpath);
    return st;
}

gpucore_status gpucore_lm_save_adapter(gpucore_lm *lm, const char *folder)
{
    const char *op = "gpucore_lm_save_adapter";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!folder) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: folder is NULL", op);
    if (!lm->lora_count) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the model has no adapters", op);
    if ((st = lm_make_dir(folder, op))) return st;
    cJSON *root = cJSON_CreateObject();
    cJSON *tm = cJSON_CreateArray();
    int bad = !root || !tm;
    for (int64_t i = 0; !bad && i < lm->n_lora_targets; i++) bad |= !cJSON_AddItemToArray(tm, cJSON_CreateString(lm->lora_targets[i]));
    if (!bad) {
        cJSON_AddItemToObject(root, "alpha_pattern", cJSON_CreateObject());
        cJSON_AddNullToObject(root, "auto_mapping");
        cJSON_AddStringToObject(root, "base_model_name_or_path", lm->folder);
        cJSON_AddStringToObject(root, "bias", "none");
        cJSON_AddBoolToObject(root, "fan_in_fan_out", lm->cfg.def->conv1d);
        cJSON_AddBoolToObject(root, "inference_mode", 1);
        cJSON_AddBoolToObject(root, "init_lora_weights", 1);
        cJSON_AddNullToObject(root, "layers_pattern");
        cJSON_AddNullToObject(root, "layers_to_transform");
        cJSON_AddNumberToObject(root, "lora_alpha", lm->lora_alpha);
        cJSON_AddNumberToObject(root, "lora_dropout", lm->lora_dropout);
        cJSON_AddNullToObject(root, "modules_to_save");
        cJSON_AddStringToObject(root, "peft_type", "LORA");
        cJSON_AddNumberToObject(root, "r", (double)lm->lora_r);
        cJSON_AddItemToObject(root, "rank_pattern", cJSON_CreateObject());
        cJSON_AddNullToObject(root, "revision");
        cJSON_AddItemToObject(root, "target_modules", tm);
        tm = NULL;
        cJSON_AddStringToObject(root, "task_type", "CAUSAL_LM");
        cJSON_AddBoolToObject(root, "use_dora", 0);
        cJSON_AddBoolToObject(root, "use_rslora", 0);
    }
    char *text = bad ? NULL : cJSON_Print(root);
    cJSON_Delete(tm);
    cJSON_Delete(root);
    if (!text) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    char *cpath = lm_strdupf("%s/adapter_config.json", folder), *wpath = lm_strdupf("%s/adapter_model.safetensors", folder);
    const char **names = calloc((size_t)lm->n_train, sizeof *names);
    gpucore_tensor **ts = calloc((size_t)lm->n_train, sizeof *ts);
    if (!cpath || !wpath || !names || !ts) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t i = 0; !st && i < lm->n_train; i++) { names[i] = lm->train[i].name; ts[i] = lm->train[i].param; }
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    if (!st) st = gpucore_safetensors_save(wpath, names, ts, lm->n_train, mk, mv, 1);
    if (!st) st = lm_write_text(cpath, text, op);
    cJSON_free(text);
    free(cpath); free(wpath); free(names); free(ts);
    return st;
}
#else
gpucore_status lm_make_dir(const char *folder, const char *op)
{
    (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: this build has no JSON library (cJSON)", op);
}
gpucore_status lm_write_text(const char *path, const char *text, const char *op)
{
    (void)path; (void)text;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: this build has no JSON library (cJSON)", op);
}
gpucore_status gpucore_lm_load_adapter(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_load_adapter: this build has no JSON library (cJSON)");
}
gpucore_status gpucore_lm_save_adapter(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_save_adapter: this build has no JSON library (cJSON)");
}
#endif
