/*
 * kernel_ops.c — vtable op entries for backends that run kernels/ launchers
 * (CUDA and cuda-emulated): get a launch descriptor from the module, call the
 * launcher, turn a launch error into a status. See kernel_ops.h.
 */
#include "kernel_ops.h"

#define LAUNCH_OR_RETURN(bctx, s, l)                          \
    gpucore_launch l;                                          \
    do {                                                       \
        gpucore_status launch_st_ = kops_launch_for(bctx, s, &l); \
        if (launch_st_) return launch_st_;                     \
    } while (0)

static gpucore_status launched(int err, const char *what) { return err ? kops_error(err, what) : GPUCORE_OK; }

gpucore_status kops_copy_strided(void *bctx, const gpucore_view *dst, const gpucore_view *src, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_copy_strided(&l, dst, src), "copy_strided kernel launch");
}

gpucore_status kops_fill(void *bctx, const gpucore_view *dst, uint64_t bits, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    return launched(gpucore_kernel_fill(&l, dst, bits), "fill kernel launch");
}

gpucore_status kops_random(void *bctx, const gpucore_view *dst, int dist, double a, double b, uint64_t seed,
                           uint64_t offset, void *s)
{
    LAUNCH_OR_RETURN(bctx, s, l);
    gpucore_random_params rp = gpucore_random_params_make(dist, dst->dtype, a, b, seed, offset);
    return launched(gpucore_kernel_random(&l, dst, &rp), "random kernel launch");
}
