/*
 * nfc.c — Unicode Normalization Form C (UAX #15) for a tokenizer whose normalizer is NFC: each
 * code point fully decomposed (the canonical decompositions of the generated table, Hangul
 * syllables by arithmetic), marks put in canonical order (a stable sort by combining class between
 * starters), then composed again (a mark or starter joins the last starter unless a character
 * between them has a combining class of 0 or not lower than its own; primary composites only).
 * Text without a code point that NFC may change is copied as it is.
 */
#include <stdlib.h>
#include <string.h>
#include "text_internal.h"
#include "unicode_table.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21,
       T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

typedef struct cps { uint32_t *v; size_t n, cap; } cps;

static int cps_push(cps *c, uint32_t cp)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        uint32_t *v = realloc(c->v, cap * sizeof *v);
        if (!v) return -1;
        c->v = v, c->cap = cap;
    }
    c->v[c->n++] = cp;
    return 0;
}

static int ccc_of(uint32_t cp)
{
    size_t lo = 0, hi = UC_CCC_COUNT;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < uc_ccc[mid][0]) hi = mid;
        else if (cp > uc_ccc[mid][1]) lo = mid + 1;
        else return (int)uc_ccc[mid][2];
    }
    return 0;
}

static const uint32_t *decomp_of(uint32_t cp)
{
    size_t lo = 0, hi = UC_DECOMP_COUNT;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < uc_decomp[mid][0]) hi = mid;
        else if (cp > uc_decomp[mid][0]) lo = mid + 1;
        else return uc_decomp[mid];
    }
    return NULL;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = UC_COMPOSE_COUNT;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *r = uc_compose[mid];
        if (a < r[0] || (a == r[0] && b < r[1])) hi = mid;
        else if (a > r[0] || b > r[1]) lo = mid + 1;
        else return r[2];
    }
    return 0;
}

static int decompose(uint32_t cp, cps *out)
{
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        if (cps_push(out, L_BASE + s / N_COUNT) || cps_push(out, V_BASE + (s % N_COUNT) / T_COUNT)) return -1;
        return t ? cps_push(out, T_BASE + t) : 0;
    }
    const uint32_t *d = decomp_of(cp);
    if (!d) return cps_push(out, cp);
    if (decompose(d[1], out)) return -1;
    return d[2] ? decompose(d[2], out) : 0;
}

int text_nfc(const uint8_t *s, size_t len, uint8_t **out, size_t *out_len)
{
    size_t i = 0, k;
    while (i < len && !text_is_nfc_unsafe(text_utf8_at(s, len, i, &k))) i += k;
    if (i == len) { /* already NFC */
        if (!(*out = malloc(len + 1))) return -1;
        memcpy(*out, s, len);
        *out_len = len;
        return 0;
    }
    cps c = {0};
    int rc = 0;
    for (size_t j = 0; j < len && !rc; j += k) rc = decompose(text_utf8_at(s, len, j, &k), &c);
    for (size_t j = 1; j < c.n && !rc; j++) { /* canonical order: marks sorted stably by class */
        int cc = ccc_of(c.v[j]);
        for (size_t m = j; cc && m > 0 && ccc_of(c.v[m - 1]) > cc; m--) {
            uint32_t t = c.v[m]; c.v[m] = c.v[m - 1]; c.v[m - 1] = t;
        }
    }
    size_t w = 0, starter = 0;
    int have_starter = 0, last_cc = -1; /* the class of the last character kept after the starter, -1: none */
    for (size_t j = 0; j < c.n && !rc; j++) {
        uint32_t cp = c.v[j], comp;
        int cc = ccc_of(cp);
        if (have_starter && last_cc < cc && (comp = compose(c.v[starter], cp))) {
            c.v[starter] = comp;
            continue;
        }
        if (cc == 0) starter = w, have_starter = 1, last_cc = -1;
        else last_cc = cc;
        c.v[w++] = cp;
    }
    uint8_t *buf = rc ? NULL : malloc(w * 4 + 1);
    size_t n = 0;
    for (size_t j = 0; buf && j < w; j++) n += text_utf8_put(c.v[j], (char *)buf + n);
    free(c.v);
    if (!buf) return -1;
    *out = buf;
    *out_len = n;
    return 0;
}
