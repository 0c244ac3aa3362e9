/*
 * unicode.c — UTF-8 decoding and validation, and the Unicode classes the pre-tokenizer patterns
 * use (\p{L}, \p{N}, \s) looked up in the generated range table (unicode_table.h, made by
 * tools/gen_unicode_table.py); nothing is needed at run time.
 */
#include "text_internal.h"
#include "unicode_table.h"

uint32_t text_utf8_at(const uint8_t *s, size_t end, size_t i, size_t *n)
{
    uint8_t c = s[i];
    size_t len = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len > end - i) len = 1; /* a sequence cut by the end (a token string's bytes): the byte alone */
    if (len == 1) { *n = 1; return c; }
    if (len == 2) { *n = 2; return ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F); }
    if (len == 3) {
        *n = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    *n = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) | ((uint32_t)(s[i + 2] & 0x3F) << 6) |
           (s[i + 3] & 0x3F);
}

size_t text_utf8_invalid_at(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c < 0xE0) { n = 2; min = 0x80; }
        else if (c >= 0xE0 && c < 0xF0) { n = 3; min = 0x800; }
        else if (c >= 0xF0 && c < 0xF5) { n = 4; min = 0x10000; }
        else return i;
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        size_t got;
        uint32_t cp = text_utf8_at(s, len, i, &got);
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += n;
    }
    return len;
}

size_t text_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

int text_is_letter(uint32_t cp)
{
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return in_ranges(uc_letter, UC_LETTER_COUNT, cp);
}

int text_is_number(uint32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(uc_number, UC_NUMBER_COUNT, cp);
}

int text_is_space(uint32_t cp) { return in_ranges(uc_space, UC_SPACE_COUNT, cp); }

int text_is_word(uint32_t cp) { return in_ranges(uc_word, UC_WORD_COUNT, cp); }

int text_is_nfc_unsafe(uint32_t cp) { return cp >= 0x80 && in_ranges(uc_nfc_unsafe, UC_NFC_UNSAFE_COUNT, cp); }
