/* cuda_fp16.h for the SIMT test build: __half / __nv_bfloat16 and their conversions are in simt_math.h. */
#ifndef GPUCORE_SIMT_CUDA_FP16_SHIM_H
#define GPUCORE_SIMT_CUDA_FP16_SHIM_H
#include "simt.h"
#endif
