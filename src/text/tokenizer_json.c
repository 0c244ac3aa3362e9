/*
 * tokenizer_json.c — gpucore_tokenizer_create_from_file: a Hugging Face tokenizer.json (model BPE,
 * its vocabulary, merges and added tokens; the normalizer, pre-tokenizer, post-processor and
 * decoder read into the steps tokenizer.c runs, anything else refused by name) and, beside it,
 * tokenizer_config.json's bos_token, eos_token and chat_template.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "text_internal.h"
#include "io/json_file.h"
#include "gpucore_config.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>

static const char OP[] = "gpucore_tokenizer_create_from_file";

typedef struct loader { gpucore_tokenizer *t; const char *path; uint8_t *in_model; } loader;

static const char *type_of(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "(no type)";
}

static int flag(const cJSON *o, const char *name, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static gpucore_status unsupported(const loader *L, const char *what, const char *name, const char *has)
{
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: %s: %s '%s' is not implemented (%s)", OP, L->path, what,
                             name, has);
}

static gpucore_status corrupt(const loader *L, const char *what)
{
    return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: %s: %s", OP, L->path, what);
}

static gpucore_status read_model(loader *L, const cJSON *model, const cJSON *added, const cJSON **merges)
{
    gpucore_tokenizer *t = L->t;
    if (!cJSON_IsObject(model)) return corrupt(L, "no \"model\" object");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "BPE")))
        return unsupported(L, "model type", type_of(model),
                           "byte-level BPE is; SentencePiece Unigram, WordPiece and WordLevel are not");
    if (flag(model, "byte_fallback", 0)) return unsupported(L, "BPE option", "byte_fallback", "byte-level BPE is");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble != 0.0)
        return unsupported(L, "BPE option", "dropout", "deterministic BPE is");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[k]);
        if (cJSON_IsString(v) && v->valuestring[0]) return unsupported(L, "BPE option", affixes[k], "byte-level BPE is");
    }
    t->ignore_merges = flag(model, "ignore_merges", 0);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(*merges)) return corrupt(L, "the model has no \"vocab\" object or \"merges\" array");
    if (added && !cJSON_IsArray(added)) return corrupt(L, "\"added_tokens\" is not an array");
    /* ids: the vocabulary's and the added tokens' */
    double max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX - 2 ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return corrupt(L, "a vocabulary id is not an integer in 0 .. 2^31-3");
        if (it->valuedouble > max_id) max_id = it->valuedouble;
    }
    int n_added = added ? cJSON_GetArraySize(added) : 0;
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX - 2 ||
            id->valuedouble != (double)(int32_t)id->valuedouble || !cJSON_IsString(content) || !content->valuestring[0])
            return corrupt(L, "an added token has no integer \"id\" in 0 .. 2^31-3 or no non-empty \"content\"");
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    if (max_id < 0) return corrupt(L, "the vocabulary is empty");
    t->n_vocab = (int32_t)max_id + 1;
    t->tok = calloc((size_t)t->n_vocab, sizeof *t->tok);
    t->tok_len = calloc((size_t)t->n_vocab, sizeof *t->tok_len);
    t->is_special = calloc((size_t)t->n_vocab, 1);
    L->in_model = calloc((size_t)t->n_vocab, 1);
    t->added = calloc((size_t)n_added + 1, sizeof *t->added);
    if (!t->tok || !t->tok_len || !t->is_special || !L->in_model || !t->added)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = (int32_t)it->valuedouble;
        if (t->tok[id])
            return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: %s: vocabulary id %d is given twice ('%s', '%s')",
                                     OP, L->path, (int)id, t->tok[id], it->string);
        if (!(t->tok[id] = strdup(it->string))) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
        t->tok_len[id] = (int32_t)strlen(it->string);
        L->in_model[id] = 1;
    }
    cJSON_ArrayForEach(it, added) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        if (!t->tok[id] || strcmp(t->tok[id], content)) { /* the added token's content is the id's token */
            free(t->tok[id]);
            if (!(t->tok[id] = strdup(content))) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
            t->tok_len[id] = (int32_t)strlen(content);
        }
        text_added *ad = &t->added[t->n_added++];
        *ad = (text_added){.id = id, .special = (uint8_t)flag(it, "special", 0), .lstrip = (uint8_t)flag(it, "lstrip", 0),
                           .rstrip = (uint8_t)flag(it, "rstrip", 0), .single_word = (uint8_t)flag(it, "single_word", 0),
                           .normalized = (uint8_t)flag(it, "normalized", !flag(it, "special", 0))};
        t->is_special[id] = ad->special;
    }
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    gpucore_status st = text_tokenizer_index(t, (size_t)cJSON_GetArraySize(*merges), L->in_model, OP);
    if (st) return st;
    if (cJSON_IsString(unk)) {
        t->unk_id = text_vocab_find(&t->vocab, t->tok, t->tok_len, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0) return corrupt(L, "the model's unk_token is not in the vocabulary");
    }
    return GPUCORE_OK;
}

static gpucore_status read_merges(loader *L, const cJSON *merges)
{
    int32_t rank = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, merges) {
        const char *l, *r;
        size_t ln, rn;
        if (cJSON_IsString(it)) { /* "left right" */
            const char *sp = strchr(it->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ')) return corrupt(L, "a merge is not \"left right\"");
            l = it->valuestring; ln = (size_t)(sp - l); r = sp + 1; rn = strlen(r);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) { /* ["left", "right"] */
            l = cJSON_GetArrayItem(it, 0)->valuestring; ln = strlen(l);
            r = cJSON_GetArrayItem(it, 1)->valuestring; rn = strlen(r);
        } else {
            return corrupt(L, "a merge is neither \"left right\" nor [\"left\", \"right\"]");
        }
        gpucore_status st = text_tokenizer_add_merge(L->t, l, ln, r, rn, rank++, OP);
        if (st) return st;
    }
    return GPUCORE_OK;
}

static gpucore_status add_step(loader *L, text_pre_kind kind)
{
    if (L->t->n_pre == TEXT_MAX_PRE) return unsupported(L, "pre-tokenizer", "Sequence", "up to 4 steps are");
    L->t->pre[L->t->n_pre++] = kind;
    return GPUCORE_OK;
}

static gpucore_status read_pre_one(loader *L, const cJSON *p, int *byte_level)
{
    const char *ty = type_of(p);
    if (*byte_level) return unsupported(L, "pre-tokenizer step after ByteLevel", ty, "ByteLevel must come last");
    if (!strcmp(ty, "ByteLevel")) {
        *byte_level = 1;
        L->t->add_prefix_space = flag(p, "add_prefix_space", 1);
        return flag(p, "use_regex", 1) ? add_step(L, TEXT_PRE_GPT2) : GPUCORE_OK;
    }
    if (!strcmp(ty, "Digits")) return add_step(L, flag(p, "individual_digits", 0) ? TEXT_PRE_DIGITS_SINGLE : TEXT_PRE_DIGITS_RUN);
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        if (!cJSON_IsString(re)) return unsupported(L, "Split pattern", "String", "Regex patterns of GPT-2, Llama-3 and Qwen2 are");
        int kind = text_pre_pattern_kind(re->valuestring);
        if (kind < 0)
            return unsupported(L, "Split pattern", re->valuestring, "the patterns of GPT-2, Llama-3 and Qwen2 are");
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || flag(p, "invert", 0))
            return unsupported(L, "Split behavior", cJSON_IsString(beh) ? beh->valuestring : "(none)",
                               "Isolated without invert is");
        return add_step(L, (text_pre_kind)kind);
    }
    return unsupported(L, "pre-tokenizer", ty, "ByteLevel, Split of a known pattern, Digits and a Sequence of them are");
}

static gpucore_status read_pipeline(loader *L, const cJSON *root)
{
    gpucore_tokenizer *t = L->t;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        if (strcmp(type_of(norm), "NFC")) return unsupported(L, "normalizer", type_of(norm), "none and NFC are");
        t->nfc = 1;
    }
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int byte_level = 0;
    gpucore_status st = GPUCORE_OK;
    if (!pre || cJSON_IsNull(pre)) return unsupported(L, "pre-tokenizer", "null", "byte-level BPE needs ByteLevel");
    if (!strcmp(type_of(pre), "Sequence")) {
        const cJSON *steps = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"), *it;
        cJSON_ArrayForEach(it, steps) if ((st = read_pre_one(L, it, &byte_level))) return st;
    } else if ((st = read_pre_one(L, pre, &byte_level))) {
        return st;
    }
    if (!byte_level) return unsupported(L, "pre-tokenizer without ByteLevel", type_of(pre), "byte-level BPE is");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (!dec || cJSON_IsNull(dec) || strcmp(type_of(dec), "ByteLevel"))
        return unsupported(L, "decoder", dec && !cJSON_IsNull(dec) ? type_of(dec) : "null", "ByteLevel is");
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (!post || cJSON_IsNull(post)) return GPUCORE_OK;
    const cJSON *list = post, *one;
    int single = strcmp(type_of(post), "Sequence") != 0;
    if (!single) list = cJSON_GetObjectItemCaseSensitive(post, "processors");
    for (one = single ? post : (list ? list->child : NULL); one; one = single ? NULL : one->next) {
        const char *ty = type_of(one);
        if (!strcmp(ty, "ByteLevel")) continue; /* offsets only */
        if (strcmp(ty, "TemplateProcessing"))
            return unsupported(L, "post-processor", ty, "ByteLevel and TemplateProcessing are");
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(one, "single");
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(one, "special_tokens"), *item;
        int seen_seq = 0;
        t->n_prefix = t->n_suffix = 0;
        cJSON_ArrayForEach(item, tpl) {
            if (cJSON_GetObjectItemCaseSensitive(item, "Sequence")) { seen_seq = 1; continue; }
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(item, "SpecialToken"), "id");
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(specials, cJSON_IsString(sp) ? sp->valuestring : ""), "ids"), *idv;
            if (!cJSON_IsArray(ids)) return corrupt(L, "a TemplateProcessing special token has no ids in special_tokens");
            cJSON_ArrayForEach(idv, ids) {
                int32_t id = cJSON_IsNumber(idv) ? (int32_t)idv->valuedouble : -1;
                int *n = seen_seq ? &t->n_suffix : &t->n_prefix;
                if (id < 0 || id >= t->n_vocab || *n == TEXT_MAX_AFFIX)
                    return corrupt(L, "a TemplateProcessing id is outside the vocabulary (or more than 8 of them)");
                (seen_seq ? t->suffix : t->prefix)[(*n)++] = id;
            }
        }
    }
    return GPUCORE_OK;
}

/* A token of tokenizer_config.json ("<s>" or {"content": "<s>", ...}): its id, -1 when absent. */
static int32_t config_token(const gpucore_tokenizer *t, const cJSON *cfg, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? gpucore_tokenizer_token_to_id(t, v->valuestring) : -1;
}

static gpucore_status read_config(loader *L)
{
    gpucore_tokenizer *t = L->t;
    const char *slash = strrchr(L->path, '/');
    size_t dir = slash ? (size_t)(slash - L->path) + 1 : 0;
    char *cpath = malloc(dir + sizeof "tokenizer_config.json");
    if (!cpath) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    memcpy(cpath, L->path, dir);
    strcpy(cpath + dir, "tokenizer_config.json");
    t->bos_id = t->n_prefix ? t->prefix[0] : -1;
    if (access(cpath, F_OK) != 0) { free(cpath); return GPUCORE_OK; } /* no tokenizer_config.json */
    char *text = NULL;
    void *jv = NULL;
    gpucore_status st = gpucore_io_read_json(cpath, &text, &jv, OP);
    free(cpath);
    if (st) return st;
    const cJSON *cfg = jv;
    int32_t bos = config_token(t, cfg, "bos_token");
    if (bos >= 0) t->bos_id = bos;
    t->eos_id = config_token(t, cfg, "eos_token");
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *it;
    if (cJSON_IsArray(tpl)) { /* [{"name": "default", "template": ...}, ...] */
        const cJSON *pick = NULL;
        cJSON_ArrayForEach(it, tpl) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default")) pick = it;
        }
        tpl = pick ? cJSON_GetObjectItemCaseSensitive(pick, "template") : NULL;
    }
    if (cJSON_IsString(tpl) && !(t->chat_template = strdup(tpl->valuestring)))
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    cJSON_Delete(jv);
    free(text);
    return st;
}

gpucore_status gpucore_tokenizer_create_from_file(const char *path, gpucore_tokenizer **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", OP);
    *out = NULL;
    if (!path) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: path is NULL", OP);
    char *text = NULL;
    void *jv = NULL;
    gpucore_status st = gpucore_io_read_json(path, &text, &jv, OP);
    if (st) return st;
    loader L = {text_tokenizer_new(), path, NULL};
    const cJSON *merges = NULL;
    if (!L.t) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
    if (!st) st = read_model(&L, cJSON_GetObjectItemCaseSensitive(jv, "model"),
                             cJSON_GetObjectItemCaseSensitive(jv, "added_tokens"), &merges);
    if (!st) st = read_pipeline(&L, jv);
    if (!st) st = read_merges(&L, merges);
    if (!st) st = read_config(&L);
    cJSON_Delete(jv);
    free(text);
    free(L.in_model);
    if (st) { gpucore_tokenizer_destroy(L.t); return st; }
    *out = L.t;
    return GPUCORE_OK;
}

#else /* no cJSON */

gpucore_status gpucore_tokenizer_create_from_file(const char *path, gpucore_tokenizer **out)
{
    (void)path;
    if (out) *out = NULL;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_tokenizer_create_from_file: this build has no JSON "
                             "library (cJSON) to read tokenizer.json");
}
#endif
