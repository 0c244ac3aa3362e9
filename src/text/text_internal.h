/*
 * text_internal.h — what the tokenizer's files share: UTF-8 decoding and the Unicode classes
 * (unicode.c), the pre-tokenizer steps (pretokenize.c), the byte-level BPE model with its hash maps
 * (bpe.c), and the layout of gpucore_tokenizer (tokenizer.c, tokenizer_json.c).
 */
#ifndef GPUCORE_TEXT_INTERNAL_H
#define GPUCORE_TEXT_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "core/internal.h"

/* ---- UTF-8 and Unicode classes (unicode.c) ---- */
/* The code point at s[i] (i < end) and its length in *n. Encoded text is valid UTF-8 (checked first);
 * a sequence that the end cuts (a token's bytes) is read as its lead byte alone. */
GPUCORE_HIDDEN uint32_t text_utf8_at(const uint8_t *s, size_t end, size_t i, size_t *n);
/* Byte offset of the first invalid UTF-8 sequence of s, or len when s is valid. */
GPUCORE_HIDDEN size_t text_utf8_invalid_at(const uint8_t *s, size_t len);
GPUCORE_HIDDEN size_t text_utf8_put(uint32_t cp, char *out); /* 1-4 bytes written */
GPUCORE_HIDDEN int text_is_letter(uint32_t cp);     /* \p{L} */
GPUCORE_HIDDEN int text_is_number(uint32_t cp);     /* \p{N} */
GPUCORE_HIDDEN int text_is_space(uint32_t cp);      /* \s: White_Space */
GPUCORE_HIDDEN int text_is_word(uint32_t cp);       /* \w of Rust's regex crate */
GPUCORE_HIDDEN int text_is_nfc_unsafe(uint32_t cp); /* may change under NFC */
/* s[0, len) (valid UTF-8) in NFC, in *out (malloc'ed, *out_len bytes); 0, or -1 out of memory (nfc.c). */
GPUCORE_HIDDEN int text_nfc(const uint8_t *s, size_t len, uint8_t **out, size_t *out_len);

/* ---- pre-tokenizer steps (pretokenize.c) ---- */
typedef enum text_pre_kind {
    TEXT_PRE_GPT2,          /* GPT-2's pattern (ByteLevel's use_regex, or a Split of that pattern) */
    TEXT_PRE_LLAMA3,        /* Llama-3's Split pattern: numbers in runs of 1-3 */
    TEXT_PRE_QWEN2,         /* Qwen2's Split pattern: Llama-3's with single-digit numbers */
    TEXT_PRE_DIGITS_SINGLE, /* Digits, individual_digits true */
    TEXT_PRE_DIGITS_RUN,    /* Digits, individual_digits false */
} text_pre_kind;

typedef struct text_span { size_t start, end; } text_span;
typedef struct text_spans { text_span *v; size_t n, cap; } text_spans;

GPUCORE_HIDDEN int text_spans_push(text_spans *sp, size_t start, size_t end); /* 0, or -1 out of memory */
/* The Split pattern's kind, or -1 when the pattern is not one of the known ones. */
GPUCORE_HIDDEN int text_pre_pattern_kind(const char *pattern);
/* Splits every span of in (over s) by the step, Isolated behaviour (matches and the text between them
 * are pieces), appending to out. 0, or -1 out of memory. */
GPUCORE_HIDDEN int text_pre_split(text_pre_kind kind, const uint8_t *s, const text_spans *in, text_spans *out);

/* ---- byte-level BPE (bpe.c) ---- */
typedef struct text_vocab_map { int32_t *slot; size_t mask; } text_vocab_map;   /* token string -> id */
typedef struct text_merge_entry { uint64_t key; int32_t rank, id; } text_merge_entry;
typedef struct text_merge_map { text_merge_entry *slot; size_t mask; } text_merge_map; /* (left, right) -> rank, id */

#define TEXT_MAX_AFFIX 8
#define TEXT_MAX_PRE 4

typedef struct text_added {
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} text_added;

struct gpucore_tokenizer {
    int32_t n_vocab;       /* ids 0 .. n_vocab-1; a hole has tok[id] NULL */
    char **tok;            /* the token strings as the file holds them (byte-level characters) */
    int32_t *tok_len;
    uint8_t *is_special;   /* per id: an added token marked special (skipped by decode's skip_special) */
    text_vocab_map vocab;  /* the model's vocabulary */
    text_vocab_map added_map; /* added tokens' contents */
    text_merge_map merges;
    text_added *added;     /* the added tokens, matched whole before pre-tokenization */
    int32_t n_added;
    uint8_t added_first[256]; /* bytes an added token starts with */
    text_pre_kind pre[TEXT_MAX_PRE];
    int n_pre;
    int add_prefix_space;  /* ByteLevel's add_prefix_space */
    int ignore_merges;     /* a piece that is a whole vocabulary token is that token */
    int nfc;               /* the normalizer is NFC (applied to the text between the added tokens not normalized) */
    int32_t unk_id;        /* -1: none (characters outside the vocabulary are dropped, as HF does) */
    int32_t prefix[TEXT_MAX_AFFIX], suffix[TEXT_MAX_AFFIX]; /* ids added around a sequence by add_special */
    int n_prefix, n_suffix;
    int32_t bos_id, eos_id; /* -1: none */
    char *chat_template;    /* tokenizer_config.json's chat_template, or NULL */
    char byte_char[256][3]; /* byte -> its byte-level character (UTF-8, NUL-terminated) */
    int16_t char_byte[324]; /* byte-level character (code point < 324) -> byte, -1 none */
};

GPUCORE_HIDDEN int text_vocab_map_build(text_vocab_map *m, char *const *tok, const int32_t *len, int32_t n,
                                        const uint8_t *use);
GPUCORE_HIDDEN int32_t text_vocab_find(const text_vocab_map *m, char *const *tok, const int32_t *len,
                                       const char *s, size_t n);
GPUCORE_HIDDEN int text_merge_map_init(text_merge_map *m, size_t n);
/* 1 added, 0 already present (the first rank wins), -1 out of memory */
GPUCORE_HIDDEN int text_merge_map_add(text_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t id);
GPUCORE_HIDDEN const text_merge_entry *text_merge_find(const text_merge_map *m, int32_t left, int32_t right);

typedef struct text_ids { int32_t *v; size_t n, cap; } text_ids;
GPUCORE_HIDDEN int text_ids_push(text_ids *ids, int32_t id);
/* Appends the ids of one pre-token (raw bytes s[0..len)): byte-level mapping, then the merges in rank
 * order. 0, or -1 out of memory. */
GPUCORE_HIDDEN int text_bpe_encode(const gpucore_tokenizer *t, const uint8_t *s, size_t len, text_ids *out);

/* ---- building a tokenizer (tokenizer.c) ---- */
/* A tokenizer with every table empty and the byte-level maps set; NULL out of memory. */
GPUCORE_HIDDEN gpucore_tokenizer *text_tokenizer_new(void);
/* After tok/tok_len/n_vocab and the added list are set: the maps and the merges' slot count.
 * in_model: per id, whether the model's vocabulary holds it (NULL: every id). op prefixes messages. */
GPUCORE_HIDDEN gpucore_status text_tokenizer_index(gpucore_tokenizer *t, size_t n_merges, const uint8_t *in_model,
                                                   const char *op);
/* Adds merge "left right" (two tokens) with its rank; a pair of unknown tokens is CORRUPT_FILE. */
GPUCORE_HIDDEN gpucore_status text_tokenizer_add_merge(gpucore_tokenizer *t, const char *left, size_t left_len,
                                                       const char *right, size_t right_len, int32_t rank,
                                                       const char *op);

#endif
