/*
 * optim_math.h — the training primitives' shared pieces: the descriptors the
 * API layer hands to backends for multi-tensor ops (optimizer step, loss-scale
 * unscale, gradient-norm clipping), and the per-element AdamW / SGD updates as
 * GPUCORE_HD functions, so the CPU backend and the CUDA kernels compute the same
 * formula from one source.
 *
 * Device scalars (lr, step, found_inf, loss scale) are pointers into device
 * memory: a training step reads them on the device and never waits for the host.
 */
#ifndef GPUCORE_KERNELS_OPTIM_MATH_H
#define GPUCORE_KERNELS_OPTIM_MATH_H

#include <math.h>
#include <stdint.h>
#include "hd.h"
#include "dtype_access.h"

enum { GPUCORE_OPTIM_KIND_SGD = 0, GPUCORE_OPTIM_KIND_ADAMW = 1 };

/* One parameter tensor of a fused optimizer step (contiguous buffers). */
typedef struct gpucore_optim_tensor {
    void *param;          /* dtype param_dtype (f32, f16, bf16) */
    float *master;        /* f32 master copy, or NULL when param is f32 */
    const void *grad;     /* dtype grad_dtype (param's dtype or f32) */
    float *state0;        /* AdamW exp_avg; SGD momentum buffer (NULL: no momentum) */
    float *state1;        /* AdamW exp_avg_sq; NULL for SGD */
    int64_t numel;
    int32_t param_dtype, grad_dtype;
} gpucore_optim_tensor;

/* Hyperparameters and device scalars of one step. */
typedef struct gpucore_optim_hparams {
    int32_t kind;          /* GPUCORE_OPTIM_KIND_* */
    int32_t nesterov;
    float beta1, beta2, eps;
    float weight_decay;    /* AdamW: decoupled; SGD: L2 added to the gradient */
    float momentum, dampening;
    const float *lr;       /* device scalar */
    float *step;           /* device scalar: the step op adds 1 unless found_inf != 0 */
    const float *found_inf;/* device scalar or NULL: when != 0 the whole step is a no-op */
} gpucore_optim_hparams;

/* One tensor of a simple multi-tensor op (unscale, clip). */
typedef struct gpucore_mt_tensor {
    void *data;
    int64_t numel;
    int32_t dtype;         /* f32, f16, bf16 */
    int32_t pad_;
} gpucore_mt_tensor;

/* Multi-tensor ops work in fixed chunks: chunk c of tensor t covers elements
 * [c*CHUNK, (c+1)*CHUNK). The clipping norm sums each chunk to one partial and
 * then the partials in chunk order, so the result does not depend on the grid,
 * the thread count or the backend's scheduling. */
#define GPUCORE_MT_CHUNK 16384

GPUCORE_HD int64_t gpucore_mt_chunks(int64_t numel) { return (numel + GPUCORE_MT_CHUNK - 1) / GPUCORE_MT_CHUNK; }

/* Per-step scalars derived once from the device scalars. */
typedef struct gpucore_optim_scalars {
    float lr;
    float bias_correction1;      /* 1 - beta1^step */
    float bias_correction2_sqrt; /* sqrt(1 - beta2^step) */
    int first_step;              /* step == 1: SGD's momentum buffer starts as the gradient */
} gpucore_optim_scalars;

GPUCORE_HD gpucore_optim_scalars gpucore_optim_scalars_make(const gpucore_optim_hparams *hp, float lr, float step)
{
    gpucore_optim_scalars s;
    s.lr = lr;
    /* pow in double: bias correction is exact to f32 rounding on both backends */
    s.bias_correction1 = (float)(1.0 - pow((double)hp->beta1, (double)step));
    s.bias_correction2_sqrt = (float)sqrt(1.0 - pow((double)hp->beta2, (double)step));
    s.first_step = step <= 1.0f;
    return s;
}

/* AdamW (Loshchilov & Hutter), PyTorch's formula:
 *   p -= lr*wd*p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)                       */
GPUCORE_HD float gpucore_adamw_update(float p, float g, float *m, float *v, const gpucore_optim_hparams *hp,
                                      const gpucore_optim_scalars *s)
{
    p = p - s->lr * hp->weight_decay * p;
    float mn = hp->beta1 * *m + (1.0f - hp->beta1) * g;
    float vn = hp->beta2 * *v + (1.0f - hp->beta2) * g * g;
    *m = mn;
    *v = vn;
    float denom = sqrtf(vn) / s->bias_correction2_sqrt + hp->eps;
    return p - (s->lr / s->bias_correction1) * (mn / denom);
}

/* SGD with momentum, dampening, Nesterov and L2 weight decay (PyTorch's formula;
 * the momentum buffer starts as the first gradient). buf is NULL without momentum. */
GPUCORE_HD float gpucore_sgd_update(float p, float g, float *buf, const gpucore_optim_hparams *hp,
                                    const gpucore_optim_scalars *s)
{
    g = g + hp->weight_decay * p;
    if (buf) {
        float b = s->first_step ? g : hp->momentum * *buf + (1.0f - hp->dampening) * g;
        *buf = b;
        g = hp->nesterov ? g + hp->momentum * b : b;
    }
    return p - s->lr * g;
}

/* Update element i of one tensor (master weights kept in f32, the low-precision
 * parameter written from them rounded to nearest even). */
GPUCORE_HD void gpucore_optim_element(const gpucore_optim_tensor *t, int64_t i, const gpucore_optim_hparams *hp,
                                      const gpucore_optim_scalars *s)
{
    float g = t->grad_dtype == GPUCORE_KDT_F32 ? ((const float *)t->grad)[i]
                                               : gpucore_load_as_f32((const uint16_t *)t->grad + i, t->grad_dtype);
    float p;
    if (t->master) p = t->master[i];
    else p = ((float *)t->param)[i];
    if (hp->kind == GPUCORE_OPTIM_KIND_ADAMW) p = gpucore_adamw_update(p, g, t->state0 + i, t->state1 + i, hp, s);
    else p = gpucore_sgd_update(p, g, t->state0 ? t->state0 + i : (float *)0, hp, s);
    if (t->master) {
        t->master[i] = p;
        gpucore_store_from_f32((uint16_t *)t->param + i, t->param_dtype, p);
    } else {
        ((float *)t->param)[i] = p;
    }
}

/* Loss-scale unscale of one element: g *= inv_scale; returns 1 if g was not finite. */
GPUCORE_HD int gpucore_unscale_element(void *data, int dtype, int64_t i, float inv_scale)
{
    void *p = dtype == GPUCORE_KDT_F32 ? (void *)((float *)data + i) : (void *)((uint16_t *)data + i);
    float g = gpucore_load_as_f32(p, dtype);
    int bad = !isfinite(g);
    gpucore_store_from_f32(p, dtype, g * inv_scale);
    return bad;
}

/* Scale-state update after an unscale (torch.amp's rule). */
GPUCORE_HD void gpucore_loss_scale_update(float *scale, int32_t *growth_tracker, const float *found_inf, float growth,
                                          float backoff, int32_t interval)
{
    if (*found_inf != 0.0f) {
        *scale = *scale * backoff;
        *growth_tracker = 0;
    } else {
        int32_t n = *growth_tracker + 1;
        if (n >= interval) {
            float grown = *scale * growth;
            if (isfinite(grown)) *scale = grown; /* never grow into Inf */
            n = 0;
        }
        *growth_tracker = n;
    }
}

/* Clip coefficient from the global norm (torch.nn.utils.clip_grad_norm_). */
GPUCORE_HD float gpucore_clip_coef(float total_norm, float max_norm)
{
    float c = max_norm / (total_norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

#endif
