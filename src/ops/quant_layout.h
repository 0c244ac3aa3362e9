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

typedef gpucore_quant_layout quant_layout;
#define QUANT_NESTED_BLOCK GPUCORE_QUANT_NESTED_BLOCK

/* The layout of a [rows, cols] matrix; a status and message naming op when the arguments are
 * not valid for the format (no message when op is NULL). */
GPUCORE_HIDDEN gpucore_status quant_layout_make(int fmt, int64_t rows, int64_t cols, int64_t block_size, int flags,
                                                const char *op, quant_layout *L);
/* A quantized matrix's bytes tensor (arg of op): u8, contiguous, exactly L->total elements;
 * DTYPE_MISMATCH / SHAPE_MISMATCH / NOT_CONTIGUOUS with a message otherwise. */
GPUCORE_HIDDEN gpucore_status quant_check_bytes(const gpucore_tensor *q, const quant_layout *L, const char *op,
                                                const char *arg);
/* The format's name ("NF4", "Q4_K", ...). */
GPUCORE_HIDDEN const char *quant_format_name(int fmt);

#endif
