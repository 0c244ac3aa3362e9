/*
 * gpucore_config.h for the contract build of the CUDA backend module
 * (tests/cuda_contract): the build's own configuration, with CUDA, cuDNN and
 * NCCL switched on, since the stand-ins provide all three. Found before the
 * build root's gpucore_config.h by include order.
 */
#include_next "gpucore_config.h"
#undef GPUCORE_HAVE_CUDA
#define GPUCORE_HAVE_CUDA 1
#undef GPUCORE_HAVE_CUDNN
#define GPUCORE_HAVE_CUDNN 1
#undef GPUCORE_HAVE_NCCL
#define GPUCORE_HAVE_NCCL 1
