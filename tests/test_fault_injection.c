/*
 * test_fault_injection.c — SQLite's habit applied to a training step: for every N,
 * make the Nth raw allocation (device segments and pinned host blocks together)
 * fail and run a representative step (two linear layers with a fused GELU,
 * cross-entropy, backward, gradient clipping, AdamW with a bf16 parameter and its
 * fp32 master copy, a pinned staging buffer). Each run must end with
 * GPUCORE_ERR_OUT_OF_MEMORY and a message (or succeed, when N is past the last
 * allocation), leak nothing (the allocator's statistics return to zero), and
 * leave the context usable (the same step then succeeds). Caching is off so that
 * every tensor is its own raw allocation, i.e. every allocation site is hit.
 */
#include <stdint.h>
#include "check.h"

#define STEP_TRY(call)                       \
    do {                                     \
        st = (call);                         \
        if (st) goto done;                   \
    } while (0)

/* One training step that cleans up after itself on every path. */
static gpucore_status train_step(gpucore_context *ctx)
{
    gpucore_status st = GPUCORE_OK;
    enum { B = 8, IN = 16, HID = 32, OUT = 4 };
    int64_t sx[2] = {B, IN}, sw1[2] = {HID, IN}, sb1[1] = {HID}, sh[2] = {B, HID}, sw2[2] = {OUT, HID},
            sb2[1] = {OUT}, sl[2] = {B, OUT}, st_[1] = {B}, se[1] = {64}, scalar[1] = {1};
    gpucore_tensor *x = NULL, *w1 = NULL, *b1 = NULL, *h = NULL, *aux = NULL, *w2 = NULL, *b2 = NULL, *logits = NULL,
                   *targets = NULL, *loss = NULL, *dloss = NULL, *dlogits = NULL, *dh = NULL, *dw1 = NULL,
                   *db1 = NULL, *dw2 = NULL, *db2 = NULL, *emb = NULL, *demb = NULL, *norm = NULL;
    gpucore_optimizer *opt = NULL;
    void *pinned = NULL;
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sx, &x));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sw1, &w1));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb1, &b1));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &h));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &aux));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sw2, &w2));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb2, &b2));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sl, &logits));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_I64, 1, st_, &targets));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 0, scalar, &loss));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 0, scalar, &dloss));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_BF16, 1, se, &emb));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_BF16, 1, se, &demb));
    STEP_TRY(gpucore_random(x, GPUCORE_NORMAL, 0, 1, 1, 0, NULL));
    STEP_TRY(gpucore_random(w1, GPUCORE_NORMAL, 0, 0.2, 2, 0, NULL));
    STEP_TRY(gpucore_random(w2, GPUCORE_NORMAL, 0, 0.2, 3, 0, NULL));
    STEP_TRY(gpucore_fill(b1, 0.0, NULL));
    STEP_TRY(gpucore_fill(b2, 0.0, NULL));
    STEP_TRY(gpucore_fill(targets, 2.0, NULL));
    STEP_TRY(gpucore_fill(dloss, 1.0, NULL));
    STEP_TRY(gpucore_random(emb, GPUCORE_UNIFORM, -1, 1, 4, 0, NULL));
    STEP_TRY(gpucore_fill(demb, 0.01, NULL));
    /* a pinned staging buffer, as a data loader would use */
    STEP_TRY(gpucore_host_alloc(ctx, 4096, NULL, &pinned));
    STEP_TRY(gpucore_copy_from_host(x, pinned, (int64_t)sizeof(float) * B * IN));
    STEP_TRY(gpucore_random(x, GPUCORE_NORMAL, 0, 1, 5, 0, NULL));

    /* forward */
    STEP_TRY(gpucore_linear_forward(x, w1, b1, GPUCORE_ACT_GELU_TANH, h, aux, NULL));
    STEP_TRY(gpucore_linear_forward(h, w2, b2, GPUCORE_ACT_NONE, logits, NULL, NULL));
    STEP_TRY(gpucore_cross_entropy(loss, logits, targets, -100, GPUCORE_LOSS_MEAN, NULL));
    /* backward */
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sl, &dlogits));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sh, &dh));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sw1, &dw1));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb1, &db1));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, sw2, &dw2));
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 1, sb2, &db2));
    STEP_TRY(gpucore_cross_entropy_backward(dlogits, dloss, logits, targets, -100, GPUCORE_LOSS_MEAN, NULL));
    STEP_TRY(gpucore_linear_backward(dlogits, h, w2, aux, dh, dw2, db2, NULL));
    STEP_TRY(gpucore_linear_backward(dh, x, w1, NULL, NULL, dw1, db1, NULL));
    /* clip and step */
    gpucore_tensor *grads[5] = {dw1, db1, dw2, db2, demb};
    gpucore_tensor *params[5] = {w1, b1, w2, b2, emb};
    STEP_TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 0, scalar, &norm));
    STEP_TRY(gpucore_clip_grad_norm(grads, 5, 1.0, norm, NULL, NULL));
    gpucore_optimizer_config cfg;
    STEP_TRY(gpucore_optimizer_config_default(GPUCORE_OPTIMIZER_ADAMW, &cfg));
    STEP_TRY(gpucore_optimizer_create(ctx, &cfg, params, 5, &opt));
    STEP_TRY(gpucore_optimizer_step(opt, grads, 5, NULL, NULL));
    STEP_TRY(gpucore_context_synchronize(ctx));
    float l = -1;
    STEP_TRY(gpucore_copy_to_host(&l, 4, loss));
    if (!(l > 0 && l < 10)) {
        fprintf(stderr, "  the step ran but its loss is %g\n", l);
        st = GPUCORE_ERR_INTERNAL;
    }
done:
    gpucore_optimizer_destroy(opt);
    gpucore_host_free(ctx, pinned);
    gpucore_tensor *all[] = {x, w1, b1, h, aux, w2, b2, logits, targets, loss, dloss, dlogits, dh, dw1, db1, dw2,
                             db2, emb, demb, norm};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) gpucore_tensor_destroy(all[i]);
    if (st == GPUCORE_OK) st = gpucore_context_synchronize(ctx);
    return st;
}

static int64_t allocated(gpucore_context *ctx, gpucore_memory_kind kind)
{
    gpucore_memory_stats ms;
    memset(&ms, 0, sizeof ms);
    ms.struct_size = sizeof ms;
    if (gpucore_memory_get_stats(ctx, kind, &ms)) return -1;
    return ms.allocated_bytes;
}

int main(void)
{
    const char *devices[4];
    int nd = test_devices(devices, 4);
    for (int d = 0; d < nd; d++) {
        int runs = 0, failed_cleanly = 0, single_ok = 0;
        for (int64_t nth = 1; nth < 1000; nth++) {
            gpucore_context *ctx = NULL;
            CHECK_OK(gpucore_context_create(devices[d], &ctx));
            if (!ctx) break;
            CHECK_OK(gpucore_memory_set_caching(ctx, GPUCORE_MEMORY_DEVICE, 0));
            CHECK_OK(gpucore_memory_set_caching(ctx, GPUCORE_MEMORY_PINNED_HOST, 0));
            /* persistent failure from the nth raw allocation on: the step must give up cleanly */
            CHECK_OK(gpucore_debug_fail_raw_alloc(ctx, nth, -1));
            gpucore_clear_error();
            gpucore_status st = train_step(ctx);
            runs++;
            int done = st == GPUCORE_OK; /* nth is past the step's last raw allocation */
            if (!done) {
                if (st == GPUCORE_ERR_OUT_OF_MEMORY && gpucore_last_error()[0]) failed_cleanly++;
                else fprintf(stderr, "  nth %lld: %s: %s\n", (long long)nth, gpucore_status_string(st), gpucore_last_error());
            }
            CHECK(st == GPUCORE_OK || (st == GPUCORE_ERR_OUT_OF_MEMORY && gpucore_last_error()[0]));
            CHECK_OK(gpucore_debug_fail_raw_alloc(ctx, 0, 0));
            CHECK(allocated(ctx, GPUCORE_MEMORY_DEVICE) == 0);      /* nothing leaked */
            CHECK(allocated(ctx, GPUCORE_MEMORY_PINNED_HOST) == 0);
            CHECK_OK(train_step(ctx));                               /* still usable */
            /* a single failure at nth: the allocator's retry ladder may absorb it */
            CHECK_OK(gpucore_debug_fail_raw_alloc(ctx, nth, 1));
            st = train_step(ctx);
            CHECK(st == GPUCORE_OK || st == GPUCORE_ERR_OUT_OF_MEMORY);
            single_ok += st == GPUCORE_OK;
            CHECK_OK(gpucore_debug_fail_raw_alloc(ctx, 0, 0));
            CHECK(allocated(ctx, GPUCORE_MEMORY_DEVICE) == 0);
            CHECK_OK(gpucore_context_destroy(ctx));
            if (done) break;
        }
        printf("%s: %d injection points in a training step: %d failed cleanly with OUT_OF_MEMORY, the last ran "
               "through; single failures absorbed by the retry ladder in %d runs\n",
               devices[d], runs, failed_cleanly, single_ok);
        CHECK(failed_cleanly >= 20); /* the step really allocates at many sites */
    }
    return check_finish("test_fault_injection");
}
