/*
 * tokenizer.c — gpucore_tokenizer: building one from arrays (a GGUF file's metadata), encoding
 * (added tokens matched whole first, as Hugging Face's AddedVocabulary does, then the pre-tokenizer
 * steps, then BPE per piece, then the post-processor's ids) and decoding (byte-level characters
 * back to bytes). Reading tokenizer.json is tokenizer_json.c.
 */
#include <stdlib.h>
#include <string.h>
#include "text_internal.h"

gpucore_tokenizer *text_tokenizer_new(void)
{
    gpucore_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->unk_id = t->bos_id = t->eos_id = -1;
    /* GPT-2's bytes_to_unicode: printable bytes are themselves, the others 256, 257, ... in order */
    int next = 256;
    for (int b = 0; b < 324; b++) t->char_byte[b] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = printable ? b : next++;
        size_t n = text_utf8_put((uint32_t)cp, t->byte_char[b]);
        t->byte_char[b][n] = 0;
        t->char_byte[cp] = (int16_t)b;
    }
    return t;
}

void gpucore_tokenizer_destroy(gpucore_tokenizer *t)
{
    if (!t) return;
    if (t->tok)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->is_special);
    free(t->vocab.slot);
    free(t->added_map.slot);
    free(t->merges.slot);
    free(t->added);
    free(t->chat_template);
    free(t);
}

gpucore_status text_tokenizer_index(gpucore_tokenizer *t, size_t n_merges, const uint8_t *in_model, const char *op)
{
    uint8_t *in_added = calloc((size_t)t->n_vocab + 1, 1);
    if (!in_added) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int32_t a = 0; a < t->n_added; a++) {
        in_added[t->added[a].id] = 1;
        t->added_first[(uint8_t)t->tok[t->added[a].id][0]] = 1;
    }
    int bad = text_vocab_map_build(&t->added_map, t->tok, t->tok_len, t->n_vocab, in_added);
    bad = bad || text_vocab_map_build(&t->vocab, t->tok, t->tok_len, t->n_vocab, in_model);
    free(in_added);
    bad = bad || text_merge_map_init(&t->merges, n_merges);
    if (bad) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    return GPUCORE_OK;
}

gpucore_status text_tokenizer_add_merge(gpucore_tokenizer *t, const char *l, size_t ln, const char *r, size_t rn,
                                        int32_t rank, const char *op)
{
    int32_t a = text_vocab_find(&t->vocab, t->tok, t->tok_len, l, ln);
    int32_t b = text_vocab_find(&t->vocab, t->tok, t->tok_len, r, rn);
    char both[512];
    if (a < 0 || b < 0 || ln + rn > sizeof both)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: merge %d ('%.*s' '%.*s') names a token that is not in "
                                 "the vocabulary", op, (int)rank, (int)ln, l, (int)rn, r);
    memcpy(both, l, ln);
    memcpy(both + ln, r, rn);
    int32_t id = text_vocab_find(&t->vocab, t->tok, t->tok_len, both, ln + rn);
    if (id < 0)
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: merge %d ('%.*s' '%.*s') makes '%.*s', which is not in "
                                 "the vocabulary", op, (int)rank, (int)ln, l, (int)rn, r, (int)(ln + rn), both);
    if (text_merge_map_add(&t->merges, a, b, rank, id) < 0)
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    return GPUCORE_OK;
}

/* ---- from arrays ---- */
gpucore_status gpucore_tokenizer_create_from_arrays(const gpucore_tokenizer_arrays *a, gpucore_tokenizer **out)
{
    static const char op[] = "gpucore_tokenizer_create_from_arrays";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    if (!a || !a->tokens || (a->n_merges > 0 && !a->merges) || !a->pre)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: arrays, tokens, merges (when n_merges > 0) and pre "
                                 "must not be NULL", op);
    if (a->n_tokens < 1 || a->n_tokens > INT32_MAX - 1 || a->n_merges < 0 || a->n_merges > INT32_MAX)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %lld tokens and %lld merges (tokens 1 .. 2^31-2, "
                                 "merges 0 .. 2^31-1)", op, (long long)a->n_tokens, (long long)a->n_merges);
    if (a->bos_id < -1 || a->bos_id >= a->n_tokens || a->eos_id < -1 || a->eos_id >= a->n_tokens ||
        (a->add_bos && a->bos_id < 0) || (a->add_eos && a->eos_id < 0))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: bos_id %d / eos_id %d outside the %lld tokens "
                                 "(or add_bos / add_eos without one)", op, (int)a->bos_id, (int)a->eos_id,
                                 (long long)a->n_tokens);
    gpucore_tokenizer *t = text_tokenizer_new();
    if (!t) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    gpucore_status st = GPUCORE_OK;
    if (!strcmp(a->pre, "gpt2")) { t->pre[0] = TEXT_PRE_GPT2; t->n_pre = 1; }
    else if (!strcmp(a->pre, "llama-bpe") || !strcmp(a->pre, "llama3")) { t->pre[0] = TEXT_PRE_LLAMA3; t->n_pre = 1; }
    else if (!strcmp(a->pre, "qwen2")) { t->pre[0] = TEXT_PRE_QWEN2; t->n_pre = 1; }
    else if (!strcmp(a->pre, "smollm")) {
        t->pre[0] = TEXT_PRE_DIGITS_SINGLE; t->pre[1] = TEXT_PRE_GPT2; t->n_pre = 2;
    } else {
        st = gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: pre-tokenizer '%s' is not implemented (gpt2, "
                               "llama-bpe, llama3, qwen2 and smollm are)", op, a->pre);
        goto fail;
    }
    t->n_vocab = (int32_t)a->n_tokens;
    t->tok = calloc((size_t)t->n_vocab, sizeof *t->tok);
    t->tok_len = calloc((size_t)t->n_vocab, sizeof *t->tok_len);
    t->is_special = calloc((size_t)t->n_vocab, 1);
    t->added = calloc((size_t)t->n_vocab, sizeof *t->added);
    if (!t->tok || !t->tok_len || !t->is_special || !t->added) goto oom;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!a->tokens[i]) {
            st = gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: tokens[%d] is NULL", op, (int)i);
            goto fail;
        }
        size_t n = strlen(a->tokens[i]);
        if (!(t->tok[i] = malloc(n + 1))) goto oom;
        memcpy(t->tok[i], a->tokens[i], n + 1);
        t->tok_len[i] = (int32_t)n;
        int32_t type = a->token_types ? a->token_types[i] : 1;
        if ((type == 3 || type == 4) && n > 0) {
            t->added[t->n_added++] = (text_added){.id = i, .special = type == 3};
            t->is_special[i] = type == 3;
        }
    }
    if ((st = text_tokenizer_index(t, (size_t)a->n_merges, NULL, op))) goto fail;
    for (int64_t m = 0; m < a->n_merges; m++) {
        const char *s = a->merges[m];
        const char *sp = s ? strchr(s, ' ') : NULL;
        if (!sp) {
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: merges[%lld] is %s, not \"left right\"", op,
                                   (long long)m, s ? "without a space" : "NULL");
            goto fail;
        }
        if ((st = text_tokenizer_add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), (int32_t)m, op))) goto fail;
    }
    t->bos_id = a->bos_id;
    t->eos_id = a->eos_id;
    if (a->add_bos) t->prefix[t->n_prefix++] = a->bos_id;
    if (a->add_eos) t->suffix[t->n_suffix++] = a->eos_id;
    *out = t;
    return GPUCORE_OK;
oom:
    st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
fail:
    gpucore_tokenizer_destroy(t);
    return st;
}

/* ---- encode ---- */
/* The code point that ends at byte e (e > 0) of valid UTF-8 s. */
static uint32_t cp_before(const uint8_t *s, size_t e, size_t *start)
{
    size_t b = e - 1;
    while (b > 0 && (s[b] & 0xC0) == 0x80) b--;
    size_t n;
    *start = b;
    return text_utf8_at(s, e, b, &n);
}

/* The longest added token of one pass (normalized: 0 the tokens matched on the raw text, 1 those
 * matched after normalization) that starts at i; -1 when none. */
static int32_t added_at(const gpucore_tokenizer *t, const uint8_t *s, size_t end, size_t i, int normalized,
                        size_t *mlen)
{
    int32_t best = -1;
    size_t blen = 0;
    *mlen = 0;
    if (!t->added_first[s[i]]) return -1;
    for (int32_t a = 0; a < t->n_added; a++) {
        const text_added *ad = &t->added[a];
        if (ad->normalized != normalized) continue;
        size_t n = (size_t)t->tok_len[ad->id];
        if (n > blen && n <= end - i && !memcmp(s + i, t->tok[ad->id], n)) { best = a; blen = n; }
    }
    *mlen = blen;
    return best;
}

typedef struct piece { size_t start, end; int32_t id; } piece; /* id >= 0: an added token */
typedef struct pieces { piece *v; size_t n, cap; } pieces;

static int pieces_push(pieces *p, size_t start, size_t end, int32_t id)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 32;
        piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v; p->cap = cap;
    }
    p->v[p->n++] = (piece){start, end, id};
    return 0;
}

/* Hugging Face's find_matches: leftmost-longest matches, single_word ones only between non-word
 * characters, lstrip / rstrip taking the white space beside them. */
static int split_added(const gpucore_tokenizer *t, const uint8_t *s, size_t from, size_t end, int normalized,
                       pieces *out)
{
    size_t start_offset = from, i = from;
    while (i < end) {
        size_t mlen, n;
        int32_t a = added_at(t, s, end, i, normalized, &mlen);
        if (a < 0) { text_utf8_at(s, end, i, &n); i += n; continue; }
        const text_added *ad = &t->added[a];
        size_t start = i, stop = i + mlen;
        i = stop;
        if (ad->single_word) {
            size_t b;
            int word_before = start > 0 && text_is_word(cp_before(s, start, &b));
            int word_after = stop < end && text_is_word(text_utf8_at(s, end, stop, &n));
            if (word_before || word_after) continue;
        }
        if (ad->lstrip) {
            size_t b = start;
            while (b > start_offset) {
                size_t prev;
                if (!text_is_space(cp_before(s, b, &prev))) break;
                b = prev;
            }
            start = b;
        }
        if (ad->rstrip)
            while (stop < end && text_is_space(text_utf8_at(s, end, stop, &n))) stop += n;
        if (start_offset < start && pieces_push(out, start_offset, start, -1)) return -1;
        if (pieces_push(out, start, stop, ad->id)) return -1;
        start_offset = i = stop;
    }
    if (start_offset < end && pieces_push(out, start_offset, end, -1)) return -1;
    return 0;
}

/* One piece of text without added tokens: the pre-tokenizer steps, then BPE per pre-token. */
static int encode_plain(const gpucore_tokenizer *t, const uint8_t *s, size_t len, text_ids *ids)
{
    uint8_t *buf = NULL;
    if (t->add_prefix_space && !(len && s[0] == ' ')) {
        if (!(buf = malloc(len + 1))) return -1;
        buf[0] = ' ';
        memcpy(buf + 1, s, len);
        s = buf;
        len++;
    }
    text_spans a = {0}, b = {0};
    int rc = text_spans_push(&a, 0, len);
    for (int k = 0; k < t->n_pre && !rc; k++) {
        b.n = 0;
        rc = text_pre_split(t->pre[k], s, &a, &b);
        text_spans tmp = a; a = b; b = tmp;
    }
    for (size_t p = 0; p < a.n && !rc; p++) rc = text_bpe_encode(t, s + a.v[p].start, a.v[p].end - a.v[p].start, ids);
    free(a.v);
    free(b.v);
    free(buf);
    return rc;
}

/* Text between the added tokens matched on the raw text: normalized (NFC where the file's normalizer is),
 * the normalized added tokens split off, the rest encoded (0, or -1 out of host memory). */
static int encode_segment(const gpucore_tokenizer *t, const uint8_t *s, size_t from, size_t end, text_ids *ids)
{
    uint8_t *norm = NULL;
    size_t nlen = 0;
    if (t->nfc) {
        if (text_nfc(s + from, end - from, &norm, &nlen)) return -1;
        s = norm, from = 0, end = nlen;
    }
    pieces all = {0};
    int rc = split_added(t, s, from, end, 1, &all);
    for (size_t p = 0; p < all.n && !rc; p++) {
        if (all.v[p].id >= 0) rc = text_ids_push(ids, all.v[p].id);
        else rc = encode_plain(t, s + all.v[p].start, all.v[p].end - all.v[p].start, ids);
    }
    free(all.v);
    free(norm);
    return rc;
}

gpucore_status gpucore_tokenizer_encode(const gpucore_tokenizer *t, const char *text, int64_t len, int add_special,
                                        int32_t *ids, int64_t cap, int64_t *n_ids)
{
    static const char op[] = "gpucore_tokenizer_encode";
    if (!t || !text || !n_ids || (cap > 0 && !ids))
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: tokenizer, text, n_ids (and ids when cap > 0) must "
                                 "not be NULL", op);
    if (len < -1 || cap < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: len %lld (-1: NUL-terminated) and cap %lld must "
                                 "not be negative", op, (long long)len, (long long)cap);
    *n_ids = 0;
    const uint8_t *s = (const uint8_t *)text;
    size_t n = len < 0 ? strlen(text) : (size_t)len;
    size_t bad = text_utf8_invalid_at(s, n);
    if (bad < n)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the text is not valid UTF-8 at byte %zu (0x%02x)",
                                 op, bad, s[bad]);
    pieces raw = {0};
    text_ids out = {0};
    int rc = split_added(t, s, 0, n, 0, &raw);
    for (int k = 0; add_special && k < t->n_prefix && !rc; k++) rc = text_ids_push(&out, t->prefix[k]);
    for (size_t p = 0; p < raw.n && !rc; p++) {
        if (raw.v[p].id >= 0) rc = text_ids_push(&out, raw.v[p].id);
        else rc = encode_segment(t, s, raw.v[p].start, raw.v[p].end, &out);
    }
    for (int k = 0; add_special && k < t->n_suffix && !rc; k++) rc = text_ids_push(&out, t->suffix[k]);
    free(raw.v);
    if (rc) { free(out.v); return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op); }
    size_t w = out.n < (size_t)cap ? out.n : (size_t)cap;
    if (w) memcpy(ids, out.v, w * sizeof *ids);
    *n_ids = (int64_t)out.n;
    free(out.v);
    return GPUCORE_OK;
}

/* ---- decode ---- */
gpucore_status gpucore_tokenizer_decode(const gpucore_tokenizer *t, const int32_t *ids, int64_t n_ids,
                                        int skip_special, char *text, int64_t cap, int64_t *len)
{
    static const char op[] = "gpucore_tokenizer_decode";
    if (!t || (n_ids > 0 && !ids) || !len || (cap > 0 && !text))
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: tokenizer, ids (when n_ids > 0), len (and text when "
                                 "cap > 0) must not be NULL", op);
    if (n_ids < 0 || cap < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: n_ids %lld and cap %lld must not be negative", op,
                                 (long long)n_ids, (long long)cap);
    *len = 0;
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab || !t->tok[ids[i]])
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: ids[%lld] = %d is not a token of this "
                                     "tokenizer (vocabulary of %d)", op, (long long)i, (int)ids[i], (int)t->n_vocab);
    int64_t w = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (skip_special && t->is_special[id]) continue;
        const uint8_t *s = (const uint8_t *)t->tok[id];
        size_t n = (size_t)t->tok_len[id], k;
        int mapped = 1;
        for (size_t j = 0; j < n && mapped; j += k) {
            uint32_t cp = text_utf8_at(s, n, j, &k);
            mapped = cp < 324 && t->char_byte[cp] >= 0;
        }
        for (size_t j = 0; j < n; j += mapped ? k : 1) {
            uint8_t byte = s[j];
            if (mapped) byte = (uint8_t)t->char_byte[text_utf8_at(s, n, j, &k)];
            if (w < cap) text[w] = (char)byte;
            w++;
        }
    }
    if (w < cap) text[w] = 0;
    *len = w;
    return GPUCORE_OK;
}

int64_t gpucore_tokenizer_vocab_size(const gpucore_tokenizer *t) { return t ? t->n_vocab : -1; }

int32_t gpucore_tokenizer_token_to_id(const gpucore_tokenizer *t, const char *token)
{
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t id = text_vocab_find(&t->added_map, t->tok, t->tok_len, token, n);
    return id >= 0 ? id : text_vocab_find(&t->vocab, t->tok, t->tok_len, token, n);
}

const char *gpucore_tokenizer_id_to_token(const gpucore_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab ? t->tok[id] : NULL;
}

int32_t gpucore_tokenizer_bos_id(const gpucore_tokenizer *t) { return t ? t->bos_id : -1; }
int32_t gpucore_tokenizer_eos_id(const gpucore_tokenizer *t) { return t ? t->eos_id : -1; }
const char *gpucore_tokenizer_chat_template(const gpucore_tokenizer *t) { return t ? t->chat_template : NULL; }
