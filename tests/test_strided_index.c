/*
 * test_strided_index.c — the kernels' division-free index math
 * (kernels/strided_index.h, view.h): the multiply-high divide against plain
 * division for every divisor up to 4096, powers of two and their neighbours up
 * to 2^32 / 2^63 and random divisors, each with edge numerators (0, d-1, d,
 * multiples +-1, 2^31, the type's maximum) and random ones; dim merging
 * (gpucore_views_coalesce) and the 32- and 64-bit offset functions against the
 * plain unravel (gpucore_strided_offset) on dense, permuted, sliced and
 * broadcast views; the narrow/wide choice at the int32 limit.
 */
#include <stdint.h>
#include "check.h"
#include "dtype_access.h"
#include "strided_index.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next64(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

static int bad32, bad64;

static void check_div32(uint32_t d)
{
    gpucore_fastdiv f = gpucore_fastdiv_make(d);
    uint32_t mult = UINT32_MAX / d * d;
    uint32_t ns[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, mult - 1, mult, mult + (d - 1),
                     0x7fffffffu, 0x80000000u, 0x80000001u, UINT32_MAX - 1, UINT32_MAX};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        if (gpucore_fastdiv32(ns[k], &f) != ns[k] / d) {
            if (bad32++ < 5) fprintf(stderr, "fastdiv32 %u / %u: %u, expected %u\n", ns[k], d, gpucore_fastdiv32(ns[k], &f), ns[k] / d);
        }
    for (int k = 0; k < 64; k++) {
        uint32_t n = (uint32_t)next64();
        if (k & 1) n %= (d < 65536 ? d * 977u : UINT32_MAX);
        if (gpucore_fastdiv32(n, &f) != n / d) bad32++;
        if (gpucore_fastdiv64(n, &f) != n / d) bad64++; /* the 64-bit divide of the same divisor */
    }
}

static void check_div64(uint64_t d)
{
    gpucore_fastdiv f = gpucore_fastdiv_make(d);
    uint64_t mult = UINT64_MAX / d * d;
    uint64_t ns[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, mult - 1, mult, mult + (d - 1),
                     (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, UINT32_MAX, (uint64_t)UINT32_MAX + 1,
                     UINT64_MAX - 1, UINT64_MAX};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        if (gpucore_fastdiv64(ns[k], &f) != ns[k] / d) {
            if (bad64++ < 5)
                fprintf(stderr, "fastdiv64 %llu / %llu: %llu\n", (unsigned long long)ns[k], (unsigned long long)d,
                        (unsigned long long)gpucore_fastdiv64(ns[k], &f));
        }
    for (int k = 0; k < 64; k++) {
        uint64_t n = next64() >> (k % 64);
        if (gpucore_fastdiv64(n, &f) != n / d) bad64++;
    }
}

static void test_fastdiv(void)
{
    for (uint32_t d = 2; d <= 4096; d++) check_div32(d);
    for (int s = 2; s <= 32; s++) {
        uint64_t p = (uint64_t)1 << s;
        for (int64_t e = -2; e <= 2; e++) {
            uint64_t d = p + (uint64_t)e;
            if (d >= 2 && d <= UINT32_MAX) check_div32((uint32_t)d);
        }
    }
    for (int k = 0; k < 4000; k++) {
        uint32_t d = (uint32_t)(next64() >> (32 + k % 31));
        if (d >= 2) check_div32(d);
    }
    for (int s = 1; s <= 63; s++) {
        uint64_t p = (uint64_t)1 << s;
        for (int64_t e = -2; e <= 2; e++) {
            uint64_t d = p + (uint64_t)e;
            if (d >= 2 && d <= (uint64_t)INT64_MAX) check_div64(d);
        }
    }
    for (int k = 0; k < 4000; k++) {
        uint64_t d = (next64() >> 1) >> (k % 62);
        if (d >= 2) check_div64(d);
    }
    check_div64((uint64_t)INT64_MAX);
    CHECK(bad32 == 0);
    CHECK(bad64 == 0);
}

/* A random view of shape (nd, shape) over a buffer: 0 dense, 1 permuted, 2 sliced with steps,
 * 3 broadcast (some dims stride 0), 4 a permuted slice. */
static gpucore_view make_view(int nd, const int64_t *shape, int kind)
{
    gpucore_view v;
    memset(&v, 0, sizeof v);
    v.ndim = nd;
    v.numel = 1;
    v.dtype = GPUCORE_KDT_F32;
    v.elem_size = 4;
    int perm[GPUCORE_VIEW_MAX_DIMS];
    for (int d = 0; d < nd; d++) { perm[d] = d; v.shape[d] = shape[d]; v.numel *= shape[d]; }
    if (kind == 1 || kind == 4)
        for (int d = nd - 1; d > 0; d--) {
            int j = (int)(next64() % (uint64_t)(d + 1)), t = perm[d];
            perm[d] = perm[j]; perm[j] = t;
        }
    int64_t st = 1;
    for (int k = nd - 1; k >= 0; k--) { /* perm[k]'s stride, innermost first in the permuted order */
        int d = perm[k];
        int64_t step = (kind == 2 || kind == 4) ? 1 + (int64_t)(next64() % 3) : 1;
        v.strides[d] = st * step;
        st *= shape[d] * step;
        if (kind == 3 && next64() % 3 == 0) v.strides[d] = 0;
    }
    int dense = 1;
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (v.shape[d] != 1 && v.strides[d] != expect) dense = 0;
        expect *= v.shape[d];
    }
    v.contiguous = dense;
    return v;
}

static void test_offsets(void)
{
    int wrong = 0, narrow_seen = 0, merged_seen = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int nd = 1 + (int)(next64() % GPUCORE_VIEW_MAX_DIMS), nv = 1 + trial % GPUCORE_INDEX_MAX_VIEWS;
        int64_t shape[GPUCORE_VIEW_MAX_DIMS];
        for (int d = 0; d < nd; d++) shape[d] = 1 + (int64_t)(next64() % (nd > 5 ? 3 : 6));
        gpucore_view v[GPUCORE_INDEX_MAX_VIEWS];
        const gpucore_view *vp[GPUCORE_INDEX_MAX_VIEWS];
        for (int k = 0; k < nv; k++) { v[k] = make_view(nd, shape, (int)(next64() % 5)); vp[k] = &v[k]; }
        gpucore_index_map map;
        gpucore_index_map_init(&map, vp, nv);
        narrow_seen += map.narrow;
        merged_seen += map.ndim < nd;
        for (int64_t i = 0; i < v[0].numel; i++) {
            int64_t o32[GPUCORE_INDEX_MAX_VIEWS], o64[GPUCORE_INDEX_MAX_VIEWS];
            gpucore_index_offsets32(&map, nv, i, o32);
            gpucore_index_offsets64(&map, nv, i, o64);
            for (int k = 0; k < nv; k++) {
                int64_t ref = gpucore_strided_offset(i, v[k].ndim, v[k].shape, v[k].strides);
                if (o32[k] != ref || o64[k] != ref) {
                    if (wrong++ < 5) fprintf(stderr, "trial %d view %d index %lld: %lld/%lld, expected %lld\n", trial, k,
                                             (long long)i, (long long)o32[k], (long long)o64[k], (long long)ref);
                }
            }
        }
        /* coalesced copies describe the same elements and keep `contiguous` exact */
        gpucore_view c[GPUCORE_INDEX_MAX_VIEWS];
        gpucore_view *cp[GPUCORE_INDEX_MAX_VIEWS];
        for (int k = 0; k < nv; k++) { c[k] = v[k]; cp[k] = &c[k]; }
        gpucore_views_coalesce(cp, nv);
        for (int k = 0; k < nv; k++) {
            if (c[k].contiguous != v[k].contiguous) wrong++;
            for (int64_t i = 0; i < v[0].numel; i++)
                if (gpucore_strided_offset(i, c[k].ndim, c[k].shape, c[k].strides) !=
                    gpucore_strided_offset(i, v[k].ndim, v[k].shape, v[k].strides)) wrong++;
        }
    }
    CHECK(wrong == 0);
    CHECK(narrow_seen == 3000);
    CHECK(merged_seen > 0);

    /* a dense [4,5,6] view merges to one dim; [2,3,4,5] with dims 0 and 1 swapped keeps
     * them and merges the two inner ones */
    int64_t s3[3] = {4, 5, 6}, s4[4] = {2, 3, 4, 5};
    gpucore_view d = make_view(3, s3, 0), t = make_view(4, s4, 0);
    t.shape[0] = 3; t.shape[1] = 2; t.strides[0] = 20; t.strides[1] = 60; t.contiguous = 0;
    gpucore_view *one[1] = {&d}, *tr[1] = {&t};
    gpucore_views_coalesce(one, 1);
    CHECK(d.ndim == 1 && d.shape[0] == 120 && d.strides[0] == 1 && d.contiguous);
    gpucore_views_coalesce(tr, 1);
    CHECK(t.ndim == 3 && t.shape[0] == 3 && t.strides[0] == 20 && t.shape[1] == 2 && t.strides[1] == 60 &&
          t.shape[2] == 20 && t.strides[2] == 1 && !t.contiguous);

    /* the narrow (32-bit) map only while every offset fits int32 */
    gpucore_view big = make_view(2, (int64_t[]){3, 7}, 0);
    const gpucore_view *bp[1] = {&big};
    gpucore_index_map map;
    big.strides[0] = INT32_MAX / 4;       /* max offset 2 * (2^29 - 1) + 6 fits */
    big.contiguous = 0;
    gpucore_index_map_init(&map, bp, 1);
    CHECK(map.narrow == 1);
    big.strides[0] = (int64_t)1 << 40;    /* wide: offsets up to 2^41 */
    gpucore_index_map_init(&map, bp, 1);
    CHECK(map.narrow == 0 && map.ndim == 2);
    int wide_wrong = 0;
    for (int64_t i = 0; i < 21; i++) {
        int64_t o;
        gpucore_index_offsets64(&map, 1, i, &o);
        if (o != (i / 7) * ((int64_t)1 << 40) + i % 7) wide_wrong++;
    }
    CHECK(wide_wrong == 0);
    /* more than INT32_MAX elements: wide, and the 64-bit unravel of indices past 2^32 */
    gpucore_view huge = make_view(3, (int64_t[]){3, 1 << 20, 1 << 12}, 0);
    huge.strides[0] = huge.strides[0] * 2; huge.contiguous = 0; /* keep 3 x (2^32) from merging fully */
    const gpucore_view *hp[1] = {&huge};
    gpucore_index_map_init(&map, hp, 1);
    CHECK(map.narrow == 0 && map.ndim == 2);
    for (int k = 0; k < 1000; k++) {
        int64_t i = (int64_t)(next64() % (uint64_t)huge.numel), o;
        gpucore_index_offsets64(&map, 1, i, &o);
        if (o != gpucore_strided_offset(i, 3, huge.shape, huge.strides)) wide_wrong++;
    }
    CHECK(wide_wrong == 0);
}

int main(void)
{
    test_fastdiv();
    test_offsets();
    return check_finish("test_strided_index");
}
