/*
 * tokenizer_gguf.c — gpucore_tokenizer_create_from_gguf: a GGUF file's tokenizer.ggml.* metadata
 * (llama.cpp's "gpt2" byte-level BPE: tokens, token types, merges, the pre-tokenizer's name, BOS /
 * EOS and whether BOS is added) read through the public GGUF reader and given to
 * gpucore_tokenizer_create_from_arrays; tokenizer.chat_template kept.
 */
#include <stdlib.h>
#include <string.h>
#include "text_internal.h"

static const char OP[] = "gpucore_tokenizer_create_from_gguf";

/* Element j of string key (*s NULL when the key is absent); a key of another type is CORRUPT_FILE. */
static gpucore_status str_at(const gpucore_gguf *g, const char *key, int64_t j, const char **s)
{
    *s = NULL;
    int64_t i = gpucore_gguf_kv_find(g, key);
    if (i < 0) return GPUCORE_OK;
    if (gpucore_gguf_kv_string(g, i, j, s, NULL))
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: metadata %s[%lld] is not a string", OP, key, (long long)j);
    return GPUCORE_OK;
}

/* An integer key, dflt when absent. */
static int64_t int_of(const gpucore_gguf *g, const char *key, int64_t dflt)
{
    int64_t i = gpucore_gguf_kv_find(g, key), v;
    return i >= 0 && gpucore_gguf_kv_int(g, i, 0, &v) == GPUCORE_OK ? v : dflt;
}

/* An array key's element count and element type; -1 when absent or not an array. */
static int64_t array_of(const gpucore_gguf *g, const char *key, int *elem)
{
    int64_t i = gpucore_gguf_kv_find(g, key), n = -1;
    int type = -1;
    if (i < 0 || gpucore_gguf_kv_info(g, i, NULL, &type, elem, &n) || type != GPUCORE_GGUF_ARRAY) return -1;
    return n;
}

gpucore_status gpucore_tokenizer_create_from_gguf(const char *path, gpucore_tokenizer **out)
{
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", OP);
    *out = NULL;
    if (!path) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: path is NULL", OP);
    gpucore_gguf *g = NULL;
    gpucore_status st = gpucore_gguf_open(path, &g);
    if (st) return st;
    const char *model = NULL, *pre = NULL, *tpl = NULL;
    const char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    int elem_t = -1, elem_y = -1, elem_m = -1;
    int64_t nt = array_of(g, "tokenizer.ggml.tokens", &elem_t), ny = array_of(g, "tokenizer.ggml.token_type", &elem_y);
    int64_t nm = array_of(g, "tokenizer.ggml.merges", &elem_m);
    if ((st = str_at(g, "tokenizer.ggml.model", 0, &model)) || (st = str_at(g, "tokenizer.ggml.pre", 0, &pre)) ||
        (st = str_at(g, "tokenizer.chat_template", 0, &tpl)))
        goto done;
    if (!model) { st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: %s has no tokenizer.ggml.model", OP, path); goto done; }
    if (strcmp(model, "gpt2")) {
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: %s: tokenizer model '%s' is not implemented (byte-level "
                               "BPE, 'gpt2', is; 'llama' is SentencePiece)", OP, path, model);
        goto done;
    }
    if (nt < 1 || elem_t != GPUCORE_GGUF_STRING || nm < 0 || elem_m != GPUCORE_GGUF_STRING ||
        (ny >= 0 && ny != nt)) {
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: %s: tokenizer.ggml.tokens and .merges must be string "
                               "arrays (and .token_type as long as .tokens)", OP, path);
        goto done;
    }
    tokens = calloc((size_t)nt, sizeof *tokens);
    merges = calloc((size_t)nm + 1, sizeof *merges);
    types = ny >= 0 ? calloc((size_t)nt, sizeof *types) : NULL;
    if (!tokens || !merges || (ny >= 0 && !types)) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
        goto done;
    }
    for (int64_t j = 0; j < nt && !st; j++) st = str_at(g, "tokenizer.ggml.tokens", j, &tokens[j]);
    for (int64_t j = 0; j < nm && !st; j++) st = str_at(g, "tokenizer.ggml.merges", j, &merges[j]);
    int64_t iy = gpucore_gguf_kv_find(g, "tokenizer.ggml.token_type");
    for (int64_t j = 0; j < ny && !st; j++) {
        int64_t v;
        if (gpucore_gguf_kv_int(g, iy, j, &v))
            st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: %s: tokenizer.ggml.token_type is not integers", OP, path);
        types[j] = (int32_t)v;
    }
    if (st) goto done;
    gpucore_tokenizer_arrays a = {nt, tokens, types, nm, merges, pre ? pre : "gpt2",
                                  (int32_t)int_of(g, "tokenizer.ggml.bos_token_id", -1),
                                  (int32_t)int_of(g, "tokenizer.ggml.eos_token_id", -1), 0, 0};
    a.add_bos = a.bos_id >= 0 && int_of(g, "tokenizer.ggml.add_bos_token", 0) != 0;
    a.add_eos = a.eos_id >= 0 && int_of(g, "tokenizer.ggml.add_eos_token", 0) != 0;
    gpucore_tokenizer *t = NULL;
    if ((st = gpucore_tokenizer_create_from_arrays(&a, &t))) goto done;
    if (tpl && !(t->chat_template = strdup(tpl))) {
        gpucore_tokenizer_destroy(t);
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", OP);
        goto done;
    }
    *out = t;
done:
    free(tokens);
    free(merges);
    free(types);
    gpucore_gguf_close(g);
    return st;
}
