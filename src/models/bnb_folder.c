/*
 * bnb_folder.c — bitsandbytes' 4-bit layout of a Hugging Face folder, as transformers saves a
 * model loaded with BitsAndBytesConfig(load_in_4bit=True): config.json's quantization_config,
 * and for each quantized linear layer <m>
 *   <m>.weight                                  u8 [ceil(n/2), 1]: the packed 4-bit indices
 *   <m>.weight.absmax                           f32 [ceil(n/block)]
 *   <m>.weight.quant_map                        f32 [16]: the code book
 *   <m>.weight.quant_state.bitsandbytes__nf4    u8: JSON {"quant_type", "blocksize", "dtype", "shape"}
 * (bitsandbytes' QuantState.as_dict(packed=True)). Our NF4/FP4 bytes are the same packed
 * indices (the earlier value in the high nibble, as bitsandbytes packs them) followed by the
 * absmax, so loading checks every tensor and places the two parts, and saving splits them.
 * With double quantization (bnb_4bit_use_double_quant) <m>.weight.absmax is u8 [nblocks], one
 * code per block, beside
 *   <m>.weight.nested_absmax                    f32 [ceil(nblocks/nested_blocksize)]
 *   <m>.weight.nested_quant_map                 f32 [256]: the 8-bit code book
 * and the JSON's nested_blocksize, nested_dtype ("float32") and nested_offset; the absmax is
 * rebuilt in f32 as bitsandbytes' dequantize_4bit does (nested_quant_map[code] *
 * nested_absmax[block / nested_blocksize], then + nested_offset) and held plain, so the weight's
 * values are bitsandbytes' bit for bit; such a model is saved without double quantization.
 * The 8-bit layout (load_in_8bit: LLM.int8's Int8Params, as Linear8bitLt saves it) is
 *   <m>.weight                                  I8 [out, in]: the int8 values
 *   <m>.SCB                                     f32 [out]: each row's absmax
 *   <m>.weight_format                           u8 scalar 0 ("row"; older files may lack it)
 * which is our INT8_ROW (the int8 bytes, zeros to a multiple of 4, the SCB), W = q * SCB / 127;
 * llm_int8_threshold's outlier split is bitsandbytes' way of computing, not part of the weight.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"
#include "bnb_folder.h"
#include "quant_formats.h"
#include "io/safetensors.h"

int lm_bnb_state_key(int fmt, const char *weight, const char *name)
{
    size_t n = strlen(weight);
    if (fmt == GPUCORE_QUANT_INT8_ROW) /* <m>.SCB beside <m>.weight, and <m>.weight_format */
        return (n > 7 && !strcmp(weight + n - 7, ".weight") && !strncmp(name, weight, n - 7) &&
                !strcmp(name + n - 7, ".SCB")) || (!strncmp(name, weight, n) && !strcmp(name + n, "_format"));
    if (strncmp(name, weight, n)) return 0;
    const char *s = name + n;
    return !strcmp(s, ".absmax") || !strcmp(s, ".quant_map") || !strcmp(s, ".quant_state.bitsandbytes__nf4") ||
           !strcmp(s, ".quant_state.bitsandbytes__fp4") || !strcmp(s, ".nested_absmax") ||
           !strcmp(s, ".nested_quant_map");
}

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>

static const char *const OP = "gpucore_lm_create";

static const char *q4_name(int fmt) { return fmt == GPUCORE_QUANT_FP4 ? "fp4" : "nf4"; }

static int json_true(const cJSON *o, const char *key)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

gpucore_status lm_bnb_read_config(const char *json, lm_bnb *b)
{
    memset(b, 0, sizeof *b);
    b->fmt = -1;
    b->compute_dtype = -1;
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    const cJSON *qc = root ? cJSON_GetObjectItemCaseSensitive(root, "quantization_config") : NULL;
    if (!qc || cJSON_IsNull(qc)) { cJSON_Delete(root); return GPUCORE_OK; }
    b->root = root;
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
    const char *m = cJSON_IsString(method) ? method->valuestring : NULL;
    gpucore_status st = GPUCORE_OK;
    if (!cJSON_IsObject(qc))
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: config.json's quantization_config is not an object", OP);
    else if (!m || strcmp(m, "bitsandbytes"))
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: config.json's quantization_config has quant_method "
                               "'%s'; only bitsandbytes' 4-bit layout (load_in_4bit) is read", OP, m ? m : "(none)");
    else if (json_true(qc, "load_in_8bit") && json_true(qc, "llm_int8_has_fp16_weight"))
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: a bitsandbytes load_in_8bit folder with "
                               "llm_int8_has_fp16_weight (16-bit weights kept for training) is not read", OP);
    else if (!json_true(qc, "load_in_4bit") && !json_true(qc, "load_in_8bit"))
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: config.json's bitsandbytes quantization_config sets "
                               "neither load_in_4bit nor load_in_8bit", OP);
    if (st) { lm_bnb_free(b); return st; }
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_quant_type");
    const char *t = cJSON_IsString(qt) ? qt->valuestring : "fp4"; /* BitsAndBytesConfig's default */
    b->fmt = json_true(qc, "load_in_8bit") ? GPUCORE_QUANT_INT8_ROW
             : !strcmp(t, "nf4") ? GPUCORE_QUANT_NF4 : !strcmp(t, "fp4") ? GPUCORE_QUANT_FP4 : -1;
    const cJSON *storage = cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_quant_storage");
    const cJSON *cd = cJSON_GetObjectItemCaseSensitive(qc, "bnb_4bit_compute_dtype");
    b->compute_dtype = cJSON_IsString(cd) ? lm_dtype_from_torch(cd->valuestring) : GPUCORE_F32; /* transformers' default */
    const cJSON *skip = cJSON_GetObjectItemCaseSensitive(qc, "llm_int8_skip_modules");
    if (b->fmt < 0)
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: bnb_4bit_quant_type '%s': nf4 or fp4", OP, t);
    else if (b->fmt != GPUCORE_QUANT_INT8_ROW && storage && !cJSON_IsNull(storage) && !(cJSON_IsString(storage) && !strcmp(storage->valuestring, "uint8")))
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: bnb_4bit_quant_storage other than uint8 is not read",
                               OP);
    else if (b->compute_dtype < 0)
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: bnb_4bit_compute_dtype '%s': float32, bfloat16 or "
                               "float16", OP, cJSON_IsString(cd) ? cd->valuestring : "?");
    else if (skip && !cJSON_IsNull(skip) && !cJSON_IsArray(skip))
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: llm_int8_skip_modules is not a list", OP);
    else if (skip && cJSON_IsArray(skip)) b->skip = skip;
    if (st) lm_bnb_free(b);
    return st;
}

void lm_bnb_free(lm_bnb *b)
{
    cJSON_Delete(b->root);
    b->root = NULL;
    b->skip = NULL;
}

int lm_bnb_skipped(const lm_bnb *b, const char *module)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, (const cJSON *)b->skip) /* transformers: the name holds the entry */
        if (cJSON_IsString(e) && strstr(module, e->valuestring)) return 1;
    return 0;
}

/* Tensor `name` (dtype dt, shape want[nd]) read into host memory (n bytes at dst). */
static gpucore_status read_exact(gpucore_lm *lm, lm_bnb_find find, void *user, const char *name, gpucore_dtype dt,
                                 int nd, const int64_t *want, void *dst, int64_t n)
{
    const char *file = NULL;
    gpucore_safetensors *h = find(user, name, &file);
    if (!h)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: tensor '%s' is missing from '%s' (bitsandbytes' "
                                 "4-bit layout needs it)", OP, name, lm->folder);
    gpucore_dtype fdt;
    int fnd;
    int64_t shp[GPUCORE_MAX_DIMS];
    gpucore_status st = gpucore_safetensors_info(h, name, &fdt, &fnd, shp);
    if (st) return st;
    int same = fdt == dt && fnd == nd;
    for (int i = 0; same && i < nd; i++) same = shp[i] == want[i];
    if (!same) {
        char got[96], exp[96];
        gpucore_shape_str(fnd, shp, got, sizeof got);
        gpucore_shape_str(nd, want, exp, sizeof exp);
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: tensor '%s' in '%s' is %s %s; bitsandbytes' layout "
                                 "of this layer is %s %s", OP, name, file, gpucore_dtype_name(fdt), got,
                                 gpucore_dtype_name(dt), exp);
    }
    gpucore_context *hc = lm->quant_host ? lm->quant_host : lm->ctx;
    gpucore_tensor *t = NULL;
    st = gpucore_safetensors_load_tensor(h, hc, name, &t);
    if (!st) st = gpucore_copy_to_host(dst, n, t);
    gpucore_tensor_destroy(t);
    return st;
}

/* Double quantization's fields of a quant_state (block 0: none). */
typedef struct lm_bnb_nested {
    int64_t block; /* nested_blocksize */
    float offset;  /* nested_offset, rounded to f32 as bitsandbytes' torch.tensor(float(...)) does */
} lm_bnb_nested;

/* quant_state's nested_* fields: all three or none; nested_dtype float32 (the absmax's dtype). */
static gpucore_status nested_state(const cJSON *qs, const char *key, lm_bnb_nested *nest)
{
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(qs, "nested_blocksize");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(qs, "nested_dtype");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(qs, "nested_offset");
    memset(nest, 0, sizeof *nest);
    if (!bs && !dt && !off) return GPUCORE_OK;
    if (!cJSON_IsNumber(bs) || !cJSON_IsNumber(off) || !cJSON_IsString(dt))
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' has some of nested_blocksize, nested_dtype and "
                                 "nested_offset (double quantization) but not all three as numbers and a string", OP,
                                 key);
    if (bs->valuedouble < 1 || bs->valuedouble > 65536 || (double)(int64_t)bs->valuedouble != bs->valuedouble)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' gives nested_blocksize %g: a positive whole "
                                 "number (bitsandbytes writes 256)", OP, key, bs->valuedouble);
    if (strcmp(dt->valuestring, "float32"))
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: '%s' gives nested_dtype '%s': only float32 (the "
                                 "absmax's dtype, as bitsandbytes writes it) is read", OP, key, dt->valuestring);
    nest->block = (int64_t)bs->valuedouble;
    nest->offset = (float)off->valuedouble;
    if (!isfinite(nest->offset))
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' gives nested_offset %g: not a finite f32", OP,
                                 key, off->valuedouble);
    return GPUCORE_OK;
}

/* The nb f32 absmax of a double-quantized weight into absmax: its u8 codes (aname), the f32 scale
 * of every nest->block codes and the 256-entry code book, as bitsandbytes' dequantize_4bit
 * rebuilds them: code[q] * scale in f32, then + offset in f32. */
static gpucore_status read_nested(gpucore_lm *lm, lm_bnb_find find, void *user, const char *wname, const char *aname,
                                  const lm_bnb_nested *nest, int64_t nb, float *absmax)
{
    int64_t nn = (nb + nest->block - 1) / nest->block, book = 256;
    char *sname = lm_strdupf("%s.nested_absmax", wname), *mname = lm_strdupf("%s.nested_quant_map", wname);
    unsigned char *codes = malloc((size_t)(nb ? nb : 1));
    float *scale = malloc((size_t)(nn ? nn : 1) * sizeof *scale), map[256];
    gpucore_status st = GPUCORE_OK;
    if (!sname || !mname || !codes || !scale)
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    if (!st) st = read_exact(lm, find, user, aname, GPUCORE_U8, 1, &nb, codes, nb);
    if (!st) st = read_exact(lm, find, user, sname, GPUCORE_F32, 1, &nn, scale, 4 * nn);
    if (!st) st = read_exact(lm, find, user, mname, GPUCORE_F32, 1, &book, map, sizeof map);
    for (int64_t i = 0; i < nb && !st; i++) {
        float v = GPUCORE_QMUL(map[codes[i]], scale[i / nest->block]);
        absmax[i] = v + nest->offset;
    }
    free(sname); free(mname); free(codes); free(scale);
    return st;
}

/* The model holds the rebuilt absmax plain: config.json's bnb_4bit_use_double_quant becomes false
 * so that save_pretrained describes what it writes. */
static gpucore_status clear_double_quant(gpucore_lm *lm)
{
    const char *k = "\"bnb_4bit_use_double_quant\"";
    char *at = lm->cfg.json ? strstr(lm->cfg.json, k) : NULL;
    if (!at) return GPUCORE_OK;
    char *v = at + strlen(k);
    while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r' || *v == ':') v++;
    if (strncmp(v, "true", 4)) return GPUCORE_OK;
    char *text = lm_strdupf("%.*sfalse%s", (int)(v - lm->cfg.json), lm->cfg.json, v + 4);
    if (!text) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    free(lm->cfg.json);
    lm->cfg.json = text;
    return GPUCORE_OK;
}

/* The packed indices' bytes and the absmax's offset in our format's bytes. */
static void split_sizes(const lm_linear *l, int64_t block, int64_t *packed, int64_t *absmax_off, int64_t *nblocks)
{
    int64_t n = l->out * l->in;
    *packed = (n + 1) / 2;
    *absmax_off = (*packed + 3) / 4 * 4;
    *nblocks = (n + block - 1) / block;
}

/* l's INT8_ROW weight from the 8-bit layout: <m>.weight I8 [out, in], <m>.SCB f32 [out] and, when
 * present, <m>.weight_format u8 scalar 0 (row-major, the only one bitsandbytes still reads). */
static gpucore_status load_int8(gpucore_lm *lm, lm_linear *l, lm_bnb_find find, void *user)
{
    char *wname = lm_strdupf("%s.weight", l->module), *sname = lm_strdupf("%s.SCB", l->module);
    char *fname = lm_strdupf("%s.weight_format", l->module);
    int64_t n = l->out * l->in, off = (n + 3) / 4 * 4, total = 0, shp[GPUCORE_MAX_DIMS];
    gpucore_status st = !wname || !sname || !fname ? gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host "
                                                                       "memory", OP)
                        : gpucore_quant_size(GPUCORE_QUANT_INT8_ROW, l->out, l->in, 0, 0, &total);
    unsigned char *bytes = st ? NULL : calloc((size_t)(total ? total : 1), 1);
    if (!st && !bytes) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    const char *file = NULL;
    gpucore_safetensors *h = st ? NULL : find(user, wname, &file);
    int nd = 0;
    if (!st && !h)
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: tensor '%s' is missing from '%s' (bitsandbytes' "
                               "8-bit layout needs it)", OP, wname, lm->folder);
    if (!st && gpucore_st_read_i8(h, wname, &nd, shp, NULL, 0)) {
        gpucore_dtype dt = GPUCORE_U8;
        gpucore_safetensors_info(h, wname, &dt, &nd, shp);
        st = gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: tensor '%s' in '%s' is %s; bitsandbytes' 8-bit layout "
                               "holds int8 (I8) weights", OP, wname, file, gpucore_dtype_name(dt));
    }
    if (!st && (nd != 2 || shp[0] != l->out || shp[1] != l->in)) {
        char got[96];
        gpucore_shape_str(nd, shp, got, sizeof got);
        st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: tensor '%s' in '%s' is I8 %s; this layer is [%lld, "
                               "%lld]", OP, wname, file, got, (long long)l->out, (long long)l->in);
    }
    if (!st) st = gpucore_st_read_i8(h, wname, &nd, shp, bytes, n);
    if (!st) st = read_exact(lm, find, user, sname, GPUCORE_F32, 1, &l->out, bytes + off, 4 * l->out);
    unsigned char format = 0;
    if (!st && find(user, fname, &file)) st = read_exact(lm, find, user, fname, GPUCORE_U8, 0, NULL, &format, 1);
    if (!st && format != 0)
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: '%s' is %d: only weight format 0 (row) is read, as "
                               "bitsandbytes does", OP, fname, format);
    if (!st) st = lm_adopt_quantized(lm, l, GPUCORE_QUANT_INT8_ROW, 0, bytes, total);
    free(bytes); free(wname); free(sname); free(fname);
    return st;
}

gpucore_status lm_bnb_load_linear(gpucore_lm *lm, const lm_bnb *b, lm_linear *l, lm_bnb_find find, void *user)
{
    if (b->fmt == GPUCORE_QUANT_INT8_ROW) return load_int8(lm, l, find, user);
    char *wname = lm_strdupf("%s.weight", l->module);
    char *key = wname ? lm_strdupf("%s.quant_state.bitsandbytes__%s", wname, q4_name(b->fmt)) : NULL;
    if (!key) { free(wname); return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP); }
    const char *file = NULL;
    gpucore_status st = GPUCORE_OK;
    /* the quant_state JSON: quant_type, blocksize, dtype and shape must be this layer's */
    gpucore_safetensors *h = find(user, key, &file);
    gpucore_dtype dt;
    int nd;
    int64_t shp[GPUCORE_MAX_DIMS];
    if (!st && !h)
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: tensor '%s' is missing from '%s' (config.json's "
                               "quantization_config says %s)", OP, key, lm->folder, q4_name(b->fmt));
    if (!st) st = gpucore_safetensors_info(h, key, &dt, &nd, shp);
    if (!st && (dt != GPUCORE_U8 || nd != 1 || shp[0] > 4096))
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' in '%s' is not a u8 vector of JSON text", OP, key,
                               file);
    char *text = st ? NULL : calloc((size_t)shp[0] + 1, 1);
    if (!st && !text) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    if (!st) st = read_exact(lm, find, user, key, GPUCORE_U8, 1, shp, text, shp[0]);
    cJSON *qs = st ? NULL : cJSON_Parse(text);
    free(text);
    int64_t block = 0;
    lm_bnb_nested nest = {0};
    if (!st) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(qs, "quant_type");
        const cJSON *bs = cJSON_GetObjectItemCaseSensitive(qs, "blocksize");
        const cJSON *dty = cJSON_GetObjectItemCaseSensitive(qs, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(qs, "shape");
        int64_t probe;
        if (!qs)
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' in '%s' is not JSON", OP, key, file);
        else if ((st = nested_state(qs, key, &nest)))
            ;
        else if (!cJSON_IsString(type) || strcmp(type->valuestring, q4_name(b->fmt)))
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' gives quant_type '%s', not config.json's %s",
                                   OP, key, cJSON_IsString(type) ? type->valuestring : "?", q4_name(b->fmt));
        else if (!cJSON_IsNumber(bs) || (double)(block = (int64_t)bs->valuedouble) != bs->valuedouble ||
                 gpucore_quant_size((gpucore_quant_format)b->fmt, 1, 64, block, 0, &probe))
            st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: '%s' gives blocksize %g: a power of two from 32 "
                                   "to 4096 is read", OP, key, cJSON_IsNumber(bs) ? bs->valuedouble : -1.0);
        else if (!cJSON_IsString(dty) || lm_dtype_from_torch(dty->valuestring) < 0)
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' gives dtype '%s': float32, bfloat16 or "
                                   "float16", OP, key, cJSON_IsString(dty) ? dty->valuestring : "?");
        else if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 2 ||
                 cJSON_GetArrayItem(shape, 0)->valuedouble != (double)l->out ||
                 cJSON_GetArrayItem(shape, 1)->valuedouble != (double)l->in)
            st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' gives a shape other than config.json's "
                                   "[%lld, %lld]", OP, key, (long long)l->out, (long long)l->in);
    }
    cJSON_Delete(qs);
    char *stray = st || nest.block ? NULL : lm_strdupf("%s.nested_absmax", wname);
    if (stray && find(user, stray, &file))
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' holds '%s', but '%s' has no nested_blocksize, "
                               "nested_dtype and nested_offset (double quantization's fields)", OP, file, stray, key);
    free(stray);
    if (!st && nest.block) st = clear_double_quant(lm);
    /* our bytes: the packed indices (<m>.weight), zeros to a multiple of 4, the absmax */
    int64_t packed = 0, off = 0, nb = 0, total = 0;
    if (!st) {
        split_sizes(l, block, &packed, &off, &nb);
        st = gpucore_quant_size((gpucore_quant_format)b->fmt, l->out, l->in, block, 0, &total);
        if (!st && total != off + 4 * nb)
            st = gpucore_set_error(GPUCORE_ERR_INTERNAL, "%s: the NF4/FP4 size rule and bnb_folder.c disagree", OP);
    }
    unsigned char *bytes = st ? NULL : calloc((size_t)total, 1);
    float map[16];
    if (!st && !bytes) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    int64_t wshape[2] = {packed, 1}, one = 16;
    if (!st) st = read_exact(lm, find, user, wname, GPUCORE_U8, 2, wshape, bytes, packed);
    char *aname = st ? NULL : lm_strdupf("%s.absmax", wname), *mname = st ? NULL : lm_strdupf("%s.quant_map", wname);
    if (!st && (!aname || !mname)) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    if (!st && nest.block) st = read_nested(lm, find, user, wname, aname, &nest, nb, (float *)(bytes + off));
    else if (!st) st = read_exact(lm, find, user, aname, GPUCORE_F32, 1, &nb, bytes + off, 4 * nb);
    if (!st) st = read_exact(lm, find, user, mname, GPUCORE_F32, 1, &one, map, sizeof map);
    for (int k = 0; k < 16 && !st; k++)
        if (map[k] != gpucore_q4_code(b->fmt, k))
            st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: '%s' entry %d is %.9g, not bitsandbytes' %s code "
                                   "book's %.9g (another code book is not implemented)", OP, mname, k, map[k],
                                   q4_name(b->fmt), gpucore_q4_code(b->fmt, k));
    if (!st) st = lm_adopt_quantized(lm, l, b->fmt, block, bytes, total);
    free(bytes); free(aname); free(mname); free(wname); free(key);
    return st;
}

/* ---- writing ---- */

static gpucore_status host_tensor(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape,
                                  const void *src, int64_t n, gpucore_tensor **out)
{
    gpucore_status st = gpucore_tensor_create(ctx, dt, nd, shape, out);
    if (!st) st = gpucore_copy_from_host(*out, src, n);
    if (st) lm_destroy_tensor(out);
    return st;
}

/* l's INT8_ROW weight as Linear8bitLt saves it: <m>.weight (our int8 bytes, written as I8),
 * <m>.SCB, <m>.weight_format 0. */
static gpucore_status save_int8(const lm_linear *l, gpucore_context *hc, char **names, gpucore_tensor **ts,
                                const char **i8, int *count)
{
    int64_t total = gpucore_tensor_nbytes(l->wq), n = l->out * l->in, off = (n + 3) / 4 * 4;
    unsigned char *bytes = malloc((size_t)(total ? total : 1)), zero = 0;
    names[0] = lm_strdupf("%s.weight", l->module);
    names[1] = lm_strdupf("%s.SCB", l->module);
    names[2] = lm_strdupf("%s.weight_format", l->module);
    *count = 3;
    i8[0] = "I8";
    gpucore_status st = GPUCORE_OK;
    if (!bytes || !names[0] || !names[1] || !names[2])
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_save_pretrained: out of host memory");
    if (!st) st = gpucore_copy_to_host(bytes, total, l->wq);
    int64_t wshape[2] = {l->out, l->in};
    if (!st) st = host_tensor(hc, GPUCORE_U8, 2, wshape, bytes, n, &ts[0]);
    if (!st) st = host_tensor(hc, GPUCORE_F32, 1, &l->out, bytes + off, 4 * l->out, &ts[1]);
    if (!st) st = host_tensor(hc, GPUCORE_U8, 0, NULL, &zero, 1, &ts[2]);
    free(bytes);
    return st;
}

gpucore_status lm_bnb_save_linear(gpucore_lm *lm, const lm_linear *l, gpucore_context *hc, char **names,
                                  gpucore_tensor **ts, const char **i8, int *count)
{
    const char *op = "gpucore_lm_save_pretrained";
    int fmt = l->q.format;
    if (fmt == GPUCORE_QUANT_INT8_ROW) return save_int8(l, hc, names, ts, i8, count);
    *count = 4;
    int64_t block = l->q.block_size ? l->q.block_size : 64, packed, off, nb;
    split_sizes(l, block, &packed, &off, &nb);
    int64_t total = gpucore_tensor_nbytes(l->wq);
    unsigned char *bytes = malloc((size_t)total);
    char *json = lm_strdupf("{\"quant_type\": \"%s\", \"blocksize\": %lld, \"dtype\": \"%s\", \"shape\": [%lld, %lld]}",
                            q4_name(fmt), (long long)block, lm_torch_dtype(lm->dtype), (long long)l->out,
                            (long long)l->in);
    names[0] = lm_strdupf("%s.weight", l->module);
    names[1] = lm_strdupf("%s.weight.absmax", l->module);
    names[2] = lm_strdupf("%s.weight.quant_map", l->module);
    names[3] = lm_strdupf("%s.weight.quant_state.bitsandbytes__%s", l->module, q4_name(fmt));
    gpucore_status st = GPUCORE_OK;
    if (!bytes || !json || !names[0] || !names[1] || !names[2] || !names[3])
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (!st) st = gpucore_copy_to_host(bytes, total, l->wq);
    float map[16];
    for (int k = 0; k < 16; k++) map[k] = gpucore_q4_code(fmt, k) + 0.0f; /* bitsandbytes' FP4 book has +0 at 8 */
    int64_t wshape[2] = {packed, 1}, sixteen = 16, jlen = json ? (int64_t)strlen(json) : 0;
    if (!st) st = host_tensor(hc, GPUCORE_U8, 2, wshape, bytes, packed, &ts[0]);
    if (!st) st = host_tensor(hc, GPUCORE_F32, 1, &nb, bytes + off, 4 * nb, &ts[1]);
    if (!st) st = host_tensor(hc, GPUCORE_F32, 1, &sixteen, map, sizeof map, &ts[2]);
    if (!st) st = host_tensor(hc, GPUCORE_U8, 1, &jlen, json, jlen, &ts[3]);
    free(bytes);
    free(json);
    return st;
}

char *lm_bnb_config_text(const char *json, int fmt, int dtype)
{
    const char *brace = strchr(json, '{');
    if (!brace) return NULL;
    /* BitsAndBytesConfig.to_dict() as transformers writes it for load_in_4bit or load_in_8bit (then
     * bnb_4bit_compute_dtype, which transformers ignores, keeps our compute dtype for a reload) */
    const char *dt = lm_torch_dtype(dtype), *t4 = fmt == GPUCORE_QUANT_INT8_ROW ? "false" : "true";
    const char *t8 = fmt == GPUCORE_QUANT_INT8_ROW ? "true" : "false";
    return lm_strdupf("%.*s\n  \"quantization_config\": {\n    \"_load_in_4bit\": %s,\n    \"_load_in_8bit\": %s,\n"
                      "    \"bnb_4bit_compute_dtype\": \"%s\",\n    \"bnb_4bit_quant_storage\": \"uint8\",\n"
                      "    \"bnb_4bit_quant_type\": \"%s\",\n    \"bnb_4bit_use_double_quant\": false,\n"
                      "    \"llm_int8_enable_fp32_cpu_offload\": false,\n    \"llm_int8_has_fp16_weight\": false,\n"
                      "    \"llm_int8_skip_modules\": null,\n    \"llm_int8_threshold\": 6.0,\n"
                      "    \"load_in_4bit\": %s,\n    \"load_in_8bit\": %s,\n"
                      "    \"quant_method\": \"bitsandbytes\"\n  },%s",
                      (int)(brace + 1 - json), json, t4, t8, dt, fmt == GPUCORE_QUANT_INT8_ROW ? "fp4" : q4_name(fmt), t4,
                      t8, brace + 1);
}
#endif
