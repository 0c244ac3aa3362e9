/*
 * bpe.c — the byte-level BPE model: the vocabulary map (token string -> id) and the merge map
 * ((left id, right id) -> rank and merged id), open-addressing hash tables, and the merge loop of
 * Hugging Face's BPE (a min-heap of candidate pairs by rank, then position, over a linked list of
 * symbols: O(n log n) in the piece's length).
 */
#include <stdlib.h>
#include <string.h>
#include "text_internal.h"

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
    return k;
}

static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n + 1) s *= 2;
    return s;
}

int text_vocab_map_build(text_vocab_map *m, char *const *tok, const int32_t *len, int32_t n, const uint8_t *use)
{
    size_t count = 0;
    for (int32_t i = 0; i < n; i++) count += tok[i] && (!use || use[i]);
    size_t size = table_size(count);
    free(m->slot);
    m->slot = malloc(size * sizeof *m->slot);
    if (!m->slot) return -1;
    memset(m->slot, 0xff, size * sizeof *m->slot);
    m->mask = size - 1;
    for (int32_t i = 0; i < n; i++) {
        if (!tok[i] || (use && !use[i])) continue;
        size_t h = hash_bytes(tok[i], (size_t)len[i]) & m->mask;
        while (m->slot[h] >= 0) {
            int32_t o = m->slot[h];
            if (len[o] == len[i] && !memcmp(tok[o], tok[i], (size_t)len[i])) break; /* the first id wins */
            h = (h + 1) & m->mask;
        }
        if (m->slot[h] < 0) m->slot[h] = i;
    }
    return 0;
}

int32_t text_vocab_find(const text_vocab_map *m, char *const *tok, const int32_t *len, const char *s, size_t n)
{
    if (!m->slot) return -1;
    size_t h = hash_bytes(s, n) & m->mask;
    for (;;) {
        int32_t o = m->slot[h];
        if (o < 0) return -1;
        if ((size_t)len[o] == n && !memcmp(tok[o], s, n)) return o;
        h = (h + 1) & m->mask;
    }
}

int text_merge_map_init(text_merge_map *m, size_t n)
{
    size_t size = table_size(n);
    m->slot = malloc(size * sizeof *m->slot);
    if (!m->slot) return -1;
    for (size_t i = 0; i < size; i++) m->slot[i].key = UINT64_MAX;
    m->mask = size - 1;
    return 0;
}

static text_merge_entry *merge_slot(const text_merge_map *m, uint64_t key)
{
    size_t h = hash_pair(key) & m->mask;
    while (m->slot[h].key != UINT64_MAX && m->slot[h].key != key) h = (h + 1) & m->mask;
    return &m->slot[h];
}

int text_merge_map_add(text_merge_map *m, int32_t left, int32_t right, int32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    text_merge_entry *e = merge_slot(m, key);
    if (e->key == key) return 0;
    *e = (text_merge_entry){key, rank, id};
    return 1;
}

const text_merge_entry *text_merge_find(const text_merge_map *m, int32_t left, int32_t right)
{
    if (!m->slot) return NULL;
    const text_merge_entry *e = merge_slot(m, ((uint64_t)(uint32_t)left << 32) | (uint32_t)right);
    return e->key == UINT64_MAX ? NULL : e;
}

int text_ids_push(text_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 256;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return -1;
        ids->v = v; ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

/* ---- the merge loop ---- */
typedef struct cand { int32_t rank, pos, id; } cand;
typedef struct sym { int32_t id, prev, next, alive; } sym;

static int cand_less(cand a, cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(c, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        cand best = last;
        if (l < *n && cand_less(h[l], best)) { m = l; best = h[l]; }
        if (r < *n && cand_less(h[r], best)) { m = r; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static void push_pair(const gpucore_tokenizer *t, const sym *sy, int32_t pos, cand *h, size_t *nh)
{
    int32_t nx = sy[pos].next;
    if (nx < 0) return;
    const text_merge_entry *e = text_merge_find(&t->merges, sy[pos].id, sy[nx].id);
    if (e) heap_push(h, nh, (cand){e->rank, pos, e->id});
}

int text_bpe_encode(const gpucore_tokenizer *t, const uint8_t *s, size_t len, text_ids *out)
{
    if (len == 0) return 0;
    char stackbuf[512];
    char *mapped = len * 2 <= sizeof stackbuf ? stackbuf : malloc(len * 2);
    if (!mapped) return -1;
    size_t mlen = 0;
    for (size_t i = 0; i < len; i++) {
        const char *c = t->byte_char[s[i]];
        mapped[mlen++] = c[0];
        if (c[1]) mapped[mlen++] = c[1];
    }
    int rc = 0;
    if (t->ignore_merges) {
        int32_t id = text_vocab_find(&t->vocab, t->tok, t->tok_len, mapped, mlen);
        if (id >= 0) { rc = text_ids_push(out, id); goto done; }
    }
    sym *sy = malloc(len * sizeof *sy);
    cand *h = malloc((2 * len + 2) * sizeof *h); /* n-1 pairs, then at most one more per merge */
    if (!sy || !h) { free(sy); free(h); rc = -1; goto done; }
    int32_t ns = 0;
    for (size_t i = 0, k = 0; i < len; i++) {
        size_t clen = t->byte_char[s[i]][1] ? 2 : 1;
        int32_t id = text_vocab_find(&t->vocab, t->tok, t->tok_len, mapped + k, clen);
        k += clen;
        if (id < 0) id = t->unk_id;
        if (id < 0) continue; /* no unknown token: the character is dropped, as Hugging Face does */
        sy[ns] = (sym){id, ns - 1, -1, 1};
        if (ns > 0) sy[ns - 1].next = ns;
        ns++;
    }
    size_t nh = 0;
    for (int32_t p = 0; p < ns; p++) push_pair(t, sy, p, h, &nh);
    while (nh) {
        cand c = heap_pop(h, &nh);
        sym *a = &sy[c.pos];
        if (!a->alive || a->next < 0) continue;
        const text_merge_entry *e = text_merge_find(&t->merges, a->id, sy[a->next].id);
        if (!e || e->id != c.id) continue; /* a stale candidate: one side merged since */
        sym *b = &sy[a->next];
        a->id = c.id;
        b->alive = 0;
        a->next = b->next;
        if (b->next >= 0) sy[b->next].prev = c.pos;
        if (a->prev >= 0) push_pair(t, sy, a->prev, h, &nh);
        push_pair(t, sy, c.pos, h, &nh);
    }
    for (int32_t p = 0; p < ns && rc == 0; p = sy[p].next) {
        rc = text_ids_push(out, sy[p].id);
        if (sy[p].next < 0) break;
    }
    free(sy);
    free(h);
done:
    if (mapped != stackbuf) free(mapped);
    return rc;
}
