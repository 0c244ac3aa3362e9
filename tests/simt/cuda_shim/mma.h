/* mma.h for the SIMT test build: nvcuda::wmma (m16n16k16, f16/bf16 operands, f32 accumulators) is in simt_wmma.h. */
#ifndef GPUCORE_SIMT_MMA_SHIM_H
#define GPUCORE_SIMT_MMA_SHIM_H
#include "simt_wmma.h"
#endif
