/*
 * optim.c — fused multi-tensor optimizers (SGD, AdamW) front-end: validate,
 * own the state tensors (moments, momentum buffers, f32 master weights, the
 * device-resident lr and step), and dispatch one backend op per step. Also the
 * tensor-list checks the training front-ends share (train_internal.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train_internal.h"
#include "numeric.h"

/* ---- shared checks ---- */

static int is_float_dtype(int dt) { return dt == GPUCORE_F32 || dt == GPUCORE_F16 || dt == GPUCORE_BF16; }

gpucore_status gpucore_check_float_list(gpucore_tensor *const *ts, int64_t count, gpucore_context **ctx,
                                        const char *op, const char *what)
{
    if (count < 0 || count > (int64_t)1 << 24)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s count is %lld; it must be 0..%d", op, what,
                                 (long long)count, 1 << 24);
    if (count > 0 && !ts) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the %s array is NULL", op, what);
    for (int64_t i = 0; i < count; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "%s[%lld]", what, (long long)i);
        gpucore_status st = gpucore_check_tensor(ts[i], op, arg);
        if (st) return st;
        const gpucore_tensor *t = ts[i];
        if (!*ctx) *ctx = t->ctx;
        if (t->ctx != *ctx)
            return gpucore_context_mismatch(op, arg, t->ctx, "the tensors before it", *ctx);
        if (!is_float_dtype(t->dtype))
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: %s is %s; it must be f32, f16 or bf16", op, arg,
                                     gpucore_dtype_name((gpucore_dtype)t->dtype));
        if (!gpucore_tensor_contiguous_unchecked(t))
            return gpucore_set_error(GPUCORE_ERR_NOT_CONTIGUOUS, "%s: %s is not contiguous; pass a contiguous tensor",
                                     op, arg);
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_check_scalar_tensor(const gpucore_tensor *t, gpucore_context *ctx, gpucore_dtype dtype,
                                           const char *op, const char *what)
{
    gpucore_status st = gpucore_check_tensor(t, op, what);
    if (st) return st;
    if (ctx && t->ctx != ctx) {
        char w[48];
        snprintf(w, sizeof w, "'%s'", what);
        return gpucore_context_mismatch(op, w, t->ctx, "the tensors", ctx);
    }
    if (t->dtype != (int32_t)dtype)
        return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: '%s' is %s; it must be %s", op, what,
                                 gpucore_dtype_name((gpucore_dtype)t->dtype), gpucore_dtype_name(dtype));
    if (gpucore_tensor_numel_unchecked(t) != 1)
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: '%s' has %lld elements; it must hold one", op, what,
                                 (long long)gpucore_tensor_numel_unchecked(t));
    return GPUCORE_OK;
}

gpucore_status gpucore_scalar_tensor_new(gpucore_context *ctx, gpucore_dtype dtype, double value, gpucore_tensor **out)
{
    gpucore_status st = gpucore_tensor_create(ctx, dtype, 0, NULL, out);
    if (st) return st;
    if ((st = gpucore_fill(*out, value, NULL))) {
        gpucore_tensor_destroy(*out);
        *out = NULL;
    }
    return st;
}

gpucore_status gpucore_check_optimizer(const gpucore_optimizer *opt, const char *op)
{
    if (!opt) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: optimizer is NULL", op);
    if (opt->magic != GPUCORE_MAGIC_OPTIMIZER)
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: not a live optimizer (destroyed already?)", op);
    if (gpucore_check_context(opt->ctx, op))
        return gpucore_set_error(GPUCORE_ERR_INVALID_HANDLE, "%s: the optimizer's context was destroyed", op);
    return GPUCORE_OK;
}

/* ---- configuration ---- */

gpucore_status gpucore_optimizer_config_default(gpucore_optimizer_kind kind, gpucore_optimizer_config *cfg)
{
    if (!cfg) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "optimizer_config_default: cfg is NULL");
    if (kind != GPUCORE_OPTIMIZER_SGD && kind != GPUCORE_OPTIMIZER_ADAMW)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "optimizer_config_default: kind %d is not SGD (0) or ADAMW (1)", (int)kind);
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->kind = kind;
    cfg->lr = 1e-3;
    cfg->weight_decay = kind == GPUCORE_OPTIMIZER_ADAMW ? 1e-2 : 0.0;
    cfg->beta1 = 0.9;
    cfg->beta2 = 0.999;
    cfg->eps = 1e-8;
    return GPUCORE_OK;
}

static gpucore_status check_config(const gpucore_optimizer_config *c)
{
    const char *op = "optimizer_create";
    if (c->struct_size < (int64_t)sizeof *c)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: cfg->struct_size is %lld; set it to sizeof(gpucore_optimizer_config) (%zu) "
                                 "or fill cfg with gpucore_optimizer_config_default",
                                 op, (long long)c->struct_size, sizeof *c);
    if (c->kind != GPUCORE_OPTIMIZER_SGD && c->kind != GPUCORE_OPTIMIZER_ADAMW)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: kind %d is not SGD (0) or ADAMW (1)", op, c->kind);
    if (!isfinite(c->lr) || c->lr < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: lr is %g; it must be finite and >= 0", op, c->lr);
    if (!isfinite(c->weight_decay) || c->weight_decay < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: weight_decay is %g; it must be finite and >= 0", op,
                                 c->weight_decay);
    if (c->kind == GPUCORE_OPTIMIZER_ADAMW) {
        if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: betas are (%g, %g); each must be in [0, 1)", op,
                                     c->beta1, c->beta2);
        if (!(c->eps > 0) || !isfinite(c->eps))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be > 0 and finite", op, c->eps);
    } else {
        if (!isfinite(c->momentum) || c->momentum < 0)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: momentum is %g; it must be finite and >= 0", op,
                                     c->momentum);
        if (!isfinite(c->dampening) || c->dampening < 0 || c->dampening > 1)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dampening is %g; it must be in [0, 1]", op,
                                     c->dampening);
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                     "%s: Nesterov momentum needs momentum > 0 and dampening 0 (got %g, %g)", op,
                                     c->momentum, c->dampening);
    }
    return GPUCORE_OK;
}

/* ---- lifetime ---- */

static void destroy_list(gpucore_tensor **ts, int64_t n)
{
    if (!ts) return;
    for (int64_t i = 0; i < n; i++)
        if (ts[i]) gpucore_tensor_destroy(ts[i]);
    free(ts);
}

static void optimizer_free(gpucore_optimizer *o)
{
    destroy_list(o->state0, o->count);
    destroy_list(o->state1, o->count);
    destroy_list(o->master, o->count);
    if (o->lr) gpucore_tensor_destroy(o->lr);
    if (o->step) gpucore_tensor_destroy(o->step);
    free(o->params);
    free(o->table);
    o->magic = GPUCORE_MAGIC_DEAD;
    free(o);
}

static gpucore_status zeros_like(const gpucore_tensor *p, gpucore_tensor **out)
{
    gpucore_status st = gpucore_tensor_create(p->ctx, GPUCORE_F32, p->ndim, p->shape, out);
    if (st) return st;
    return gpucore_fill(*out, 0.0, NULL);
}

/* f32 copy of a f16/bf16 parameter, converted on the host (creation only). */
static gpucore_status master_of(gpucore_tensor *p, gpucore_tensor **out)
{
    gpucore_status st = gpucore_tensor_create(p->ctx, GPUCORE_F32, p->ndim, p->shape, out);
    if (st) return st;
    int64_t n = gpucore_tensor_numel_unchecked(p);
    if (n == 0) return GPUCORE_OK;
    uint16_t *low = malloc((size_t)n * 2);
    float *f = malloc((size_t)n * 4);
    if (!low || !f) {
        free(low);
        free(f);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY,
                                 "optimizer_create: out of host memory staging a %lld-element master copy", (long long)n);
    }
    st = gpucore_copy_to_host(low, n * 2, p);
    if (!st) {
        for (int64_t i = 0; i < n; i++)
            f[i] = p->dtype == GPUCORE_F16 ? gpucore_f16_to_f32(low[i]) : gpucore_bf16_to_f32(low[i]);
        st = gpucore_copy_from_host(*out, f, n * 4);
    }
    free(low);
    free(f);
    return st;
}

static gpucore_status optimizer_create(gpucore_context *ctx, const gpucore_optimizer_config *cfg,
                                       gpucore_tensor *const *params, int64_t count, gpucore_optimizer **out)
{
    const char *op = "optimizer_create";
    if (!out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: out is NULL", op);
    *out = NULL;
    gpucore_status st = gpucore_check_context(ctx, op);
    if (st) return st;
    if (!cfg) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: cfg is NULL", op);
    if ((st = check_config(cfg))) return st;
    gpucore_context *pctx = ctx;
    if ((st = gpucore_check_float_list(params, count, &pctx, op, "params"))) return st;
    if (!ctx->be->optim_step)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: the %s backend has no fused optimizer", op,
                                 ctx->be->name);
    for (int64_t i = 0; i < count; i++)
        for (int64_t j = 0; j < i; j++)
            if (params[i]->storage == params[j]->storage && gpucore_tensor_numel_unchecked(params[i]) > 0)
                return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                         "%s: params[%lld] and params[%lld] share memory; each parameter must be "
                                         "its own tensor",
                                         op, (long long)j, (long long)i);

    gpucore_optimizer *o = calloc(1, sizeof *o);
    if (!o) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    o->magic = GPUCORE_MAGIC_OPTIMIZER;
    o->ctx = ctx;
    o->cfg = *cfg;
    o->cfg.struct_size = sizeof o->cfg;
    o->count = count;
    size_t n = (size_t)(count ? count : 1);
    o->params = calloc(n, sizeof *o->params);
    o->state0 = calloc(n, sizeof *o->state0);
    o->state1 = calloc(n, sizeof *o->state1);
    o->master = calloc(n, sizeof *o->master);
    o->table = calloc(n, sizeof *o->table);
    if (!o->params || !o->state0 || !o->state1 || !o->master || !o->table) {
        optimizer_free(o);
        return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory for %lld parameters", op,
                                 (long long)count);
    }
    const int adamw = cfg->kind == GPUCORE_OPTIMIZER_ADAMW;
    for (int64_t i = 0; i < count && !st; i++) {
        gpucore_tensor *p = params[i];
        o->params[i] = p;
        if (adamw || cfg->momentum > 0) st = zeros_like(p, &o->state0[i]);
        if (!st && adamw) st = zeros_like(p, &o->state1[i]);
        if (!st && p->dtype != GPUCORE_F32) st = master_of(p, &o->master[i]);
    }
    if (!st) st = gpucore_scalar_tensor_new(ctx, GPUCORE_F32, cfg->lr, &o->lr);
    if (!st) st = gpucore_scalar_tensor_new(ctx, GPUCORE_F32, 0.0, &o->step);
    /* the state is ready for a step on any stream */
    if (!st) st = gpucore_context_synchronize(ctx);
    if (st) {
        optimizer_free(o);
        return st;
    }
    *out = o;
    return GPUCORE_OK;
}

/* The optimizer's state (moments, masters, lr, step) is tagged as such in the allocator's books. */
gpucore_status gpucore_optimizer_create(gpucore_context *ctx, const gpucore_optimizer_config *cfg,
                                        gpucore_tensor *const *params, int64_t count, gpucore_optimizer **out)
{
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_OPTIMIZER);
    gpucore_status st = optimizer_create(ctx, cfg, params, count, out);
    caching_allocator_tag_set(tag);
    return st;
}

gpucore_status gpucore_optimizer_destroy(gpucore_optimizer *opt)
{
    if (!opt) return GPUCORE_OK;
    gpucore_status st = gpucore_check_optimizer(opt, "optimizer_destroy");
    if (st) return st;
    optimizer_free(opt);
    return GPUCORE_OK;
}

/* ---- the step ---- */

gpucore_status gpucore_optimizer_step(gpucore_optimizer *opt, gpucore_tensor *const *grads, int64_t count,
                                      const gpucore_tensor *found_inf, gpucore_stream *stream)
{
    const char *op = "optimizer_step";
    gpucore_status st = gpucore_check_optimizer(opt, op);
    if (st) return st;
    if (count != opt->count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: %lld gradients given but the optimizer has %lld parameters", op,
                                 (long long)count, (long long)opt->count);
    gpucore_context *ctx = opt->ctx;
    if ((st = gpucore_check_float_list(grads, count, &ctx, op, "grads"))) return st;
    if (found_inf && (st = gpucore_check_scalar_tensor(found_inf, ctx, GPUCORE_F32, op, "found_inf"))) return st;
    gpucore_stream *s;
    if ((st = gpucore_resolve_stream(ctx, stream, op, &s))) return st;

    int64_t used = 0;
    for (int64_t i = 0; i < count; i++) {
        gpucore_tensor *p = opt->params[i], *g = grads[i];
        char arg[48];
        snprintf(arg, sizeof arg, "params[%lld]", (long long)i);
        if ((st = gpucore_check_tensor(p, op, arg)))
            return gpucore_set_error(st, "%s: parameter %lld was destroyed while the optimizer still uses it", op,
                                     (long long)i);
        int same_shape = p->ndim == g->ndim;
        for (int d = 0; same_shape && d < p->ndim; d++) same_shape = p->shape[d] == g->shape[d];
        if (!same_shape) {
            char a[128], b[128];
            return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: grads[%lld] is %s but its parameter is %s", op,
                                     (long long)i, gpucore_shape_str(g->ndim, g->shape, a, sizeof a),
                                     gpucore_shape_str(p->ndim, p->shape, b, sizeof b));
        }
        if (g->dtype != p->dtype && g->dtype != GPUCORE_F32)
            return gpucore_set_error(GPUCORE_ERR_DTYPE_MISMATCH, "%s: grads[%lld] is %s; it must be %s (the parameter's) or f32",
                                     op, (long long)i, gpucore_dtype_name((gpucore_dtype)g->dtype),
                                     gpucore_dtype_name((gpucore_dtype)p->dtype));
        if (g->storage == p->storage)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: grads[%lld] shares memory with its parameter", op,
                                     (long long)i);
        gpucore_view pv, gv;
        gpucore_tensor_view_of(p, &pv);
        if (pv.numel == 0) continue;
        gpucore_tensor_view_of(g, &gv);
        gpucore_optim_tensor *t = &opt->table[used++];
        t->param = pv.data;
        t->grad = gv.data;
        t->numel = pv.numel;
        t->param_dtype = p->dtype;
        t->grad_dtype = g->dtype;
        t->master = NULL;
        t->state0 = t->state1 = NULL;
        void *d;
        if (opt->master[i]) { gpucore_tensor_data(opt->master[i], &d); t->master = d; }
        if (opt->state0[i]) { gpucore_tensor_data(opt->state0[i], &d); t->state0 = d; }
        if (opt->state1[i]) { gpucore_tensor_data(opt->state1[i], &d); t->state1 = d; }
    }
    gpucore_optim_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.kind = opt->cfg.kind == GPUCORE_OPTIMIZER_ADAMW ? GPUCORE_OPTIM_KIND_ADAMW : GPUCORE_OPTIM_KIND_SGD;
    hp.nesterov = opt->cfg.nesterov != 0;
    hp.beta1 = (float)opt->cfg.beta1;
    hp.beta2 = (float)opt->cfg.beta2;
    hp.eps = (float)opt->cfg.eps;
    hp.weight_decay = (float)opt->cfg.weight_decay;
    hp.momentum = (float)opt->cfg.momentum;
    hp.dampening = (float)opt->cfg.dampening;
    void *d;
    gpucore_tensor_data(opt->lr, &d);
    hp.lr = d;
    gpucore_tensor_data(opt->step, &d);
    hp.step = d;
    if (found_inf) {
        gpucore_tensor_data(found_inf, &d);
        hp.found_inf = d;
    }
    /* The step counter advances even when every parameter is empty, so the backend always runs. */
    int64_t prof_bytes = 0; /* param read+write, grad read, and the f32 state/master read+write */
    for (int64_t i = 0; i < used; i++)
        prof_bytes += opt->table[i].numel * (2 * gpucore_dtype_size((gpucore_dtype)opt->table[i].param_dtype) +
                                             gpucore_dtype_size((gpucore_dtype)opt->table[i].grad_dtype) +
                                             8 * ((opt->table[i].master != NULL) + (opt->table[i].state0 != NULL) +
                                                  (opt->table[i].state1 != NULL)));
    void *prof = gpucore_prof_begin(ctx, s, "optimizer_step", prof_bytes);
    st = ctx->be->optim_step(ctx->bctx, &hp, opt->table, used, s->bstream);
    gpucore_prof_end(ctx, prof);
    return st;
}

/* ---- accessors ---- */

gpucore_status gpucore_optimizer_lr(gpucore_optimizer *opt, gpucore_tensor **lr)
{
    gpucore_status st = gpucore_check_optimizer(opt, "optimizer_lr");
    if (st) return st;
    if (!lr) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "optimizer_lr: out is NULL");
    *lr = opt->lr;
    return GPUCORE_OK;
}

gpucore_status gpucore_optimizer_step_count(gpucore_optimizer *opt, gpucore_tensor **step)
{
    gpucore_status st = gpucore_check_optimizer(opt, "optimizer_step_count");
    if (st) return st;
    if (!step) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "optimizer_step_count: out is NULL");
    *step = opt->step;
    return GPUCORE_OK;
}

int64_t gpucore_optimizer_param_count(const gpucore_optimizer *opt)
{
    if (gpucore_check_optimizer(opt, "optimizer_param_count")) return -1;
    return opt->count;
}

gpucore_status gpucore_optimizer_state(gpucore_optimizer *opt, int64_t index, const char *name, gpucore_tensor **out)
{
    const char *op = "optimizer_state";
    gpucore_status st = gpucore_check_optimizer(opt, op);
    if (st) return st;
    if (!name || !out) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: name or out is NULL", op);
    *out = NULL;
    if (index < 0 || index >= opt->count)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: index %lld is outside 0..%lld", op,
                                 (long long)index, (long long)opt->count - 1);
    const int adamw = opt->cfg.kind == GPUCORE_OPTIMIZER_ADAMW;
    gpucore_tensor *t = NULL;
    if (!strcmp(name, "exp_avg") && adamw) t = opt->state0[index];
    else if (!strcmp(name, "exp_avg_sq") && adamw) t = opt->state1[index];
    else if (!strcmp(name, "momentum_buffer") && !adamw) t = opt->state0[index];
    else if (!strcmp(name, "master")) t = opt->master[index];
    if (!t)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                 "%s: parameter %lld has no state \"%s\" (%s: %s)", op, (long long)index, name,
                                 adamw ? "AdamW" : "SGD",
                                 adamw ? "exp_avg, exp_avg_sq, and master for f16/bf16 parameters"
                                       : "momentum_buffer when momentum > 0, and master for f16/bf16 parameters");
    *out = t;
    return GPUCORE_OK;
}
