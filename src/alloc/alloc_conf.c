/*
 * alloc_conf.c — the GPUCORE_ALLOC_CONF parser: "key:value,key:value".
 *
 * A separate, self-contained function so it can be fuzzed: it reads the string
 * byte by byte up to its terminator, never allocates, never calls strtod/strtol
 * (locale, errno and overflow surprises), and on any error leaves the caller's
 * settings untouched and says which part of the text is wrong.
 */
#include <string.h>
#include "caching_allocator.h"

#define KEYS "max_split_size_mb, caching, pinned_caching, limit"

void caching_allocator_conf_default(caching_allocator_conf *conf)
{
    memset(conf, 0, sizeof *conf);
    conf->max_split_size = INT64_MAX;
    conf->caching = 1;
    conf->pinned_caching = 1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Trim [*b, *e) of spaces. */
static void trim(const char **b, const char **e)
{
    while (*b < *e && is_space(**b)) (*b)++;
    while (*e > *b && is_space((*e)[-1])) (*e)--;
}

static int span_is(const char *b, const char *e, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(e - b) == n && !memcmp(b, word, n);
}

/* Case-insensitive span comparison for units. */
static int span_is_ci(const char *b, const char *e, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(e - b) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != word[i]) return 0;
    }
    return 1;
}

/* A decimal number "123" or "12.5" at [*b, e): integer part (<= 18 digits) and up to
 * 9 fraction digits, as value = ip + fp / 10^fd. Advances *b past it. */
static int parse_number(const char **b, const char *e, int64_t *ip, int64_t *fp, int *fd)
{
    const char *p = *b;
    int digits = 0;
    *ip = 0;
    *fp = 0;
    *fd = 0;
    while (p < e && is_digit(*p)) {
        if (++digits > 18) return -1;
        *ip = *ip * 10 + (*p - '0');
        p++;
    }
    if (p < e && *p == '.') {
        p++;
        while (p < e && is_digit(*p)) {
            if (++*fd > 9) return -1;
            *fp = *fp * 10 + (*p - '0');
            digits++;
            p++;
        }
        if (*fd == 0) return -1;
    }
    if (!digits) return -1;
    *b = p;
    return 0;
}

static int parse_flag(const char *b, const char *e, int *out)
{
    if (span_is(b, e, "0")) { *out = 0; return 0; }
    if (span_is(b, e, "1")) { *out = 1; return 0; }
    return -1;
}

/* limit: bytes with an optional unit, a fraction (0.8) or a percentage (80%). */
static int parse_limit(const char *b, const char *e, int64_t *bytes, double *fraction)
{
    int64_t ip, fp;
    int fd;
    if (parse_number(&b, e, &ip, &fp, &fd)) return -1;
    double pow10 = 1;
    for (int i = 0; i < fd; i++) pow10 *= 10;
    double value = (double)ip + (double)fp / pow10;
    while (b < e && is_space(*b)) b++;
    if (b == e) {
        if (fd == 0) { *bytes = ip; *fraction = 0; return 0; }
        if (value > 1.0) return -1;
        *bytes = 0;
        *fraction = value;
        return 0;
    }
    if (span_is(b, e, "%")) {
        if (value > 100.0) return -1;
        *bytes = 0;
        *fraction = value / 100.0;
        return 0;
    }
    static const struct { const char *unit; int64_t scale; } units[] = {
        {"b", 1},
        {"k", 1LL << 10}, {"kib", 1LL << 10}, {"kb", 1000LL},
        {"m", 1LL << 20}, {"mib", 1LL << 20}, {"mb", 1000000LL},
        {"g", 1LL << 30}, {"gib", 1LL << 30}, {"gb", 1000000000LL},
        {"t", 1LL << 40}, {"tib", 1LL << 40}, {"tb", 1000000000000LL},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!span_is_ci(b, e, units[i].unit)) continue;
        int64_t whole;
        if (__builtin_mul_overflow(ip, units[i].scale, &whole)) return -1;
        double part = (double)fp / pow10 * (double)units[i].scale;
        if ((double)whole + part > 9.0e18) return -1;
        *bytes = whole + (int64_t)part;
        *fraction = 0;
        return 0;
    }
    return -1;
}

gpucore_status caching_allocator_parse_conf(const char *text, caching_allocator_conf *conf)
{
    if (!text) return GPUCORE_OK;
    caching_allocator_conf c = *conf;
    const char *p = text;
    while (*p) {
        const char *entry = p;
        while (*p && *p != ',') p++;
        const char *end = p;
        if (*p == ',') p++;
        const char *kb = entry, *ke = end;
        trim(&kb, &ke);
        if (kb == ke) continue; /* empty entry: "a:1,,b:2" or a trailing comma */
        const char *colon = kb;
        while (colon < ke && *colon != ':') colon++;
        int shown = (int)(ke - kb) > 60 ? 60 : (int)(ke - kb);
        if (colon == ke)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "GPUCORE_ALLOC_CONF: '%.*s' is not key:value (keys: " KEYS ")", shown, kb);
        const char *vb = colon + 1, *ve = ke;
        ke = colon;
        trim(&kb, &ke);
        trim(&vb, &ve);
        int bad = 0;
        if (vb == ve) bad = 1;
        else if (span_is(kb, ke, "max_split_size_mb")) {
            int64_t ip, fp;
            int fd;
            const char *q = vb;
            if (parse_number(&q, ve, &ip, &fp, &fd) || q != ve || fd || ip > (INT64_MAX >> 21)) bad = 1;
            else {
                c.max_split_size = ip == 0 ? INT64_MAX : ip << 20;
                c.has_max_split = 1;
            }
        } else if (span_is(kb, ke, "caching")) {
            if (parse_flag(vb, ve, &c.caching)) bad = 1;
            else c.has_caching = 1;
        } else if (span_is(kb, ke, "pinned_caching")) {
            if (parse_flag(vb, ve, &c.pinned_caching)) bad = 1;
            else c.has_pinned_caching = 1;
        } else if (span_is(kb, ke, "limit")) {
            if (parse_limit(vb, ve, &c.limit_bytes, &c.limit_fraction)) bad = 1;
            else c.has_limit = 1;
        } else {
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "GPUCORE_ALLOC_CONF: unknown key '%.*s' (keys: " KEYS ")",
                                     (int)(ke - kb) > 60 ? 60 : (int)(ke - kb), kb);
        }
        if (bad)
            return gpucore_set_error(
                GPUCORE_ERR_INVALID_ARGUMENT,
                "GPUCORE_ALLOC_CONF: bad value in '%.*s' (max_split_size_mb: whole MiB, 0 for none; caching and "
                "pinned_caching: 0 or 1; limit: bytes with an optional unit like 512MiB or 8GiB, a fraction like "
                "0.8, or a percentage like 80%%)",
                shown, entry + (kb - entry));
    }
    *conf = c;
    return GPUCORE_OK;
}
