/*
 * test_tokenizer.c — the text section: a small tokenizer.json written here (the 256 byte-level
 * characters, a few merges whose ranks compete, added tokens with lstrip / rstrip, a
 * TemplateProcessing BOS, a tokenizer_config.json beside it) encoded and decoded against ids worked
 * out by hand; the same vocabulary from arrays with each pre-tokenizer name, and random text (and
 * random bytes) through each, which must decode back to itself; the chat template
 * families rendered against their expected prompts; and bad input (NULL, a missing file, text that
 * is not JSON, a model type, normalizer, pattern or merge that is not supported, invalid UTF-8, an
 * unknown id, an unknown template) refused with a status and a message. Host code only: no backend
 * is involved. The comparison with Hugging Face's tokenizers on real vocabularies is
 * python/tests/test_tokenizer.py.
 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "check.h"

static char dir[256], path[512];
static char byte_char[256][3]; /* GPT-2's bytes_to_unicode, UTF-8 */

static void make_byte_chars(void)
{
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = printable ? b : next++;
        if (cp < 0x80) { byte_char[b][0] = (char)cp; byte_char[b][1] = 0; }
        else { byte_char[b][0] = (char)(0xC0 | (cp >> 6)); byte_char[b][1] = (char)(0x80 | (cp & 0x3F)); byte_char[b][2] = 0; }
    }
}

/* The merged tokens, ids 256 .. in this order, and the merges by rank. */
static const char *const MERGED[] = {"he", "ll", "llo", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor", "ld", "\xc4\xa0world",
                                     "bc", "ab", "12", "o\xc4\xa0", "\xc4\xa0\xc4\xa0"};
enum { ID_HE = 256, ID_LL, ID_LLO, ID_HELLO, ID_GW, ID_OR, ID_GWOR, ID_LD, ID_GWORLD, ID_BC, ID_AB, ID_12, ID_OG, ID_GG,
       ID_END, ID_TOOL, ID_BOS, N_VOCAB };
static const char *const MERGES[] = {"b c", "a b", "h e", "l l", "ll o", "he llo", "o \xc4\xa0", "\xc4\xa0 w", "o r",
                                     "\xc4\xa0w or", "l d", "\xc4\xa0wor ld", "1 2", "\xc4\xa0 \xc4\xa0"};
#define N_MERGES ((int)(sizeof MERGES / sizeof *MERGES))

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

/* tokenizer.json with the given model type, normalizer and pre-tokenizer (JSON text), and merges. */
static void write_tokenizer(const char *model_type, const char *normalizer, const char *pre, int n_merges,
                            const char *const *merges)
{
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\": \"1.0\", \"added_tokens\": ["
               "{\"id\": %d, \"content\": \"<|end|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
               "\"normalized\": false, \"special\": true},"
               "{\"id\": %d, \"content\": \"<tool>\", \"single_word\": false, \"lstrip\": true, \"rstrip\": true, "
               "\"normalized\": false, \"special\": false},"
               "{\"id\": %d, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
               "\"normalized\": false, \"special\": true}],\n",
            ID_END, ID_TOOL, ID_BOS);
    fprintf(f, "\"normalizer\": %s, \"pre_tokenizer\": %s,\n", normalizer, pre);
    fprintf(f, "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
               "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": "
               "{\"<s>\": {\"id\": \"<s>\", \"ids\": [%d], \"tokens\": [\"<s>\"]}}},\n", ID_BOS);
    fprintf(f, "\"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
               "\"use_regex\": true},\n");
    fprintf(f, "\"model\": {\"type\": \"%s\", \"dropout\": null, \"unk_token\": null, \"byte_fallback\": false, "
               "\"vocab\": {", model_type);
    for (int b = 0; b < 256; b++) { json_string(f, byte_char[b]); fprintf(f, ": %d, ", b); }
    for (int m = 0; m < ID_END - 256; m++) { json_string(f, MERGED[m]); fprintf(f, ": %d%s", 256 + m, m + 257 < ID_END ? ", " : ""); }
    fprintf(f, "}, \"merges\": [");
    for (int m = 0; m < n_merges; m++) { json_string(f, merges[m]); fprintf(f, "%s", m + 1 < n_merges ? ", " : ""); }
    fprintf(f, "]}}\n");
    fclose(f);
}

static const char BYTE_LEVEL[] = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}";
static const char CHATML[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

static int encode_is(const gpucore_tokenizer *t, const char *text, int add_special, const int32_t *want, int n_want)
{
    int32_t ids[64];
    int64_t n = -1;
    gpucore_status st = gpucore_tokenizer_encode(t, text, -1, add_special, ids, 64, &n);
    int ok = st == GPUCORE_OK && n == n_want && !memcmp(ids, want, (size_t)n_want * sizeof *ids);
    if (!ok) {
        fprintf(stderr, "encode \"%s\": status %d, %lld ids:", text, (int)st, (long long)n);
        for (int64_t i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, " (want %d)\n", n_want);
    }
    return ok;
}

static int decode_is(const gpucore_tokenizer *t, const int32_t *ids, int n, int skip, const char *want)
{
    char buf[256];
    int64_t len = -1;
    gpucore_status st = gpucore_tokenizer_decode(t, ids, n, skip, buf, sizeof buf, &len);
    int ok = st == GPUCORE_OK && len == (int64_t)strlen(want) && !strcmp(buf, want);
    if (!ok) fprintf(stderr, "decode: status %d, \"%s\" (want \"%s\")\n", (int)st, buf, want);
    return ok;
}

static void test_file(void)
{
    write_tokenizer("BPE", "null", BYTE_LEVEL, N_MERGES, MERGES);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"<|end|>\"}, \"chat_template\": ");
    json_string(f, CHATML);
    fprintf(f, "}\n");
    fclose(f);
    gpucore_tokenizer *t = NULL;
    CHECK_OK(gpucore_tokenizer_create_from_file(path, &t));
    if (!t) return;
    CHECK(gpucore_tokenizer_vocab_size(t) == N_VOCAB);
    CHECK(gpucore_tokenizer_bos_id(t) == ID_BOS && gpucore_tokenizer_eos_id(t) == ID_END);
    CHECK(gpucore_tokenizer_chat_template(t) && !strcmp(gpucore_tokenizer_chat_template(t), CHATML));
    CHECK(gpucore_tokenizer_token_to_id(t, "hello") == ID_HELLO && gpucore_tokenizer_token_to_id(t, "<tool>") == ID_TOOL);
    CHECK(gpucore_tokenizer_token_to_id(t, "absent") == -1 && gpucore_tokenizer_token_to_id(NULL, "a") == -1);
    CHECK(!strcmp(gpucore_tokenizer_id_to_token(t, ID_GWORLD), "\xc4\xa0world"));
    CHECK(gpucore_tokenizer_id_to_token(t, N_VOCAB) == NULL && gpucore_tokenizer_id_to_token(t, -1) == NULL);

    /* the pre-tokenizer splits "hello" from " world" (the merge "o Ġ" must not cross them) */
    CHECK(encode_is(t, "hello world", 0, (int32_t[]){ID_HELLO, ID_GWORLD}, 2));
    CHECK(encode_is(t, "hello world", 1, (int32_t[]){ID_BOS, ID_HELLO, ID_GWORLD}, 3));
    /* ranks decide, not positions: "b c" (rank 0) before "a b" (rank 1) */
    CHECK(encode_is(t, "abc", 0, (int32_t[]){'a', ID_BC}, 2));
    CHECK(encode_is(t, "abd", 0, (int32_t[]){ID_AB, 'd'}, 2));
    /* \s+(?!\S): of two spaces before a word, the first stands alone */
    CHECK(encode_is(t, "hello  world", 0, (int32_t[]){ID_HELLO, 32, ID_GWORLD}, 3));
    CHECK(encode_is(t, "hello  ", 0, (int32_t[]){ID_HELLO, ID_GG}, 2));
    /* contractions and digits (GPT-2 keeps a digit run whole) */
    CHECK(encode_is(t, "he's 1212", 0, (int32_t[]){ID_HE, '\'', 's', 32, ID_12, ID_12}, 6));
    /* added tokens: matched first; <tool> takes the spaces beside it; special ones */
    CHECK(encode_is(t, "hello <tool> world", 0, (int32_t[]){ID_HELLO, ID_TOOL, 'w', ID_OR, ID_LD}, 5));
    CHECK(encode_is(t, "x<|end|>y", 0, (int32_t[]){'x', ID_END, 'y'}, 3));
    /* bytes outside ASCII: é is C3 A9 */
    CHECK(encode_is(t, "\xc3\xa9", 0, (int32_t[]){0xC3, 0xA9}, 2));
    /* a buffer too small: the count of the whole, the first ids written */
    int32_t one[1] = {-7};
    int64_t n = 0;
    CHECK_OK(gpucore_tokenizer_encode(t, "hello world", 11, 0, one, 1, &n));
    CHECK(n == 2 && one[0] == ID_HELLO);
    CHECK_OK(gpucore_tokenizer_encode(t, "hello world", 5, 0, NULL, 0, &n));
    CHECK(n == 1);

    CHECK(decode_is(t, (int32_t[]){ID_HELLO, ID_GWORLD}, 2, 0, "hello world"));
    CHECK(decode_is(t, (int32_t[]){'x', ID_END, 'y'}, 3, 0, "x<|end|>y"));
    CHECK(decode_is(t, (int32_t[]){'x', ID_END, 'y'}, 3, 1, "xy"));
    CHECK(decode_is(t, (int32_t[]){0xC3, 0xA9, 32, 10}, 4, 0, "\xc3\xa9 \n"));
    char small[4];
    int64_t len = 0;
    CHECK_OK(gpucore_tokenizer_decode(t, (int32_t[]){ID_HELLO}, 1, 0, small, sizeof small, &len));
    CHECK(len == 5 && !memcmp(small, "hell", 4));

    /* bad input */
    CHECK_STATUS(gpucore_tokenizer_encode(t, "a\xff", -1, 0, one, 1, &n), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "byte 1") != NULL);
    CHECK_STATUS(gpucore_tokenizer_encode(t, "a\xc3", -1, 0, one, 1, &n), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tokenizer_encode(NULL, "a", -1, 0, one, 1, &n), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tokenizer_encode(t, NULL, -1, 0, one, 1, &n), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tokenizer_encode(t, "a", -1, 0, NULL, 1, &n), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tokenizer_encode(t, "a", -2, 0, one, 1, &n), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tokenizer_decode(t, (int32_t[]){N_VOCAB}, 1, 0, small, 4, &len), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "ids[0]") != NULL);
    CHECK_STATUS(gpucore_tokenizer_decode(t, NULL, 1, 0, small, 4, &len), GPUCORE_ERR_NULL_POINTER);
    /* the tokenizer still works after refusals */
    CHECK(encode_is(t, "abc", 0, (int32_t[]){'a', ID_BC}, 2));
    gpucore_tokenizer_destroy(t);
    gpucore_tokenizer_destroy(NULL);
    unlink(cfg);
}

/* The call must be refused with st, and the message must name `word`. */
static void refused(const char *model_type, const char *normalizer, const char *pre, int n_merges,
                    const char *const *merges, gpucore_status st, const char *word)
{
    write_tokenizer(model_type, normalizer, pre, n_merges, merges);
    gpucore_tokenizer *t = (gpucore_tokenizer *)&t;
    CHECK_STATUS(gpucore_tokenizer_create_from_file(path, &t), st);
    CHECK(t == NULL);
    if (!strstr(gpucore_last_error(), word)) {
        check_failed++;
        fprintf(stderr, "FAIL: message \"%s\" does not name \"%s\"\n", gpucore_last_error(), word);
    }
}

static void test_refusals(void)
{
    gpucore_tokenizer *t = NULL;
    CHECK_STATUS(gpucore_tokenizer_create_from_file(NULL, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tokenizer_create_from_file("x", NULL), GPUCORE_ERR_NULL_POINTER);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/absent/tokenizer.json", dir);
    CHECK_STATUS(gpucore_tokenizer_create_from_file(missing, &t), GPUCORE_ERR_IO);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}");
    fclose(f);
    CHECK_STATUS(gpucore_tokenizer_create_from_file(path, &t), GPUCORE_ERR_CORRUPT_FILE);
    /* GGUF: the reader's refusals (the real file's tokenizer is python/tests/test_tokenizer.py's) */
    CHECK_STATUS(gpucore_tokenizer_create_from_gguf(NULL, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tokenizer_create_from_gguf(missing, &t), GPUCORE_ERR_IO);
    CHECK_STATUS(gpucore_tokenizer_create_from_gguf(path, &t), GPUCORE_ERR_CORRUPT_FILE);
    CHECK(t == NULL);
    refused("Unigram", "null", BYTE_LEVEL, 0, NULL, GPUCORE_ERR_NOT_SUPPORTED, "Unigram");
    refused("WordPiece", "null", BYTE_LEVEL, 0, NULL, GPUCORE_ERR_NOT_SUPPORTED, "WordPiece");
    refused("BPE", "{\"type\": \"Lowercase\"}", BYTE_LEVEL, 0, NULL, GPUCORE_ERR_NOT_SUPPORTED, "Lowercase");
    refused("BPE", "null", "{\"type\": \"Metaspace\", \"replacement\": \"_\"}", 0, NULL, GPUCORE_ERR_NOT_SUPPORTED,
            "Metaspace");
    refused("BPE", "null", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
            "\"\\\\w+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\"}]}", 0, NULL,
            GPUCORE_ERR_NOT_SUPPORTED, "\\w+");
    refused("BPE", "null", BYTE_LEVEL, 1, (const char *const[]){"q \xc4\xa0x"}, GPUCORE_ERR_CORRUPT_FILE, "merge 0");
    refused("BPE", "null", BYTE_LEVEL, 1, (const char *const[]){"q z"}, GPUCORE_ERR_CORRUPT_FILE, "qz");
}

/* The fixture's vocabulary as a GGUF file's arrays: <|end|> and <s> control tokens, <tool> user defined. */
static void fixture_arrays(const char **tokens, int32_t *types)
{
    for (int b = 0; b < 256; b++) { tokens[b] = byte_char[b]; types[b] = 1; }
    for (int m = 256; m < ID_END; m++) { tokens[m] = MERGED[m - 256]; types[m] = 1; }
    tokens[ID_END] = "<|end|>"; types[ID_END] = 3;
    tokens[ID_TOOL] = "<tool>"; types[ID_TOOL] = 4;
    tokens[ID_BOS] = "<s>"; types[ID_BOS] = 3;
}

/* The vocabulary as arrays (a GGUF file's metadata) with each pre-tokenizer. */
static void test_arrays(void)
{
    const char *tokens[N_VOCAB];
    int32_t types[N_VOCAB];
    fixture_arrays(tokens, types);
    gpucore_tokenizer_arrays a = {N_VOCAB, tokens, types, N_MERGES, MERGES, "gpt2", ID_BOS, ID_END, 1, 0};
    static const struct { const char *pre; int n; int32_t ids[6]; } cases[] = {
        {"gpt2", 3, {ID_BOS, ID_12, ID_12}},
        {"llama-bpe", 4, {ID_BOS, ID_12, '1', '2'}},
        {"qwen2", 5, {ID_BOS, '1', '2', '1', '2'}},
        {"smollm", 5, {ID_BOS, '1', '2', '1', '2'}},
    };
    for (int c = 0; c < 4; c++) {
        gpucore_tokenizer *t = NULL;
        a.pre = cases[c].pre;
        CHECK_OK(gpucore_tokenizer_create_from_arrays(&a, &t));
        if (!t) continue;
        CHECK(encode_is(t, "1212", 1, cases[c].ids, cases[c].n));
        CHECK(encode_is(t, "hello world<|end|>", 0, (int32_t[]){ID_HELLO, ID_GWORLD, ID_END}, 3));
        CHECK(decode_is(t, (int32_t[]){ID_BOS, ID_HELLO, ID_END}, 3, 1, "hello"));
        gpucore_tokenizer_destroy(t);
    }
    /* a token whose bytes end inside a UTF-8 sequence (an arbitrary file's added token) decodes as its bytes */
    const char *cut_tokens[257];
    int32_t cut_types[257];
    for (int b = 0; b < 256; b++) { cut_tokens[b] = byte_char[b]; cut_types[b] = 1; }
    cut_tokens[256] = "\xf0\x9f";
    cut_types[256] = 4;
    gpucore_tokenizer_arrays cut = {257, cut_tokens, cut_types, 0, NULL, "gpt2", -1, -1, 0, 0};
    gpucore_tokenizer *ct = NULL;
    CHECK_OK(gpucore_tokenizer_create_from_arrays(&cut, &ct));
    if (ct) CHECK(decode_is(ct, (int32_t[]){'a', 256}, 2, 0, "a\xf0\x9f"));
    gpucore_tokenizer_destroy(ct);
    gpucore_tokenizer *t = NULL;
    a.pre = "bert";
    CHECK_STATUS(gpucore_tokenizer_create_from_arrays(&a, &t), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(strstr(gpucore_last_error(), "bert") != NULL);
    a.pre = "gpt2";
    a.bos_id = N_VOCAB;
    CHECK_STATUS(gpucore_tokenizer_create_from_arrays(&a, &t), GPUCORE_ERR_INVALID_ARGUMENT);
    a.bos_id = ID_BOS;
    a.merges = (const char *const[]){"nospace"};
    a.n_merges = 1;
    CHECK_STATUS(gpucore_tokenizer_create_from_arrays(&a, &t), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tokenizer_create_from_arrays(NULL, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK(t == NULL);
}

/* Random text (code points from every plane, white space, digits, apostrophes, the added tokens) and
 * random bytes: encode never fails on valid UTF-8, refuses invalid UTF-8 with INVALID_ARGUMENT, and
 * decode gives the text back, for each pre-tokenizer. */
static size_t put_utf8(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static void test_random_roundtrip(unsigned seed)
{
    const char *tokens[N_VOCAB];
    int32_t types[N_VOCAB];
    fixture_arrays(tokens, types);
    static const char *const pres[] = {"gpt2", "llama3", "qwen2", "smollm"};
    static const char *const pieces[] = {" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "12", "<tool>", "<|end|>", "hello",
                                         "\xc2\xa0", "\xe3\x80\x80", "\xd9\xa9", "\xf0\x9f\x98\x80"};
    srand(seed);
    int roundtrips = 1, refusals = 1, invalid = 0;
    for (int p = 0; p < 4; p++) {
        gpucore_tokenizer *t = NULL;
        gpucore_tokenizer_arrays a = {N_VOCAB, tokens, types, N_MERGES, MERGES, pres[p], ID_BOS, ID_END, 0, 0};
        CHECK_OK(gpucore_tokenizer_create_from_arrays(&a, &t));
        if (!t) continue;
        for (int it = 0; it < 400; it++) {
            char text[512];
            size_t n = 0;
            int k = rand() % 40, raw = it % 5 == 4;
            for (int c = 0; c < k && n < sizeof text - 16; c++) {
                int kind = rand() % 5;
                if (raw) text[n++] = (char)(rand() % 256);
                else if (kind == 0) n += put_utf8((uint32_t)(32 + rand() % 95), text + n);
                else if (kind == 1) { strcpy(text + n, pieces[rand() % 15]); n += strlen(text + n); }
                else {
                    uint32_t cp = kind == 2 ? (uint32_t)(rand() % 0x3000) : (uint32_t)(rand() % 0x110000);
                    if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 'x';
                    n += put_utf8(cp, text + n);
                }
            }
            text[n] = 0;
            int32_t ids[1024];
            int64_t nid = 0, len = 0;
            gpucore_status st = gpucore_tokenizer_encode(t, text, (int64_t)n, 0, ids, 1024, &nid);
            if (raw && st == GPUCORE_ERR_INVALID_ARGUMENT) { invalid++; continue; }
            if (st != GPUCORE_OK || nid > 1024) { refusals = 0; fprintf(stderr, "encode failed: %s\n", gpucore_last_error()); continue; }
            char back[600];
            st = gpucore_tokenizer_decode(t, ids, nid, 0, back, sizeof back, &len);
            if (st != GPUCORE_OK || len != (int64_t)n || memcmp(back, text, n)) {
                roundtrips = 0;
                fprintf(stderr, "%s: the text of %zu bytes came back as %lld bytes\n", pres[p], n, (long long)len);
            }
        }
        gpucore_tokenizer_destroy(t);
    }
    CHECK(roundtrips);
    CHECK(refusals);
    CHECK(invalid > 0);
}

static int render_is(const char *tpl, const gpucore_chat_message *m, int n, int gen, const char *want)
{
    char buf[1024];
    int64_t len = -1;
    gpucore_status st = gpucore_chat_render(tpl, "<s>", "</s>", m, n, gen, buf, sizeof buf, &len);
    int ok = st == GPUCORE_OK && len == (int64_t)strlen(want) && !strcmp(buf, want);
    if (!ok) fprintf(stderr, "render: status %d %s, got \"%s\"\nwant \"%s\"\n", (int)st, gpucore_last_error(), buf, want);
    return ok;
}

static void test_chat(void)
{
    static const char LLAMA3[] =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
        "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
        "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
    static const char MISTRAL[] =
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
        "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
        "are supported!') }}{% endif %}{% endfor %}";
    static const char ZEPHYR[] =
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
        "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
        "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
    const gpucore_chat_message conv[] = {{"user", "Hi "}, {"assistant", "Hello."}, {"user", "2+2?"}};
    const gpucore_chat_message sys[] = {{"system", "Be brief."}, {"user", "Hi"}};
    CHECK(render_is(CHATML, conv, 3, 1,
                    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                    "<|im_start|>user\nHi <|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?"
                    "<|im_end|>\n<|im_start|>assistant\n"));
    CHECK(render_is(CHATML, sys, 2, 0, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"));
    CHECK(render_is(LLAMA3, sys, 2, 1,
                    "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
                    "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"));
    CHECK(render_is(LLAMA3, conv, 1, 0, "<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    CHECK(render_is(MISTRAL, conv, 3, 1, "<s>[INST] Hi  [/INST]Hello.</s>[INST] 2+2? [/INST]"));
    CHECK(render_is(ZEPHYR, sys, 2, 1, "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"));
    char buf[64];
    int64_t len;
    CHECK_STATUS(gpucore_chat_render(MISTRAL, "<s>", "</s>", sys, 2, 1, buf, sizeof buf, &len),
                 GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_chat_render("{%- if tools %}\nsomething else", "<s>", "</s>", conv, 1, 1, buf, sizeof buf, &len),
                 GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(strstr(gpucore_last_error(), "{%- if tools %}") != NULL && !strstr(gpucore_last_error(), "something"));
    CHECK_STATUS(gpucore_chat_render(NULL, "<s>", "</s>", conv, 1, 1, buf, sizeof buf, &len), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_chat_render(CHATML, NULL, NULL, (gpucore_chat_message[]){{"user", NULL}}, 1, 1, buf,
                                     sizeof buf, &len), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_chat_render(LLAMA3, NULL, "</s>", conv, 1, 1, buf, sizeof buf, &len), GPUCORE_ERR_NULL_POINTER);
    /* a buffer too small: the length of the whole */
    CHECK_OK(gpucore_chat_render(CHATML, NULL, NULL, sys, 2, 0, buf, 8, &len));
    CHECK(len == (int64_t)strlen("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n") &&
          !memcmp(buf, "<|im_sta", 8));
}

int main(void)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("seed %u\n", seed);
    make_byte_chars();
    snprintf(dir, sizeof dir, "/tmp/gpucore_tokenizer_%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    test_file();
    test_refusals();
    test_arrays();
    test_chat();
    test_random_roundtrip(seed);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_finish("test_tokenizer");
}
