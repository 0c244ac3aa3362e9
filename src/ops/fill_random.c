/*
 * fill_random.c — the fill and random-fill front-ends: validate, convert the
 * fill value to the tensor's dtype once on the host, and dispatch.
 */
#include <math.h>
#include <string.h>
#include "core/internal.h"
#include "numeric.h"

static gpucore_status value_bits(double value, gpucore_dtype dtype, uint64_t *bits)
{
    float f = (float)value;
    *bits = 0;
    switch (dtype) {
    case GPUCORE_F32: memcpy(bits, &f, 4); return GPUCORE_OK;
    case GPUCORE_F64: memcpy(bits, &value, 8); return GPUCORE_OK;
    case GPUCORE_F16: *bits = gpucore_f32_to_f16(f); return GPUCORE_OK;
    case GPUCORE_BF16: *bits = gpucore_f32_to_bf16(f); return GPUCORE_OK;
    default: break;
    }
    double lo, hi;
    switch (dtype) {
    case GPUCORE_I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case GPUCORE_I64: lo = -9223372036854775808.0; hi = 9223372036854774784.0; break;
    case GPUCORE_U8: lo = 0; hi = 255; break;
    default:
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "fill: dtype %s cannot be filled (fp8 is for matmul operands)",
                                 gpucore_dtype_name(dtype));
    }
    if (!isfinite(value) || trunc(value) < lo || trunc(value) > hi)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "fill: %g does not fit in %s (range %.0f..%.0f)", value,
                                 gpucore_dtype_name(dtype), lo, hi);
    if (dtype == GPUCORE_I32) { int32_t v = (int32_t)value; memcpy(bits, &v, 4); }
    else if (dtype == GPUCORE_I64) { int64_t v = (int64_t)value; memcpy(bits, &v, 8); }
    else { uint8_t v = (uint8_t)value; memcpy(bits, &v, 1); }
    return GPUCORE_OK;
}

gpucore_status gpucore_fill(gpucore_tensor *t, double value, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(t, "fill", "t");
    if (st) return st;
    uint64_t bits;
    if ((st = value_bits(value, (gpucore_dtype)t->dtype, &bits))) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(t->ctx, stream, "fill", &s))) return st;
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    if (v.numel == 0) return GPUCORE_OK;
    void *prof = gpucore_prof_begin(t->ctx, s, "fill", gpucore_prof_bytes(t));
    st = t->ctx->be->fill(t->ctx->bctx, &v, bits, s->bstream);
    gpucore_prof_end(t->ctx, prof);
    return st;
}

uint64_t gpucore_random_offset_advance(int64_t numel, gpucore_distribution dist)
{
    if (numel <= 0) return 0;
    uint64_t per = dist == GPUCORE_NORMAL ? 2 : 4;
    return ((uint64_t)numel + per - 1) / per;
}

gpucore_status gpucore_random(gpucore_tensor *t, gpucore_distribution dist, double a, double b, uint64_t seed,
                              uint64_t offset, gpucore_stream *stream)
{
    gpucore_status st = gpucore_check_tensor(t, "random", "t");
    if (st) return st;
    if (t->dtype != GPUCORE_F32 && t->dtype != GPUCORE_F64 && t->dtype != GPUCORE_F16 && t->dtype != GPUCORE_BF16)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "random: dtype %s is not a floating type (f32, f64, f16, bf16)",
                                 gpucore_dtype_name((gpucore_dtype)t->dtype));
    if (dist != GPUCORE_UNIFORM && dist != GPUCORE_NORMAL)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "random: distribution %d is not UNIFORM (0) or NORMAL (1)",
                                 (int)dist);
    if (!isfinite(a) || !isfinite(b))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "random: parameters must be finite (got %g, %g)", a, b);
    if (dist == GPUCORE_NORMAL && b < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "random: the standard deviation is %g; it must be >= 0", b);
    if (dist == GPUCORE_UNIFORM && b < a)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "random: uniform bounds [%g, %g) are reversed", a, b);
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(t->ctx, stream, "random", &s))) return st;
    gpucore_view v;
    gpucore_tensor_view_of(t, &v);
    if (v.numel == 0) return GPUCORE_OK;
    void *prof = gpucore_prof_begin(t->ctx, s, "random", gpucore_prof_bytes(t));
    st = t->ctx->be->random(t->ctx->bctx, &v, (int)dist, a, b, seed, offset, s->bstream);
    gpucore_prof_end(t->ctx, prof);
    return st;
}
