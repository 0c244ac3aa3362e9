/*
 * pretokenize.c — the pre-tokenizer steps of the byte-level BPE tokenizers we read: the split
 * patterns of GPT-2, Llama-3 and Qwen2 (SmolLM uses GPT-2's after a Digits step), recognised by
 * their exact pattern string and matched by hand-written code that follows the regex engine's
 * semantics (alternatives tried in order, the first that matches wins; greedy runs with the
 * backtracking the lookahead (?!\S) and \s*[\r\n]+ need), and the Digits step.
 */
#include <stdlib.h>
#include <string.h>
#include "text_internal.h"

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

int text_pre_pattern_kind(const char *pattern)
{
    if (!strcmp(pattern, GPT2_PATTERN)) return TEXT_PRE_GPT2;
    if (!strcmp(pattern, LLAMA3_PATTERN)) return TEXT_PRE_LLAMA3;
    if (!strcmp(pattern, QWEN2_PATTERN)) return TEXT_PRE_QWEN2;
    return -1;
}

int text_spans_push(text_spans *sp, size_t start, size_t end)
{
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 64;
        text_span *v = realloc(sp->v, cap * sizeof *v);
        if (!v) return -1;
        sp->v = v; sp->cap = cap;
    }
    sp->v[sp->n++] = (text_span){start, end};
    return 0;
}

enum { C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

static int cls(uint32_t cp)
{
    if (text_is_letter(cp)) return C_LETTER;
    if (text_is_number(cp)) return C_NUMBER;
    if (text_is_space(cp)) return C_SPACE;
    return C_OTHER;
}

/* End of the run of characters of class c starting at i. */
static size_t run(const uint8_t *s, size_t end, size_t i, int c)
{
    while (i < end) {
        size_t n;
        if (cls(text_utf8_at(s, end, i, &n)) != c) break;
        i += n;
    }
    return i;
}

/* 's 't 're 've 'm 'll 'd at i (s[i] is '\''); ci: case-insensitive. The end, or i. */
static size_t contraction(const uint8_t *s, size_t end, size_t i, int ci)
{
    if (i + 1 >= end) return i;
    uint8_t a = s[i + 1], b = i + 2 < end ? s[i + 2] : 0;
    if (ci) { a = (uint8_t)(a >= 'A' && a <= 'Z' ? a + 32 : a); b = (uint8_t)(b >= 'A' && b <= 'Z' ? b + 32 : b); }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
}

/* \s+(?!\S)|\s+ at i (a space character): the whole run at the end of the text or when it is one
 * character, else the run less its last character (which then starts the next piece). */
static size_t space_tail(const uint8_t *s, size_t end, size_t i)
{
    size_t last = i, j = i;
    while (j < end) {
        size_t n;
        if (!text_is_space(text_utf8_at(s, end, j, &n))) break;
        last = j;
        j += n;
    }
    if (j == end || last == i) return j;
    return last;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const uint8_t *s, size_t end, size_t i)
{
    size_t n;
    if (s[i] == '\'') {
        size_t e = contraction(s, end, i, 0);
        if (e > i) return e;
    }
    size_t j = s[i] == ' ' ? i + 1 : i;
    if (j < end) {
        int c = cls(text_utf8_at(s, end, j, &n));
        if (c != C_SPACE) return run(s, end, j, c);
    }
    return space_tail(s, end, i);
}

/* Llama-3 (digits 3) and Qwen2 (digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_llama3(const uint8_t *s, size_t end, size_t i, int digits)
{
    size_t n, n2;
    if (s[i] == '\'') {
        size_t e = contraction(s, end, i, 1);
        if (e > i) return e;
    }
    uint32_t c = text_utf8_at(s, end, i, &n);
    int k = cls(c);
    if (k == C_LETTER) return run(s, end, i, C_LETTER);
    if (k != C_NUMBER && c != '\r' && c != '\n' && i + n < end &&
        cls(text_utf8_at(s, end, i + n, &n2)) == C_LETTER)
        return run(s, end, i + n, C_LETTER);
    if (k == C_NUMBER) {
        size_t j = i + n;
        for (int d = 1; d < digits && j < end; d++) {
            if (cls(text_utf8_at(s, end, j, &n2)) != C_NUMBER) break;
            j += n2;
        }
        return j;
    }
    size_t j = c == ' ' ? i + n : i;
    if (j < end && cls(text_utf8_at(s, end, j, &n2)) == C_OTHER) {
        j = run(s, end, j, C_OTHER);
        while (j < end && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* \s*[\r\n]+: up to and including the run's last line break */
    size_t e = i, brk = 0;
    while (e < end) {
        uint32_t d = text_utf8_at(s, end, e, &n2);
        if (!text_is_space(d)) break;
        if (d == '\r' || d == '\n') brk = e + 1;
        e += n2;
    }
    if (brk) return brk;
    return space_tail(s, end, i);
}

static size_t match_digits(const uint8_t *s, size_t end, size_t i, int single)
{
    size_t n;
    if (!text_is_number(text_utf8_at(s, end, i, &n))) return i;
    return single ? i + n : run(s, end, i, C_NUMBER);
}

int text_pre_split(text_pre_kind kind, const uint8_t *s, const text_spans *in, text_spans *out)
{
    for (size_t p = 0; p < in->n; p++) {
        size_t i = in->v[p].start, end = in->v[p].end, gap = i;
        while (i < end) {
            size_t m;
            switch (kind) {
            case TEXT_PRE_GPT2: m = match_gpt2(s, end, i); break;
            case TEXT_PRE_LLAMA3: m = match_llama3(s, end, i, 3); break;
            case TEXT_PRE_QWEN2: m = match_llama3(s, end, i, 1); break;
            case TEXT_PRE_DIGITS_SINGLE: m = match_digits(s, end, i, 1); break;
            default: m = match_digits(s, end, i, 0); break;
            }
            if (m > i) {
                if (gap < i && text_spans_push(out, gap, i)) return -1;
                if (text_spans_push(out, i, m)) return -1;
                i = gap = m;
            } else {
                size_t n;
                text_utf8_at(s, end, i, &n);
                i += n;
            }
        }
        if (gap < end && text_spans_push(out, gap, end)) return -1;
    }
    return 0;
}
