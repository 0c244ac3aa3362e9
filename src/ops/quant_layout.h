/*
 * quant_layout.h — where each part of a quantized matrix's bytes lies (the layouts documented
 * with gpucore_quant_format), shared by the quantize/dequantize front-end and the backends'
 * loops.
 */
#ifndef GPUCORE_QUANT_LAYOUT_H
#define GPUCORE_QUANT_LAYOUT_H

#include <stdint.h>
#include "gpucore.h"
#include "quant_formats.h"

#ifndef GPUCORE_HIDDEN
#define GPUCORE_HIDDEN __attribute__((visibility("hidden")))
#endif

/* Blocks of absmax values per nested f32 scale under double quantization (bitsandbytes'). */
#define QUANT_NESTED_BLOCK 256

typedef struct quant_layout {
    int fmt, flags;
    int64_t rows, cols, n;  /* the matrix and its values */
    int64_t block, nblocks; /* values per block (a row for INT8_ROW) and blocks */
    int64_t scale_off;      /* NF4/FP4: absmax (f32, or u8 codes when double); INT8_ROW: SCB */
    int64_t nested_off, nnested, offset_off; /* double quantization: f32 scales and the f32 offset */
    int64_t total;          /* bytes */
} quant_layout;

/* The layout of a [rows, cols] matrix; a status and message naming op when the arguments are
 * not valid for the format (no message when op is NULL). */
GPUCORE_HIDDEN gpucore_status quant_layout_make(int fmt, int64_t rows, int64_t cols, int64_t block_size, int flags,
                                                const char *op, quant_layout *L);
/* The format's name ("NF4", "Q4_K", ...). */
GPUCORE_HIDDEN const char *quant_format_name(int fmt);
/* Values begin..end-1 (flat, row-major) of the quantized bytes into out[0 .. end-begin). */
GPUCORE_HIDDEN void quant_dequantize_range(const quant_layout *L, const uint8_t *bytes, int64_t begin, int64_t end,
                                           float *out);

#endif
