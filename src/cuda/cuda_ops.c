/*
 * cuda_ops.c — the CUDA backend's op entries: pick the device, call the
 * launcher in kernels/, and turn a launch error into a status.
 */
#include "cuda_internal.h"
#include "../../kernels/kernels.h"

static gpucore_status launched(int err, const char *kernel)
{
    if (!err) return GPUCORE_OK;
    return cuda_status((cudaError_t)err, kernel);
}

static gpucore_launch launch_on(void *bctx, void *s, gpucore_status *st)
{
    cuda_context *c = bctx;
    gpucore_launch l = {s, c->sm_count};
    cudaError_t err = cudaSetDevice(c->device);
    *st = err == cudaSuccess ? GPUCORE_OK : cuda_status(err, "cudaSetDevice");
    return l;
}

gpucore_status cuda_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s)
{
    gpucore_status st;
    gpucore_launch l = launch_on(bctx, s, &st);
    if (st) return st;
    return launched(gpucore_kernel_copy_strided(&l, dst, src), "copy_strided kernel launch");
}

gpucore_status cuda_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s)
{
    gpucore_status st;
    gpucore_launch l = launch_on(bctx, s, &st);
    if (st) return st;
    return launched(gpucore_kernel_fill(&l, dst, bits), "fill kernel launch");
}

gpucore_status cuda_random(void *bctx, const gpucore_view *dst, int dist, double a, double b, uint64_t seed,
                           uint64_t offset, void *s)
{
    gpucore_status st;
    gpucore_launch l = launch_on(bctx, s, &st);
    if (st) return st;
    gpucore_random_params rp = gpucore_random_params_make(dist, dst->dtype, a, b, seed, offset);
    return launched(gpucore_kernel_random(&l, dst, &rp), "random kernel launch");
}
