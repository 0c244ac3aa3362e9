/*
 * simt_wmma.h — nvcuda::wmma (CUDA's warp matrix functions, <mma.h>) on the
 * SIMT layer, for the shapes libgpucore's kernels use: m16n16k16 with __half or
 * __nv_bfloat16 matrix_a/matrix_b fragments and float accumulators.
 *
 * As in CUDA, a fragment is spread over the 32 lanes of a warp and each lane
 * holds num_elements of it in x[]; which element of the 16x16 matrix a lane's
 * x[i] is stays unspecified. Here the mapping is deliberately scrambled
 * (element i of lane t is matrix index (37(8t+i)+11) mod 256, row-major), so a
 * kernel that assumes a layout gives wrong results here, while the documented
 * uses — the same operation on every x[i], and the *_sync calls — are exact.
 *
 * load/store/mma/fill are warp-wide, as CUDA requires: every one of the 32 lanes
 * must call them together (a __syncwarp checks it; a partial or diverged warp
 * is an execution error). load/store enforce the documented rules: a 256-bit
 * aligned pointer and an ldm that is a multiple of 16 bytes. mma_sync gathers
 * the warp's a and b fragments through per-warp slots (a block runs on one OS
 * thread at a time, so thread_local slots are per block) between two warp
 * barriers, and forms each of the lane's d elements as a float sum over k of
 * exact products (f16 x f16 and bf16 x bf16 are exact in f32) plus c.
 */
#ifndef GPUCORE_SIMT_WMMA_H
#define GPUCORE_SIMT_WMMA_H

#include "simt.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the SIMT layer's wmma has the m16n16k16 shape only");
    static_assert(std::is_same<Use, accumulator>::value
                      ? std::is_same<T, float>::value && std::is_void<Layout>::value
                      : (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) &&
                            (std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value),
                  "the SIMT layer's wmma has __half/__nv_bfloat16 a/b fragments (with a layout) and float "
                  "accumulators (without one)");
    enum { num_elements = 8 };
    T x[num_elements];
};

} // namespace wmma
} // namespace nvcuda

namespace simt {
namespace wmma_detail {

/* The matrix index (row * 16 + col) of element i of lane t's share. */
static inline int element(int lane, int i) { return ((lane * 8 + i) * 37 + 11) & 255; }

struct place {
    int warp, lane;
};
static inline place where()
{
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    return place{(int)(tid / 32), (int)(tid % 32)};
}

static inline void warp_wide(const char *what, const char *file, int line)
{
    (void)warp_collective(SYNCWARP, 0xffffffffu, 0, 0, 0, what, file, line);
}

static inline void check_memory(const void *p, unsigned ldm, size_t elem, const char *what, const char *file, int line)
{
    if ((uintptr_t)p % 32)
        fail(file, line, "%s: pointer %p is not 256-bit aligned (CUDA C++ Programming Guide, warp matrix functions)",
             what, p);
    if ((ldm * elem) % 16)
        fail(file, line, "%s: ldm %u is not a multiple of 16 bytes (%zu-byte elements; CUDA C++ Programming Guide, "
             "warp matrix functions)", what, ldm, elem);
}

template <typename T> static inline float to_float(T v) { return (float)v; }

/* Per-warp slots through which mma_sync reads the other lanes' a and b shares. */
static thread_local const void *slot_a[32][32], *slot_b[32][32];

} // namespace wmma_detail
} // namespace simt

namespace nvcuda {
namespace wmma {

template <typename Use, typename T, typename Layout>
static inline void simt_wmma_fill(fragment<Use, 16, 16, 16, T, Layout> &f, T v, const char *file, int line)
{
    simt::wmma_detail::warp_wide("wmma::fill_fragment", file, line);
    for (int i = 0; i < 8; i++) f.x[i] = v;
}
#define fill_fragment(f, v) simt_wmma_fill((f), (v), __FILE__, __LINE__)

/* matrix_a / matrix_b: the layout is the fragment's. Element (r, c) of the 16x16 matrix is
 * p[r * ldm + c] (row_major) or p[c * ldm + r] (col_major). */
template <typename Use, typename T, typename Layout>
static inline void simt_wmma_load(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm, const char *file,
                                  int line)
{
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout_t");
    simt::wmma_detail::warp_wide("wmma::load_matrix_sync", file, line);
    simt::wmma_detail::check_memory(p, ldm, sizeof(T), "wmma::load_matrix_sync", file, line);
    const int lane = simt::wmma_detail::where().lane;
    for (int i = 0; i < 8; i++) {
        const int e = simt::wmma_detail::element(lane, i), r = e / 16, c = e % 16;
        f.x[i] = std::is_same<Layout, row_major>::value ? p[r * ldm + c] : p[c * ldm + r];
    }
}
static inline void simt_wmma_load(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                                  layout_t l, const char *file, int line)
{
    simt::wmma_detail::warp_wide("wmma::load_matrix_sync", file, line);
    simt::wmma_detail::check_memory(p, ldm, sizeof(float), "wmma::load_matrix_sync", file, line);
    const int lane = simt::wmma_detail::where().lane;
    for (int i = 0; i < 8; i++) {
        const int e = simt::wmma_detail::element(lane, i), r = e / 16, c = e % 16;
        f.x[i] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
}
#define load_matrix_sync(f, ...) simt_wmma_load((f), __VA_ARGS__, __FILE__, __LINE__)

static inline void simt_wmma_store(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                   layout_t l, const char *file, int line)
{
    simt::wmma_detail::warp_wide("wmma::store_matrix_sync", file, line);
    simt::wmma_detail::check_memory(p, ldm, sizeof(float), "wmma::store_matrix_sync", file, line);
    const int lane = simt::wmma_detail::where().lane;
    for (int i = 0; i < 8; i++) {
        const int e = simt::wmma_detail::element(lane, i), r = e / 16, c = e % 16;
        (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[i];
    }
    simt::wmma_detail::warp_wide("wmma::store_matrix_sync", file, line);
}
#define store_matrix_sync(p, f, ldm, l) simt_wmma_store((p), (f), (ldm), (l), __FILE__, __LINE__)

/* d = a * b + c (d may be c). */
template <typename T, typename LA, typename LB>
static inline void simt_wmma_mma(fragment<accumulator, 16, 16, 16, float> &d,
                                 const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                                 const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                                 const fragment<accumulator, 16, 16, 16, float> &c, const char *file, int line)
{
    using namespace simt::wmma_detail;
    const place me = where();
    slot_a[me.warp][me.lane] = a.x;
    slot_b[me.warp][me.lane] = b.x;
    warp_wide("wmma::mma_sync", file, line); /* every lane's a and b are published */
    float A[256], B[256];
    for (int t = 0; t < 32; t++)
        for (int i = 0; i < 8; i++) {
            A[element(t, i)] = to_float(((const T *)slot_a[me.warp][t])[i]);
            B[element(t, i)] = to_float(((const T *)slot_b[me.warp][t])[i]);
        }
    warp_wide("wmma::mma_sync", file, line); /* no lane changes its a or b before every lane has read them */
    for (int i = 0; i < 8; i++) {
        const int e = element(me.lane, i), r = e / 16, col = e % 16;
        float s = 0.0f;
        for (int k = 0; k < 16; k++) s = fmaf(A[r * 16 + k], B[k * 16 + col], s);
        d.x[i] = s + c.x[i];
    }
}
#define mma_sync(d, a, b, c) simt_wmma_mma((d), (a), (b), (c), __FILE__, __LINE__)

} // namespace wmma
} // namespace nvcuda

#endif
