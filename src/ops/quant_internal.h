/*
 * quant_internal.h — host-side helpers of the quantized formats for the library's own readers
 * and loaders (GGUF files, quantized checkpoints): byte counts and a single-threaded
 * dequantization of host memory. The formats are gpucore_quant_format's values; the block
 * arithmetic is kernels/quant_formats.h's.
 */
#ifndef GPUCORE_QUANT_INTERNAL_H
#define GPUCORE_QUANT_INTERNAL_H

#include <stdint.h>
#include "gpucore.h"

#ifndef GPUCORE_HIDDEN
#define GPUCORE_HIDDEN __attribute__((visibility("hidden")))
#endif

/* Bytes of n_elems values of format (one row: NF4/FP4 in 64-value blocks without double
 * quantization, INT8_ROW one row with its scale). -1, with no error message set, when n_elems
 * is negative, not a multiple of the format's block, or format is unknown. */
GPUCORE_HIDDEN int64_t quant_row_bytes(int format, int64_t n_elems);

/* Dequantizes n_elems values (the layout of quant_row_bytes) from host memory blocks into
 * host f32 out, on the calling thread. INVALID_ARGUMENT with a message for an unknown format
 * or a size that is not whole blocks; NULL_POINTER for a NULL pointer. */
GPUCORE_HIDDEN gpucore_status quant_dequantize_host(int format, const void *blocks, int64_t n_elems, float *out);

#endif
