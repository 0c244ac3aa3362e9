/*
 * state_checkpoint.c — training-state checkpoints (gpucore_checkpoint_save/load):
 * one safetensors file that bundles the model tensors with the optimizer's state,
 * step and learning rate and the loss scaler's scale, its settings in the metadata.
 * Written and read through the public safetensors calls (src/io/safetensors.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train_internal.h"

#define CKPT_FORMAT "libgpucore.checkpoint.v1"

typedef struct ckpt_list {
    int64_t n, cap;
    char **names;          /* owned */
    gpucore_tensor **ts;
} ckpt_list;

static int ckpt_add(ckpt_list *l, const char *name, gpucore_tensor *t)
{
    if (l->n == l->cap) {
        int64_t cap = l->cap ? l->cap * 2 : 16;
        char **nn = realloc(l->names, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        l->names = nn;
        gpucore_tensor **nt = realloc(l->ts, (size_t)cap * sizeof *nt);
        if (!nt) return -1;
        l->ts = nt;
        l->cap = cap;
    }
    l->names[l->n] = strdup(name);
    if (!l->names[l->n]) return -1;
    l->ts[l->n++] = t;
    return 0;
}

static void ckpt_free(ckpt_list *l)
{
    for (int64_t i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->ts);
}

/* Everything a checkpoint holds besides the model tensors, named. */
static gpucore_status ckpt_collect(gpucore_optimizer *opt, gpucore_loss_scaler *sc, ckpt_list *l, const char *op)
{
    static const char *const states[] = {"exp_avg", "exp_avg_sq", "momentum_buffer", "master"};
    char name[96];
    int fail = 0;
    if (opt) {
        fail |= ckpt_add(l, "optimizer.step", opt->step) | ckpt_add(l, "optimizer.lr", opt->lr);
        for (int64_t i = 0; i < opt->count && !fail; i++)
            for (int k = 0; k < 4 && !fail; k++) {
                gpucore_tensor *t = NULL;
                if (gpucore_optimizer_state(opt, i, states[k], &t) != GPUCORE_OK) continue;
                snprintf(name, sizeof name, "optimizer.%lld.%s", (long long)i, states[k]);
                fail |= ckpt_add(l, name, t);
            }
        gpucore_clear_error();
    }
    if (sc && !fail)
        fail |= ckpt_add(l, "loss_scaler.scale", sc->scale) | ckpt_add(l, "loss_scaler.growth_tracker", sc->growth_tracker);
    return fail ? gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op) : GPUCORE_OK;
}

gpucore_status gpucore_checkpoint_save(const char *path, const char *const *names, gpucore_tensor *const *tensors,
                                       int64_t count, gpucore_optimizer *opt, gpucore_loss_scaler *scaler)
{
    const char *op = "checkpoint_save";
    gpucore_status st;
    if (opt && (st = gpucore_check_optimizer(opt, op))) return st;
    if (scaler && (st = gpucore_check_loss_scaler(scaler, op))) return st;
    if (count < 0 || (count > 0 && (!names || !tensors)))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: names/tensors are NULL or count is negative", op);
    ckpt_list l = {0};
    int fail = 0;
    for (int64_t i = 0; i < count && !fail; i++) fail = ckpt_add(&l, names[i] ? names[i] : "", tensors[i]);
    st = fail ? gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op) : ckpt_collect(opt, scaler, &l, op);
    char kind[16] = "none", pcount[32] = "0", cfg[512] = "", scfg[256] = "";
    if (opt) {
        snprintf(kind, sizeof kind, "%s", opt->cfg.kind == GPUCORE_OPTIMIZER_ADAMW ? "adamw" : "sgd");
        snprintf(pcount, sizeof pcount, "%lld", (long long)opt->count);
        snprintf(cfg, sizeof cfg,
                 "{\"weight_decay\": %.17g, \"momentum\": %.17g, \"dampening\": %.17g, \"nesterov\": %d, "
                 "\"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g}",
                 opt->cfg.weight_decay, opt->cfg.momentum, opt->cfg.dampening, opt->cfg.nesterov, opt->cfg.beta1,
                 opt->cfg.beta2, opt->cfg.eps);
    }
    if (scaler)
        snprintf(scfg, sizeof scfg, "{\"growth_factor\": %.17g, \"backoff_factor\": %.17g, \"growth_interval\": %lld}",
                 scaler->cfg.growth_factor, scaler->cfg.backoff_factor, (long long)scaler->cfg.growth_interval);
    const char *mk[] = {"format", "optimizer", "optimizer.param_count", "optimizer.config", "loss_scaler.config"};
    const char *mv[] = {CKPT_FORMAT, kind, pcount, cfg, scfg};
    if (!st)
        st = gpucore_safetensors_save(path, (const char *const *)l.names, l.ts, l.n, mk, mv, 5);
    ckpt_free(&l);
    return st;
}

gpucore_status gpucore_checkpoint_load(const char *path, const char *const *names, gpucore_tensor *const *tensors,
                                       int64_t count, gpucore_optimizer *opt, gpucore_loss_scaler *scaler)
{
    const char *op = "checkpoint_load";
    gpucore_status st;
    if (opt && (st = gpucore_check_optimizer(opt, op))) return st;
    if (scaler && (st = gpucore_check_loss_scaler(scaler, op))) return st;
    if (count < 0 || (count > 0 && (!names || !tensors)))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: names/tensors are NULL or count is negative", op);
    gpucore_safetensors *f = NULL;
    if ((st = gpucore_safetensors_open(path, &f))) return st;
    const char *format = gpucore_safetensors_metadata(f, "format");
    if (!format || strcmp(format, CKPT_FORMAT)) {
        /* The message quotes metadata owned by f: write it before closing f. */
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE,
                               "%s: \"%s\" is a safetensors file but not a libgpucore checkpoint (metadata format is "
                               "\"%s\", expected \"" CKPT_FORMAT "\"); read its tensors with gpucore_safetensors_open",
                               op, path, format ? format : "(absent)");
        gpucore_safetensors_close(f);
        return st;
    }
    if (opt) {
        const char *kind = gpucore_safetensors_metadata(f, "optimizer");
        const char *want = opt->cfg.kind == GPUCORE_OPTIMIZER_ADAMW ? "adamw" : "sgd";
        const char *pc = gpucore_safetensors_metadata(f, "optimizer.param_count");
        if (!kind || strcmp(kind, want) || !pc || strtoll(pc, NULL, 10) != opt->count) {
            st = gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT,
                                   "%s: the checkpoint's optimizer is %s over %s parameters but this one is %s over "
                                   "%lld", op, kind ? kind : "(none)", pc ? pc : "0", want, (long long)opt->count);
            gpucore_safetensors_close(f);
            return st;
        }
    }
    ckpt_list l = {0};
    int fail = 0;
    for (int64_t i = 0; i < count && !fail; i++) fail = ckpt_add(&l, names[i] ? names[i] : "", tensors[i]);
    st = fail ? gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op) : ckpt_collect(opt, scaler, &l, op);
    for (int64_t i = 0; i < l.n && !st; i++) st = gpucore_safetensors_read(f, l.names[i], l.ts[i]);
    ckpt_free(&l);
    gpucore_safetensors_close(f);
    return st;
}
