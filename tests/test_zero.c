/*
 * test_zero.c — the ZeRO trainer (stages 0-3).
 *
 *   test_zero local   1-rank communicator (no MPI): every stage against the
 *                     single-process reference, stats formulas, bad input.
 *   test_zero stall|exit   under mpirun: failure injection (tests/comm_failure.sh).
 *   test_zero save|resume PREFIX   under mpirun: checkpoint at one rank count, resume at another.
 *   test_zero mpi     under mpirun -np N: each rank trains on its 1/N of the batch;
 *                     after K steps the parameters must equal single-process AdamW
 *                     on the whole batch (gpucore_optimizer over the full tensors,
 *                     with the mean gradient summed in rank order): bitwise for f32
 *                     at N <= 2 (one addition, whatever MPI's order), else within
 *                     1e-6 relative; with clipping, loss scaling (one step with an
 *                     Inf on one rank must be skipped everywhere), micro-batch
 *                     accumulation and bf16/f32 mixed parameters (1e-2, bf16's
 *                     contract). Per-rank bytes of parameters, gradients and
 *                     optimizer state must match the stage's formula.
 *
 * The model is test_ddp's least squares: w (12607 floats in 8 tensors of uneven,
 * mostly odd sizes, so every bucket needs padding at N = 2 and 4); the gradient is
 * computed on the host in double and added into the trainer's gradient tensors in
 * backward order (last parameter first), each marked ready at once.
 */
#include "zero_model.h"

/* Per-rank bytes against the stage's formula. */
static void check_stats(gpucore_zero *z, const run_cfg *c)
{
    gpucore_zero_stats s = {.struct_size = sizeof s};
    CHECK_OK(gpucore_zero_get_stats(z, &s));
    int nb = 0;
    CHECK_OK(gpucore_zero_bucket_count(z, &nb));
    int64_t P = 0, Pe = 0, S = 0, Se = 0, NSe = 0, Pbf = 0;
    for (int p = 0; p < NP; p++) {
        int64_t e = gpucore_dtype_size(param_dtype(c, p));
        P += psize[p];
        Pe += psize[p] * e;
        if (e == 2) Pbf += psize[p];
    }
    for (int k = 0; k < nb; k++) {
        int b0 = 0, b1 = 0;
        int64_t numel = 0;
        CHECK_OK(gpucore_zero_bucket_info(z, k, &b0, &b1, &numel, NULL));
        int64_t sh = (numel + g_size - 1) / g_size;
        S += sh;
        Se += sh * gpucore_dtype_size(param_dtype(c, b0));
        NSe += g_size * sh * gpucore_dtype_size(param_dtype(c, b0));
        for (int p = b0 + 1; p < b1; p++) CHECK(param_dtype(c, p) == param_dtype(c, b0)); /* one dtype a bucket */
    }
    int64_t want_param = c->stage == 3 ? Se : Pe;
    int64_t want_grad = c->stage == 0 ? Pe : c->stage == 1 ? NSe + 4 * S : 4 * S;
    int64_t want_state = c->stage == 0 ? 8 * P + 4 * Pbf : 12 * S;
    CHECK(s.numel == P);
    CHECK(s.shard_numel == (c->stage == 0 ? 0 : S));
    CHECK(s.param_bytes == want_param);
    CHECK(s.grad_bytes == want_grad);
    CHECK(s.state_bytes == want_state);
    CHECK(s.live_grad_bytes == 0 && s.gathered_bytes == 0);
    if (s.param_bytes != want_param || s.grad_bytes != want_grad || s.state_bytes != want_state)
        fprintf(stderr, "rank %d stage %d: params %lld (want %lld) grads %lld (want %lld) state %lld (want %lld)\n",
                g_rank, c->stage, (long long)s.param_bytes, (long long)want_param, (long long)s.grad_bytes,
                (long long)want_grad, (long long)s.state_bytes, (long long)want_state);
}

static void train_zero(gpucore_comm *comm, gpucore_context *ctx, const run_cfg *c, float *w)
{
    gpucore_tensor *params[NP];
    make_params(ctx, c, w, params);
    gpucore_optimizer_config oc;
    opt_config(&oc);
    gpucore_zero_options o;
    gpucore_zero_options_default(&o);
    o.stage = c->stage;
    o.bucket_bytes = 8192;
    o.max_grad_norm = c->clip ? 0.5 : 0.0;
    gpucore_zero *z = NULL;
    CHECK_OK(gpucore_zero_create(comm, params, NP, &oc, &o, &z));
    if (!z) return;
    if (c->stage == 3)
        for (int p = 0; p < NP; p++) gpucore_tensor_destroy(params[p]);
    gpucore_loss_scaler *sc = NULL;
    if (c->scaler) scaler_create(ctx, &sc);
    train_steps(z, comm, c, sc, w, 1, STEPS, NULL);
    read_params(z, c->stage, w);
    check_stats(z, c);
    gpucore_loss_scaler_destroy(sc);
    CHECK_OK(gpucore_zero_destroy(z));
    if (c->stage != 3)
        for (int p = 0; p < NP; p++) gpucore_tensor_destroy(params[p]);
}


static void compare_case(gpucore_comm *comm, gpucore_context *ctx, run_cfg c)
{
    float *w = malloc(sizeof(float) * D), *w_ref = malloc(sizeof(float) * D), *w0 = malloc(sizeof(float) * D);
    init_w(w);
    init_w(w_ref);
    init_w(w0);
    train_zero(comm, ctx, &c, w);
    train_ref(ctx, &c, w_ref);
    /* f32 with a fixed reduction order (one addition per element at N <= 2; clipping's
     * norm is summed in a different order, accumulation adds micro-batches in another) */
    int bitwise = !c.mixed && !c.clip && !c.accum && g_size <= 2;
    double err = rel_diff(w, w_ref), tol = c.mixed ? 1e-2 : 1e-6;
    int equal = !memcmp(w, w_ref, sizeof(float) * D);
    if (bitwise) CHECK(equal);
    CHECK(err <= tol);
    CHECK(rel_diff(w, w0) > 1e-3); /* it trained */
    CHECK(same_on_all_ranks(w));
    printf("rank %d/%d stage %d%s%s%s%s%s: rel diff vs single process %.2e (%s)\n", g_rank, g_size, c.stage,
           c.mixed ? " mixed f32/bf16" : "", c.clip ? " clip" : "", c.scaler ? " loss-scale" : "",
           c.accum ? " 2 micro-batches" : "", c.inf_step ? " inf-step" : "", err,
           equal ? "bitwise equal" : bitwise ? "NOT bitwise equal" : "tolerance");
    free(w);
    free(w_ref);
    free(w0);
}

static const char *const pnames[NP] = {"l0.w", "l0.b", "l1.w", "l1.b", "l2.w", "l2.b", "l3.w", "l3.b"};

static void test_bad_input(gpucore_comm *comm, gpucore_context *ctx)
{
    run_cfg c = {.stage = 1};
    float *w = malloc(sizeof(float) * D);
    init_w(w);
    gpucore_tensor *params[NP];
    make_params(ctx, &c, w, params);
    gpucore_optimizer_config oc;
    opt_config(&oc);
    gpucore_zero_options o;
    gpucore_zero_options_default(&o);
    gpucore_zero *z = NULL;
    CHECK_STATUS(gpucore_zero_create(NULL, params, NP, &oc, &o, &z), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_zero_create(comm, NULL, NP, &oc, &o, &z), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_zero_create(comm, params, NP, NULL, &o, &z), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_zero_create(comm, params, 0, &oc, &o, &z), GPUCORE_ERR_INVALID_ARGUMENT);
    o.stage = 4;
    CHECK_STATUS(gpucore_zero_create(comm, params, NP, &oc, &o, &z), GPUCORE_ERR_INVALID_ARGUMENT);
    o.stage = 1;
    o.max_grad_norm = -1;
    CHECK_STATUS(gpucore_zero_create(comm, params, NP, &oc, &o, &z), GPUCORE_ERR_INVALID_ARGUMENT);
    o.max_grad_norm = 0;
    o.struct_size = 8;
    CHECK_STATUS(gpucore_zero_create(comm, params, NP, &oc, &o, &z), GPUCORE_ERR_INVALID_ARGUMENT);
    o.struct_size = sizeof o;
    gpucore_tensor *dup[2] = {params[0], params[0]};
    CHECK_STATUS(gpucore_zero_create(comm, dup, 2, &oc, &o, &z), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor *i32 = NULL, *tr = NULL;
    int64_t shape[2] = {4, 3};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_I32, 2, shape, &i32));
    CHECK_STATUS(gpucore_zero_create(comm, &i32, 1, &oc, &o, &z), GPUCORE_ERR_DTYPE_MISMATCH);
    gpucore_tensor *f = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &f));
    CHECK_OK(gpucore_tensor_transpose(f, 0, 1, &tr));
    CHECK_STATUS(gpucore_zero_create(comm, &tr, 1, &oc, &o, &z), GPUCORE_ERR_NOT_CONTIGUOUS);
    CHECK(z == NULL);

    CHECK_OK(gpucore_zero_create(comm, params, NP, &oc, &o, &z));
    gpucore_tensor *g = NULL;
    CHECK_STATUS(gpucore_zero_grad(z, NP, NULL, &g), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_zero_grad(z, 0, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_zero_mark_ready(z, -1, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_zero_step(z, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* nothing reduced */
    CHECK_OK(gpucore_zero_grad(z, NP - 1, NULL, &g));
    CHECK_OK(gpucore_zero_mark_ready(z, NP - 1, NULL));
    CHECK_STATUS(gpucore_zero_mark_ready(z, NP - 1, NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* twice */
    CHECK_STATUS(gpucore_zero_set_no_sync(z, 1), GPUCORE_ERR_INVALID_ARGUMENT);          /* mid-round */
    CHECK_STATUS(gpucore_zero_step(z, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);        /* incomplete */
    for (int p = NP - 2; p >= 0; p--) {
        CHECK_OK(gpucore_zero_grad(z, p, NULL, &g));
        CHECK_OK(gpucore_zero_mark_ready(z, p, NULL));
    }
    CHECK_OK(gpucore_zero_step(z, NULL, NULL));
    CHECK_OK(gpucore_zero_set_no_sync(z, 1));
    CHECK_STATUS(gpucore_zero_step(z, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* no_sync on */
    CHECK_OK(gpucore_zero_set_no_sync(z, 0));
    gpucore_tensor *norm = NULL;
    CHECK_STATUS(gpucore_zero_grad_norm(z, &norm), GPUCORE_ERR_INVALID_ARGUMENT); /* clipping off */
    CHECK_STATUS(gpucore_zero_bucket_info(z, 99, NULL, NULL, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_zero_gather(z, -1), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_zero_stats s = {.struct_size = 4};
    CHECK_STATUS(gpucore_zero_get_stats(z, &s), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_zero_save_sharded(z, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_zero_save_consolidated(z, "zero_bad.safetensors", NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK(gpucore_zero_load_sharded(z, "/nonexistent-dir/zero", NULL) != GPUCORE_OK && gpucore_last_error()[0]);
    CHECK(gpucore_zero_load_consolidated(z, "/nonexistent-dir/zero", pnames, NULL) != GPUCORE_OK);
    CHECK_OK(gpucore_zero_destroy(z));
    CHECK_STATUS(gpucore_zero_step(z, NULL, NULL), GPUCORE_ERR_INVALID_HANDLE); /* use after destroy */
    CHECK_STATUS(gpucore_zero_step(NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);

    o.stage = 0;
    CHECK_OK(gpucore_zero_create(comm, params, NP, &oc, &o, &z));
    CHECK_STATUS(gpucore_zero_save_sharded(z, "zero_bad", NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* no shards */
    CHECK_OK(gpucore_zero_destroy(z));
    /* stage 3: parameters exist only while gathered */
    o.stage = 3;
    CHECK_OK(gpucore_zero_create(comm, params, NP, &oc, &o, &z));
    gpucore_tensor *pt = NULL;
    CHECK_STATUS(gpucore_zero_param(z, 0, NULL, &pt), GPUCORE_ERR_INVALID_ARGUMENT);
    int b0 = -1;
    CHECK_OK(gpucore_zero_bucket_of(z, 0, &b0));
    CHECK_OK(gpucore_zero_gather(z, b0));
    CHECK_OK(gpucore_zero_param(z, 0, NULL, &pt));
    CHECK(pt != NULL);
    CHECK_STATUS(gpucore_zero_mark_ready(z, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* no gradient requested */
    for (int p = NP - 1; p >= 0; p--) {
        CHECK_OK(gpucore_zero_grad(z, p, NULL, &g));
        CHECK_OK(gpucore_zero_mark_ready(z, p, NULL));
    }
    CHECK_STATUS(gpucore_zero_step(z, NULL, NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* still gathered */
    CHECK_OK(gpucore_zero_release(z, b0, NULL));
    CHECK_OK(gpucore_zero_step(z, NULL, NULL));
    CHECK_OK(gpucore_zero_destroy(z));
    gpucore_tensor_destroy(tr);
    gpucore_tensor_destroy(f);
    gpucore_tensor_destroy(i32);
    for (int p = 0; p < NP; p++) gpucore_tensor_destroy(params[p]);
    free(w);
}

/* Checkpoints: `save` trains 2 steps at stage 2 with a loss scaler, writes a sharded and
 * a consolidated checkpoint, trains 2 more and records the loss curve and the final
 * parameters; `resume` (any rank count) loads each checkpoint into a fresh trainer
 * (sharded: stage 3, consolidated: stage 1) and must continue on the same curve. */

static gpucore_zero *ckpt_trainer(gpucore_comm *comm, gpucore_context *ctx, int stage, float *w,
                                  gpucore_tensor **params)
{
    run_cfg c = {.stage = stage, .scaler = 1};
    make_params(ctx, &c, w, params);
    gpucore_optimizer_config oc;
    opt_config(&oc);
    gpucore_zero_options o;
    gpucore_zero_options_default(&o);
    o.stage = stage;
    o.bucket_bytes = 8192;
    gpucore_zero *z = NULL;
    CHECK_OK(gpucore_zero_create(comm, params, NP, &oc, &o, &z));
    return z;
}

static int ckpt_mode(gpucore_comm *comm, gpucore_context *ctx, const char *mode, const char *prefix)
{
    g_rank = gpucore_comm_rank(comm);
    g_size = gpucore_comm_size(comm);
    for (int p = 0; p < NP; p++) poff[p + 1] = poff[p] + psize[p];
    char full[4096], expect[4096];
    snprintf(full, sizeof full, "%s.full.safetensors", prefix);
    snprintf(expect, sizeof expect, "%s.expect", prefix);
    float *w = malloc(sizeof(float) * D), *w_exp = malloc(sizeof(float) * D);
    double losses[2] = {0}, losses_exp[2] = {0};
    gpucore_tensor *params[NP];
    gpucore_loss_scaler *sc = NULL;
    run_cfg c = {.scaler = 1};
    if (!strcmp(mode, "save")) {
        init_w(w);
        gpucore_zero *z = ckpt_trainer(comm, ctx, 2, w, params);
        scaler_create(ctx, &sc);
        c.stage = 2;
        train_steps(z, comm, &c, sc, w, 1, 2, NULL);
        CHECK_OK(gpucore_zero_save_sharded(z, prefix, sc));
        CHECK_OK(gpucore_zero_save_consolidated(z, full, pnames, sc));
        train_steps(z, comm, &c, sc, w, 3, 4, losses);
        if (g_rank == 0) {
            FILE *f = fopen(expect, "wb");
            CHECK(f && fwrite(losses, sizeof losses, 1, f) == 1 && fwrite(w, sizeof(float) * D, 1, f) == 1);
            if (f) fclose(f);
        }
        printf("rank %d/%d: saved after 2 steps; losses at steps 3, 4: %.9g %.9g\n", g_rank, g_size, losses[0],
               losses[1]);
        CHECK_OK(gpucore_zero_destroy(z));
        for (int p = 0; p < NP; p++) gpucore_tensor_destroy(params[p]);
    } else {
        FILE *f = fopen(expect, "rb");
        CHECK(f && fread(losses_exp, sizeof losses_exp, 1, f) == 1 && fread(w_exp, sizeof(float) * D, 1, f) == 1);
        if (f) fclose(f);
        for (int variant = 0; variant < 2; variant++) {
            for (int64_t j = 0; j < D; j++) w[j] = 0.25f; /* overwritten by the load */
            c.stage = variant == 0 ? 3 : 1;
            gpucore_zero *z = ckpt_trainer(comm, ctx, c.stage, w, params);
            if (c.stage == 3)
                for (int p = 0; p < NP; p++) gpucore_tensor_destroy(params[p]);
            scaler_create(ctx, &sc);
            if (variant == 0) CHECK_OK(gpucore_zero_load_sharded(z, prefix, sc));
            else CHECK_OK(gpucore_zero_load_consolidated(z, full, pnames, sc));
            train_steps(z, comm, &c, sc, w, 3, 4, losses);
            double err = rel_diff(w, w_exp);
            CHECK(losses[0] == losses_exp[0]); /* the loaded parameters are the saved ones */
            CHECK(fabs(losses[1] - losses_exp[1]) <= 1e-6 * fabs(losses_exp[1]));
            CHECK(err <= 1e-6);
            CHECK(same_on_all_ranks(w));
            printf("rank %d/%d: resumed from the %s checkpoint at stage %d: losses %.9g %.9g (saved run %.9g %.9g), "
                   "params rel diff %.2e\n", g_rank, g_size, variant ? "consolidated" : "sharded", c.stage, losses[0],
                   losses[1], losses_exp[0], losses_exp[1], err);
            gpucore_loss_scaler_destroy(sc);
            CHECK_OK(gpucore_zero_destroy(z));
            if (c.stage != 3)
                for (int p = 0; p < NP; p++) gpucore_tensor_destroy(params[p]);
        }
    }
    free(w);
    free(w_exp);
    char name[64];
    snprintf(name, sizeof name, "test_zero %s rank %d/%d", mode, g_rank, g_size);
    return check_finish(name);
}

/* Stage 3 through the checkpoint executor: three custom linear segments (no bias) read
 * their weight with gpucore_zero_param and write its gradient into gpucore_zero_grad;
 * gpucore_zero_attach_ckpt gathers each segment's bucket around its forward, recompute
 * (policy recompute-all) and backward. Inside a segment at most its bucket and the
 * prefetched next one are gathered; after 3 steps the weights equal stage 0's. */
typedef struct seg_user {
    gpucore_zero *z;
    int param;
    int64_t max_gathered; /* bytes gathered seen inside the segment */
} seg_user;

static void note_gathered(seg_user *u)
{
    gpucore_zero_stats s = {.struct_size = sizeof s};
    if (gpucore_zero_get_stats(u->z, &s) == GPUCORE_OK && s.gathered_bytes > u->max_gathered)
        u->max_gathered = s.gathered_bytes;
}

static gpucore_status seg_forward(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                  gpucore_stream *stream, void *user)
{
    seg_user *u = user;
    gpucore_tensor *w = NULL;
    gpucore_status st = gpucore_zero_param(u->z, u->param, stream, &w);
    if (st) return st;
    note_gathered(u);
    int64_t xs[2], ws[2];
    gpucore_tensor_shape(x, xs);
    gpucore_tensor_shape(w, ws);
    int64_t ys[2] = {xs[0], ws[0]};
    gpucore_context *ctx = NULL;
    gpucore_tensor_context(x, &ctx);
    if ((st = gpucore_tensor_create(ctx, GPUCORE_F32, 2, ys, y))) return st;
    if ((st = gpucore_linear_forward(x, w, NULL, GPUCORE_ACT_NONE, *y, NULL, stream))) return st;
    return gpucore_ckpt_save(call, x);
}

static gpucore_status seg_backward(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                   gpucore_stream *stream, void *user)
{
    seg_user *u = user;
    gpucore_tensor *w = NULL, *x = NULL, *g = NULL;
    gpucore_status st = gpucore_zero_param(u->z, u->param, stream, &w);
    if (!st) st = gpucore_ckpt_saved(call, 0, &x);
    if (!st) st = gpucore_zero_grad(u->z, u->param, stream, &g);
    if (st) return st;
    note_gathered(u);
    if ((st = gpucore_linear_backward(dy, x, w, NULL, dx, g, NULL, stream))) return st;
    return gpucore_zero_mark_ready(u->z, u->param, stream);
}

static void train_ckpt(gpucore_comm *comm, gpucore_context *ctx, int stage, float *out, int64_t *max_gathered,
                       int64_t *bucket_bytes)
{
    static const int64_t shapes[3][2] = {{16, 8}, {16, 16}, {4, 16}};
    gpucore_tensor *params[3];
    for (int p = 0; p < 3; p++) {
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shapes[p], &params[p]));
        CHECK_OK(gpucore_random(params[p], GPUCORE_NORMAL, 0.0, 0.3, 7, (uint64_t)p << 20, NULL));
    }
    int32_t units[3] = {0, 1, 2};
    gpucore_optimizer_config oc;
    opt_config(&oc);
    gpucore_zero_options o;
    gpucore_zero_options_default(&o);
    o.stage = stage;
    o.units = units;
    gpucore_zero *z = NULL;
    CHECK_OK(gpucore_zero_create(comm, params, 3, &oc, &o, &z));
    if (!z) return;
    gpucore_ckpt *ck = NULL;
    CHECK_OK(gpucore_ckpt_create(ctx, "zero3", &ck));
    seg_user users[3];
    int32_t seg_bucket[3];
    for (int p = 0; p < 3; p++) {
        users[p] = (seg_user){z, p, 0};
        char name[8];
        snprintf(name, sizeof name, "lin%d", p);
        CHECK_OK(gpucore_ckpt_add_custom(ck, name, seg_forward, seg_backward, &users[p]));
        int b = 0;
        CHECK_OK(gpucore_zero_bucket_of(z, p, &b));
        seg_bucket[p] = b;
    }
    CHECK_OK(gpucore_ckpt_set_policy(ck, GPUCORE_CKPT_RECOMPUTE_ALL, 0));
    CHECK_STATUS(gpucore_zero_attach_ckpt(z, ck, seg_bucket, 2), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_OK(gpucore_zero_attach_ckpt(z, ck, seg_bucket, 3));
    gpucore_tensor *x = NULL;
    int64_t xs[2] = {8, 8};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, xs, &x));
    CHECK_OK(gpucore_random(x, GPUCORE_NORMAL, 0.0, 1.0, 11, 0, NULL));
    for (int step = 0; step < 3; step++) {
        gpucore_tensor *y = NULL, *dy = NULL; /* y: the executor's */
        CHECK_OK(gpucore_ckpt_forward(ck, x, &y)); /* loss = |y|^2 / 2, so dy = y */
        int64_t ys[2] = {8, 4};
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, ys, &dy));
        if (y) CHECK_OK(gpucore_copy(dy, y, NULL));
        CHECK_OK(gpucore_ckpt_backward(ck, dy, NULL));
        gpucore_tensor_destroy(dy);
        CHECK_OK(gpucore_zero_step(z, NULL, NULL));
    }
    int nb = 0;
    CHECK_OK(gpucore_zero_bucket_count(z, &nb));
    *bucket_bytes = 0;
    for (int k = 0; k < nb; k++) {
        int64_t shard = 0;
        CHECK_OK(gpucore_zero_bucket_info(z, k, NULL, NULL, NULL, &shard));
        if (shard * g_size * 4 > *bucket_bytes) *bucket_bytes = shard * g_size * 4;
    }
    *max_gathered = 0;
    for (int p = 0; p < 3; p++)
        if (users[p].max_gathered > *max_gathered) *max_gathered = users[p].max_gathered;
    int64_t off = 0;
    for (int k = 0; k < 3; k++) {
        int b = 0;
        CHECK_OK(gpucore_zero_bucket_of(z, k, &b));
        CHECK_OK(gpucore_zero_gather(z, b));
        gpucore_tensor *w = NULL;
        CHECK_OK(gpucore_zero_param(z, k, NULL, &w));
        if (w) read_host(w, out + off);
        off += shapes[k][0] * shapes[k][1];
        CHECK_OK(gpucore_zero_release(z, b, NULL));
    }
    gpucore_ckpt_destroy(ck);
    gpucore_tensor_destroy(x);
    CHECK_OK(gpucore_zero_destroy(z));
    for (int p = 0; p < 3; p++) gpucore_tensor_destroy(params[p]);
}

static void test_ckpt_stage3(gpucore_comm *comm, gpucore_context *ctx)
{
    float w0[16 * 8 + 16 * 16 + 4 * 16], w3[16 * 8 + 16 * 16 + 4 * 16];
    int64_t g0 = 0, g3 = 0, bb = 0;
    train_ckpt(comm, ctx, 0, w0, &g0, &bb);
    train_ckpt(comm, ctx, 3, w3, &g3, &bb);
    int n = 16 * 8 + 16 * 16 + 4 * 16;
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += ((double)w3[i] - w0[i]) * ((double)w3[i] - w0[i]);
        den += (double)w0[i] * w0[i];
    }
    double err = sqrt(num / den);
    if (g_size == 1) CHECK(!memcmp(w0, w3, sizeof w0));
    CHECK(err <= 1e-6);
    CHECK(g0 == 0);                   /* stage 0 gathers nothing */
    CHECK(g3 > 0 && g3 <= 2 * bb);    /* a segment's bucket plus the prefetched one, never the model */
    printf("rank %d/%d executor stage 3 vs stage 0: rel diff %.2e; at most %lld bytes gathered inside a segment "
           "(largest bucket %lld)\n", g_rank, g_size, err, (long long)g3, (long long)bb);
}

/* Built-in transformer blocks (attention + MLP) bound to the trainer with
 * gpucore_zero_bind_ckpt: stages 0 and 3 (stage 3 with the bound tensors destroyed, so
 * the blocks can only read gathered parameters) train like plain AdamW on the same
 * blocks without the trainer (policy recompute-all: the recompute reads the gathered
 * bucket too). stage < 0: the reference. */
#define BLK_NP 8
static void train_blocks(gpucore_comm *comm, gpucore_context *ctx, int stage, float *out, int64_t *nout)
{
    enum { BD = 8, BF = 16, BB = 2, BS = 4 };
    static const int64_t shapes[BLK_NP][2] = {{BD, 0}, {3 * BD, BD}, {BD, BD}, {BD, 0}, {BF, BD}, {BF, 0}, {BD, BF}, {BD, 0}};
    gpucore_tensor *params[BLK_NP], *grads[BLK_NP];
    for (int p = 0; p < BLK_NP; p++) {
        int nd = shapes[p][1] ? 2 : 1;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, nd, shapes[p], &params[p]));
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, nd, shapes[p], &grads[p]));
        CHECK_OK(gpucore_random(params[p], GPUCORE_NORMAL, nd == 1 && p != 5 ? 1.0 : 0.0, 0.3, 21, (uint64_t)p << 20, NULL));
    }
    gpucore_ckpt *ck = NULL;
    CHECK_OK(gpucore_ckpt_create(ctx, "blocks", &ck));
    gpucore_ckpt_attention_block ab;
    gpucore_ckpt_attention_block_init(&ab);
    ab.heads = 2;
    ab.norm_weight = params[0], ab.w_qkv = params[1], ab.w_out = params[2];
    ab.d_norm_weight = grads[0], ab.dw_qkv = grads[1], ab.dw_out = grads[2];
    CHECK_OK(gpucore_ckpt_add_attention_block(ck, "attn", &ab));
    gpucore_ckpt_mlp_block mb;
    gpucore_ckpt_mlp_block_init(&mb);
    mb.norm_weight = params[3], mb.w_fc1 = params[4], mb.b_fc1 = params[5], mb.w_fc2 = params[6], mb.b_fc2 = params[7];
    mb.d_norm_weight = grads[3], mb.dw_fc1 = grads[4], mb.db_fc1 = grads[5], mb.dw_fc2 = grads[6], mb.db_fc2 = grads[7];
    CHECK_OK(gpucore_ckpt_add_mlp_block(ck, "mlp", &mb));
    CHECK_OK(gpucore_ckpt_set_policy(ck, GPUCORE_CKPT_RECOMPUTE_ALL, 0));
    gpucore_optimizer_config oc;
    opt_config(&oc);
    gpucore_zero *z = NULL;
    gpucore_optimizer *opt = NULL;
    if (stage < 0) {
        CHECK_OK(gpucore_optimizer_create(ctx, &oc, params, BLK_NP, &opt));
    } else {
        int32_t units[BLK_NP] = {0, 0, 0, 1, 1, 1, 1, 1}, seg_bucket[2];
        gpucore_zero_options o;
        gpucore_zero_options_default(&o);
        o.stage = stage;
        o.units = units;
        CHECK_OK(gpucore_zero_create(comm, params, BLK_NP, &oc, &o, &z));
        CHECK_OK(gpucore_zero_bind_ckpt(z, ck, params, grads));
        CHECK_OK(gpucore_zero_bucket_of(z, 0, &seg_bucket[0]));
        CHECK_OK(gpucore_zero_bucket_of(z, 3, &seg_bucket[1]));
        CHECK_OK(gpucore_zero_attach_ckpt(z, ck, seg_bucket, 2));
        if (stage == 3)
            for (int p = 0; p < BLK_NP; p++) { /* keys only from now on */
                gpucore_tensor_destroy(params[p]);
                gpucore_tensor_destroy(grads[p]);
                params[p] = grads[p] = NULL;
            }
    }
    gpucore_tensor *x = NULL, *dy = NULL;
    int64_t xs[3] = {BB, BS, BD};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, xs, &x));
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 3, xs, &dy));
    CHECK_OK(gpucore_random(x, GPUCORE_NORMAL, 0.0, 1.0, 5, 0, NULL));
    for (int step = 0; step < 3; step++) {
        gpucore_tensor *y = NULL;
        CHECK_OK(gpucore_ckpt_forward(ck, x, &y)); /* loss = |y|^2 / 2 */
        if (y) CHECK_OK(gpucore_copy(dy, y, NULL));
        CHECK_OK(gpucore_ckpt_backward(ck, dy, NULL));
        CHECK_OK(z ? gpucore_zero_step(z, NULL, NULL) : gpucore_optimizer_step(opt, grads, BLK_NP, NULL, NULL));
    }
    *nout = 0;
    for (int p = 0; p < BLK_NP; p++) {
        gpucore_tensor *w = params[p];
        int b = -1;
        if (z) {
            CHECK_OK(gpucore_zero_bucket_of(z, p, &b));
            CHECK_OK(gpucore_zero_gather(z, b));
            CHECK_OK(gpucore_zero_param(z, p, NULL, &w));
        }
        if (w) read_host(w, out + *nout);
        *nout += gpucore_tensor_numel(w);
        if (z) CHECK_OK(gpucore_zero_release(z, b, NULL));
    }
    CHECK_OK(gpucore_zero_destroy(z)); /* unbinds the executor */
    CHECK_OK(gpucore_optimizer_destroy(opt));
    CHECK_OK(gpucore_ckpt_destroy(ck));
    gpucore_tensor_destroy(x);
    gpucore_tensor_destroy(dy);
    for (int p = 0; p < BLK_NP; p++) {
        gpucore_tensor_destroy(params[p]);
        gpucore_tensor_destroy(grads[p]);
    }
}

static void test_blocks_bound(gpucore_comm *comm, gpucore_context *ctx)
{
    enum { N = 8 + 24 * 8 + 64 + 8 + 128 + 16 + 128 + 8 };
    static float ref[N], got[N], w0[N];
    int64_t n = 0, n0 = 0, nr = 0;
    train_blocks(comm, ctx, -1, ref, &nr);
    for (int stage = 0; stage <= 3; stage += 3) {
        train_blocks(comm, ctx, stage, got, &n);
        CHECK(n == N && nr == N);
        double num = 0, den = 0;
        for (int i = 0; i < N; i++) {
            num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        double err = sqrt(num / den);
        if (g_size <= 2) CHECK(!memcmp(got, ref, sizeof got));
        CHECK(err <= 1e-6);
        if (stage == 0) {
            memcpy(w0, got, sizeof w0);
            n0 = n;
        }
        printf("rank %d/%d built-in attention+MLP blocks, stage %d vs plain AdamW: rel diff %.2e\n", g_rank, g_size,
               stage, err);
    }
    CHECK(n0 == N && !memcmp(w0, got, sizeof w0)); /* stage 3 == stage 0 */
    /* bad input */
    gpucore_ckpt *ck = NULL;
    CHECK_OK(gpucore_ckpt_create(ctx, "other", &ck));
    CHECK_STATUS(gpucore_zero_bind_ckpt(NULL, ck, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_ckpt_destroy(ck));
}

static int run(gpucore_comm *comm, gpucore_context *ctx, const char *name)
{
    g_rank = gpucore_comm_rank(comm);
    g_size = gpucore_comm_size(comm);
    for (int p = 0; p < NP; p++) poff[p + 1] = poff[p] + psize[p];
    test_bad_input(comm, ctx);
    test_ckpt_stage3(comm, ctx);
    test_blocks_bound(comm, ctx);
    for (int stage = 0; stage <= 3; stage++) {
        compare_case(comm, ctx, (run_cfg){.stage = stage});
        compare_case(comm, ctx, (run_cfg){.stage = stage, .clip = 1, .scaler = 1, .inf_step = 2});
        compare_case(comm, ctx, (run_cfg){.stage = stage, .accum = 1});
        compare_case(comm, ctx, (run_cfg){.stage = stage, .mixed = 1});
    }
    return check_finish(name);
}

#ifdef TEST_HAVE_MPI
/* Failure injection (tests/comm_failure.sh): after one healthy step the last rank stalls or
 * exits halfway through its backward; the others finish theirs and must get
 * GPUCORE_ERR_COMM from the trainer within the communicator's timeout, not hang. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_failure(gpucore_comm *comm, gpucore_context *ctx, int exit_mode)
{
    g_rank = gpucore_comm_rank(comm);
    g_size = gpucore_comm_size(comm);
    for (int p = 0; p < NP; p++) poff[p + 1] = poff[p] + psize[p];
    const double timeout = 3.0;
    CHECK_OK(gpucore_comm_set_timeout(comm, timeout));
    run_cfg c = {.stage = 2};
    float *w = malloc(sizeof(float) * D);
    init_w(w);
    gpucore_tensor *params[NP];
    gpucore_zero *z = ckpt_trainer(comm, ctx, 2, w, params);
    if (!z) return 1;
    train_steps(z, comm, &c, NULL, w, 1, 1, NULL); /* a healthy step first */
    gpucore_status st = GPUCORE_OK;
    double t0 = now_s();
    for (int p = NP - 1; p >= 0 && !st; p--) {
        if (p == NP / 2 && g_rank == g_size - 1) {
            fflush(stdout);
            if (exit_mode) _exit(5); /* dies mid-backward without a word to MPI */
            sleep(120);              /* stalls: never joins the remaining reduce-scatters */
            _exit(6);
        }
        gpucore_tensor *g = NULL;
        if (!(st = gpucore_zero_grad(z, p, NULL, &g)) && !(st = gpucore_fill(g, 1e-3, NULL)))
            st = gpucore_zero_mark_ready(z, p, NULL);
    }
    if (!st) st = gpucore_zero_step(z, NULL, NULL);
    double dt = now_s() - t0;
    printf("rank %d: ZeRO step with a dead/stalled peer ended after %.2f s with %s: %s\n", g_rank, dt,
           gpucore_status_string(st), gpucore_last_error());
    fflush(stdout);
    CHECK(st == GPUCORE_ERR_COMM);
    CHECK(dt < timeout + 5);
    check_finish("test_zero failure");
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, check_failed ? 1 : 3); /* a dead MPI job cannot recover: end it */
    return 1;
}
#endif

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "local";
    gpucore_context *ctx = NULL;
    gpucore_comm *comm = NULL;
    int rc = 1;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    if (!strcmp(mode, "local")) {
        CHECK_OK(gpucore_comm_create_local(&ctx, 1, &comm));
        if (comm) rc = run(comm, ctx, "test_zero local");
    } else {
#ifdef TEST_HAVE_MPI
        CHECK_OK(gpucore_comm_create_mpi(ctx, &comm));
        if (comm) {
            char name[64];
            snprintf(name, sizeof name, "test_zero mpi rank %d/%d", gpucore_comm_rank(comm), gpucore_comm_size(comm));
            if (!strcmp(mode, "save") || !strcmp(mode, "resume"))
                rc = ckpt_mode(comm, ctx, mode, argc > 2 ? argv[2] : "zero_ckpt");
            else if (!strcmp(mode, "stall") || !strcmp(mode, "exit"))
                rc = run_failure(comm, ctx, !strcmp(mode, "exit"));
            else rc = run(comm, ctx, name);
            int mine = rc != 0, any = 0;
            MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            if (any) rc = 1;
        }
#else
        printf("SKIP test_zero %s: this build has no MPI\n", mode);
        return 77;
#endif
    }
    gpucore_comm_destroy(comm);
    gpucore_context_destroy(ctx);
    return rc;
}
