/*
 * train.c — Hugging Face's causal-LM loss (labels shifted inside, -100 ignored,
 * the mean over the counted positions) and its backward. Training runs the layers
 * as checkpoint-executor segments (an attention and an MLP segment per layer and
 * the final norm), so every recompute policy applies; the embeddings, the head and
 * the loss run around the executor, and their gradients (full fine-tuning) are
 * added here, a tied head's being the sum of its two uses. The head and the loss run over
 * row chunks (head_loss.c): the [B, T, vocab] logits never exist.
 *
 * Gradient accumulation: the backward ops overwrite their gradient outputs, so a
 * step that accumulates puts scratch tensors in the gradient slots of one part of
 * the backward at a time (a segment, the position embedding), runs that
 * part, adds the scratch into the gradients and puts them back. The loss of such a
 * step is divided by the caller's token count of the whole accumulated batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"

/* ---------------------------------------------------------- gradient accumulation */

/* The gradient slots of one part of the backward, while their scratch stands in. */
#define GRAD_SWAP_MAX 24
typedef struct grad_swap {
    gpucore_tensor **slot[GRAD_SWAP_MAX];
    gpucore_tensor *kept[GRAD_SWAP_MAX];
    int n;
} grad_swap;

/* Put a scratch tensor of *slot's shape and dtype in the slot (an empty slot stays empty). */
static gpucore_status swap_in(gpucore_lm *lm, grad_swap *g, gpucore_tensor **slot)
{
    if (!*slot) return GPUCORE_OK;
    if (g->n == GRAD_SWAP_MAX)
        return gpucore_set_error(GPUCORE_ERR_INTERNAL, "gradient accumulation: more than %d gradients in one part",
                                 GRAD_SWAP_MAX);
    gpucore_tensor *scratch = NULL;
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_GRADIENTS);
    gpucore_status st = lm_new(lm, (*slot)->dtype, (*slot)->ndim, (*slot)->shape, &scratch);
    caching_allocator_tag_set(tag);
    if (st) return st;
    g->slot[g->n] = slot;
    g->kept[g->n++] = *slot;
    *slot = scratch;
    return GPUCORE_OK;
}

static gpucore_status swap_linear(gpucore_lm *lm, grad_swap *g, lm_linear *l)
{
    gpucore_status st = swap_in(lm, g, &l->dw);
    if (!st) st = swap_in(lm, g, &l->db);
    if (!st) st = swap_in(lm, g, &l->dla);
    if (!st) st = swap_in(lm, g, &l->dlb);
    return st;
}

/* Add each scratch (when st is OK) into its gradient, free it and put the gradient back; st or the
 * first failure. */
static gpucore_status swap_out(grad_swap *g, gpucore_stream *s, gpucore_status st)
{
    for (int i = 0; i < g->n; i++) {
        gpucore_tensor *scratch = *g->slot[i];
        if (!st) st = gpucore_axpy(g->kept[i], 1.0, scratch, s);
        gpucore_tensor_destroy(scratch);
        *g->slot[i] = g->kept[i];
    }
    g->n = 0;
    return st;
}

/* A segment's backward (fn) whose gradients are a norm's (*n_w, *n_b) and those of nlin linears,
 * accumulating when the step does. */
static gpucore_status segment_bwd(gpucore_lm *lm, gpucore_tensor **n_w, gpucore_tensor **n_b, lm_linear *lin,
                                  int nlin, gpucore_ckpt_backward_fn fn, gpucore_ckpt_call *call,
                                  const gpucore_tensor *dy, gpucore_tensor *dx, gpucore_stream *s, void *user)
{
    if (!lm->accumulate) return fn(call, dy, dx, s, user);
    grad_swap g = {.n = 0};
    gpucore_status st = swap_in(lm, &g, n_w);
    if (!st) st = swap_in(lm, &g, n_b);
    for (int i = 0; i < nlin && !st; i++) st = swap_linear(lm, &g, &lin[i]);
    if (!st) st = fn(call, dy, dx, s, user);
    return swap_out(&g, s, st);
}

/* The segments' backward callbacks: layers.c's, accumulating when the step does. */
static gpucore_status seg_attention_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                        gpucore_stream *s, void *user)
{
    lm_layer *L = user;
    return segment_bwd(L->lm, &L->dn1_w, &L->dn1_b, L->attn, L->n_attn, lm_seg_attention_bwd, call, dy, dx, s, user);
}

static gpucore_status seg_mlp_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                  gpucore_stream *s, void *user)
{
    lm_layer *L = user;
    return segment_bwd(L->lm, &L->dn2_w, &L->dn2_b, L->mlp, L->n_mlp, lm_seg_mlp_bwd, call, dy, dx, s, user);
}

static gpucore_status seg_norm_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                   gpucore_stream *s, void *user)
{
    gpucore_lm *lm = user;
    return segment_bwd(lm, &lm->dnf_w, &lm->dnf_b, NULL, 0, lm_seg_norm_bwd, call, dy, dx, s, user);
}

/* ------------------------------------------------------------------- the executor */

static gpucore_status ensure_ckpt(gpucore_lm *lm)
{
    if (lm->ckpt) return GPUCORE_OK;
    gpucore_ckpt *ck = NULL;
    gpucore_status st = gpucore_ckpt_create(lm->ctx, "language model", &ck);
    char name[64];
    for (int64_t i = 0; i < lm->cfg.layers && !st; i++) {
        snprintf(name, sizeof name, "layer %lld attention", (long long)i);
        st = gpucore_ckpt_add_custom(ck, name, lm_seg_attention_fwd, seg_attention_bwd, &lm->layer[i]);
        snprintf(name, sizeof name, "layer %lld mlp", (long long)i);
        if (!st) st = gpucore_ckpt_add_custom(ck, name, lm_seg_mlp_fwd, seg_mlp_bwd, &lm->layer[i]);
    }
    if (!st) st = gpucore_ckpt_add_custom(ck, "final norm", lm_seg_norm_fwd, seg_norm_bwd, lm);
    if (!st) st = gpucore_ckpt_set_policy(ck, (gpucore_ckpt_policy)lm->ckpt_policy, lm->ckpt_param);
    if (!st) st = gpucore_ckpt_set_seed(ck, lm->seed, 0);
    if (st) { gpucore_ckpt_destroy(ck); return st; }
    lm->ckpt = ck;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_set_checkpoint_policy(gpucore_lm *lm, gpucore_ckpt_policy policy, int64_t param)
{
    const char *op = "gpucore_lm_set_checkpoint_policy";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if ((int)policy < GPUCORE_CKPT_KEEP_ALL || (int)policy > GPUCORE_CKPT_BUDGET)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: unknown policy %d", op, (int)policy);
    if (lm->ckpt && (st = gpucore_ckpt_set_policy(lm->ckpt, policy, param))) return st;
    lm->ckpt_policy = policy;
    lm->ckpt_param = param;
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_set_seed(gpucore_lm *lm, uint64_t seed)
{
    gpucore_status st = lm_check(lm, "gpucore_lm_set_seed");
    if (st) return st;
    lm->seed = seed;
    return lm->ckpt ? gpucore_ckpt_set_seed(lm->ckpt, seed, 0) : GPUCORE_OK;
}

/* targets[:, t] = labels[:, t + 1], targets[:, T-1] = -100. */
static gpucore_status shift_labels(gpucore_lm *lm, const gpucore_tensor *labels, gpucore_tensor **targets)
{
    int64_t T = labels->shape[1];
    gpucore_tensor *dst = NULL, *src = NULL;
    gpucore_status st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)labels->dtype, 2, labels->shape, targets);
    if (!st) st = gpucore_fill(*targets, LM_IGNORE_INDEX, NULL);
    if (!st) st = gpucore_tensor_slice(*targets, 1, 0, T - 1, 1, &dst);
    if (!st) st = gpucore_tensor_slice((gpucore_tensor *)labels, 1, 1, T, 1, &src);
    if (!st) st = gpucore_copy(dst, src, NULL);
    gpucore_tensor_destroy(dst);
    gpucore_tensor_destroy(src);
    if (st) lm_destroy_tensor(targets);
    return st;
}

static gpucore_status check_batch(gpucore_lm *lm, const gpucore_tensor *ids, const gpucore_tensor *labels, const char *op)
{
    gpucore_status st = lm_check_ids(lm, ids, "input_ids", op);
    if (st) return st;
    if (labels && (st = lm_check_ids(lm, labels, "labels", op))) return st;
    if (labels && (labels->shape[0] != ids->shape[0] || labels->shape[1] != ids->shape[1]))
        return gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: labels [%lld, %lld] differ from input_ids [%lld, %lld]",
                                 op, (long long)labels->shape[0], (long long)labels->shape[1],
                                 (long long)ids->shape[0], (long long)ids->shape[1]);
    if (ids->shape[1] < 2)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: the causal-LM loss needs seq >= 2 (labels are "
                                 "shifted by one)", op);
    return lm_check_length(lm, ids->shape[1], op);
}

/* The targets that are not -100 (read on the host). */
static gpucore_status count_targets(gpucore_tensor *targets, int64_t *count, const char *op)
{
    const int64_t n = targets->shape[0] * targets->shape[1];
    int64_t *h = malloc((size_t)n * sizeof *h), c = 0;
    if (!h) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    gpucore_status st;
    if (targets->dtype == GPUCORE_I32) { /* widen on the host, from the end */
        st = gpucore_copy_to_host(h, n * 4, targets);
        for (int64_t i = n - 1; !st && i >= 0; i--) h[i] = ((const int32_t *)h)[i];
    } else {
        st = gpucore_copy_to_host(h, n * 8, targets);
    }
    for (int64_t i = 0; !st && i < n; i++) c += h[i] != LM_IGNORE_INDEX;
    if (!st) *count = c;
    free(h);
    return st;
}

gpucore_status gpucore_lm_loss(gpucore_lm *lm, const gpucore_tensor *input_ids, const gpucore_tensor *labels,
                               double *loss)
{
    const char *op = "gpucore_lm_loss";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!loss) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: loss is NULL", op);
    if ((st = check_batch(lm, input_ids, labels, op))) return st;
    gpucore_tensor *h = NULL, *targets = NULL;
    int64_t count = 0;
    st = shift_labels(lm, labels ? labels : input_ids, &targets);
    if (!st) st = count_targets(targets, &count, op);
    if (!st) st = lm_run_layers(lm, input_ids, NULL, &h);
    if (!st) st = lm_head_loss(lm, h, targets, count, NULL, NULL, 0, loss);
    gpucore_tensor_destroy(h);
    gpucore_tensor_destroy(targets);
    return st;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The token embedding's gradient on the rows the batch touches only: dwte (add: holding the
 * head's dW or the gradients accumulated so far; else zeroed first) += the rows of dx0 summed per id. The U distinct ids
 * get a compact [U, D] table from gpucore_embedding_backward (ids renumbered 0..U-1: the same
 * f32 sums in the same order as on the whole table), then each of its rows is added into its
 * row of dwte. This skips the [vocab, D] temporary, its zeroing and the addition over the whole
 * table (for GPT-2 124M 38.6M elements a step, a bf16 table the slowest op of a B 4, T 64 step
 * after the GEMMs and the optimizer). *used 0: not applicable (many distinct ids, or an id out of
 * range, or a device context), nothing was done. The distinct ids are found on the host: on a
 * GPU that copy would stall the step on a synchronisation, while the whole-table path there costs
 * a memory pass at device bandwidth, so device contexts keep it. */
static gpucore_status embedding_rows(gpucore_lm *lm, const gpucore_tensor *ids, const gpucore_tensor *dx0, int add,
                                     int *used)
{
    const int64_t B = ids->shape[0], T = ids->shape[1], N = B * T, V = lm->cfg.vocab;
    *used = 0;
    if (lm->ctx->type != GPUCORE_DEVICE_CPU) return GPUCORE_OK;
    if (N * 8 > V) return GPUCORE_OK; /* as many rows as the table has, near enough: the whole-table path */
    gpucore_tensor *idc = NULL, *remap = NULL, *part = NULL, *dst = NULL, *src = NULL;
    int64_t *h = malloc((size_t)N * 3 * sizeof *h), U = 0;
    if (!h) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_forward_backward: out of host memory");
    int64_t *uniq = h + N, *r = h + 2 * N;
    const int i32 = ids->dtype == GPUCORE_I32;
    gpucore_status st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)ids->dtype, 2, ids->shape, &idc);
    if (!st) st = gpucore_copy(idc, ids, NULL); /* contiguous */
    if (!st) st = gpucore_copy_to_host(h, N * (i32 ? 4 : 8), idc);
    if (st) goto done;
    for (int64_t i = N - 1; i32 && i >= 0; i--) h[i] = ((const int32_t *)h)[i]; /* widen in place, from the end */
    memcpy(uniq, h, (size_t)N * sizeof *h);
    qsort(uniq, (size_t)N, sizeof *uniq, cmp_i64);
    if (uniq[0] < 0 || uniq[N - 1] >= V) goto done; /* NaN rows: leave them to the whole-table path */
    for (int64_t i = 0; i < N; i++)
        if (!U || uniq[i] != uniq[U - 1]) uniq[U++] = uniq[i];
    for (int64_t i = 0; i < N; i++) {
        const int64_t *at = bsearch(&h[i], uniq, (size_t)U, sizeof *uniq, cmp_i64);
        r[i] = at - uniq;
    }
    int64_t pshape[2] = {U, lm->cfg.hidden};
    st = gpucore_tensor_create(lm->ctx, GPUCORE_I64, 2, ids->shape, &remap);
    if (!st) st = gpucore_copy_from_host(remap, r, N * 8);
    if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, pshape, &part);
    if (!st) st = gpucore_embedding_backward(part, dx0, remap, NULL);
    if (!st && !add) st = gpucore_fill(lm->dwte, 0.0, NULL);
    for (int64_t j = 0; j < U && !st; j++) {
        st = gpucore_tensor_slice(lm->dwte, 0, uniq[j], uniq[j] + 1, 1, &dst);
        if (!st) st = gpucore_tensor_slice(part, 0, j, j + 1, 1, &src);
        if (!st) st = gpucore_axpy(dst, 1.0, src, NULL);
        lm_destroy_tensor(&dst);
        lm_destroy_tensor(&src);
    }
    if (!st) *used = 1;
done:
    free(h);
    gpucore_tensor_destroy(idc);
    gpucore_tensor_destroy(remap);
    gpucore_tensor_destroy(part);
    return st;
}

/* Gradients of the embeddings from dx0 [B, T, D] (full fine-tuning). */
static gpucore_status embedding_grads(gpucore_lm *lm, const gpucore_tensor *ids, const gpucore_tensor *pos,
                                      const gpucore_tensor *dx0)
{
    gpucore_tensor *tmp = NULL, *dpe = NULL;
    int rows = 0;
    const int add = !lm->head || lm->accumulate; /* dwte holds the tied head's dW or earlier micro-batches' */
    grad_swap g = {.n = 0};
    gpucore_status st = embedding_rows(lm, ids, dx0, add, &rows);
    if (!st && !rows && !add) {
        st = gpucore_embedding_backward(lm->dwte, dx0, ids, NULL);
    } else if (!st && !rows) {
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, lm->wte->shape, &tmp);
        if (!st) st = gpucore_embedding_backward(tmp, dx0, ids, NULL);
        if (!st) st = gpucore_axpy(lm->dwte, 1.0, tmp, NULL);
    }
    if (!st && lm->wpe) {
        int64_t shape[2] = {dx0->shape[1], dx0->shape[2]};
        st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 2, shape, &dpe);
        if (!st) st = gpucore_reduce(GPUCORE_REDUCTION_SUM, dpe, dx0, 0, NULL);
        if (!st && lm->accumulate) st = swap_in(lm, &g, &lm->dwpe);
        if (!st) st = gpucore_embedding_backward(lm->dwpe, dpe, pos, NULL);
        st = swap_out(&g, NULL, st);
    }
    gpucore_tensor_destroy(tmp);
    gpucore_tensor_destroy(dpe);
    return st;
}

/* The loss and its backward, the head and loss in row chunks (head_loss.c). divisor 0: the mean
 * over the counted positions; else the loss is their sum / divisor. accumulate: add into the
 * gradients. */
static gpucore_status forward_backward(gpucore_lm *lm, const gpucore_tensor *input_ids, const gpucore_tensor *labels,
                                       int accumulate, int64_t divisor, double *loss, const char *op)
{
    gpucore_status st;
    if (!loss) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: loss is NULL", op);
    if ((st = check_batch(lm, input_ids, labels, op))) return st;
    if (!lm->n_train)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: nothing is trainable: add LoRA adapters "
                                 "(gpucore_lm_add_lora / load_adapter) or call gpucore_lm_set_full_finetune", op);
    if ((st = ensure_ckpt(lm))) return st;
    gpucore_memory_stats ms = {.struct_size = sizeof ms};
    if ((st = gpucore_memory_get_stats(lm->ctx, GPUCORE_MEMORY_DEVICE, &ms))) return st;
    gpucore_tensor *x0 = NULL, *pos = NULL, *y = NULL, *targets = NULL, *dy = NULL, *dx0 = NULL;
    int started = 0;
    lm->training = 1;
    lm->accumulate = accumulate;
    /* the allocator's books get each allocation's category (gpucore_mem_category): the executor
     * tags its own (transient, and activations for what it keeps), swap_in the accumulation scratch */
    const int tag = caching_allocator_tag_set(GPUCORE_MEM_ACTIVATIONS);
    st = shift_labels(lm, labels ? labels : input_ids, &targets);
    if (!st && !divisor) st = count_targets(targets, &divisor, op);
    if (!st) st = lm_embed(lm, input_ids, 0, &x0, &pos, NULL);
    if (!st) { st = gpucore_ckpt_forward(lm->ckpt, x0, &y); started = !st; }
    caching_allocator_tag_set(GPUCORE_MEM_HEAD_LOSS);
    if (!st) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 3, y->shape, &dy);
    /* the head's dW (a tied head's goes into the embedding's gradient, which the embedding adds to) */
    gpucore_tensor *dhead = lm->full_ft ? (lm->head ? lm->dhead : lm->dwte) : NULL;
    if (!st) st = lm_head_loss(lm, y, targets, divisor, dy, dhead, accumulate, loss);
    caching_allocator_tag_set(GPUCORE_MEM_TRANSIENT);
    if (!st && lm->full_ft) st = gpucore_tensor_create(lm->ctx, (gpucore_dtype)lm->dtype, 3, x0->shape, &dx0);
    if (!st) { st = gpucore_ckpt_backward(lm->ckpt, dy, dx0); started = 0; }
    if (!st && lm->full_ft) st = embedding_grads(lm, input_ids, pos, dx0);
    caching_allocator_tag_set(tag);
    if (!st) st = gpucore_context_synchronize(lm->ctx);
    if (started) gpucore_ckpt_reset(lm->ckpt);
    lm->training = 0;
    lm->accumulate = 0;
    gpucore_tensor *all[] = {x0, pos, targets, dy, dx0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpucore_tensor_destroy(all[i]);
    if (st == GPUCORE_ERR_OUT_OF_MEMORY) lm_explain_oom(lm, input_ids->shape[0], input_ids->shape[1], ms.allocated_bytes);
    return st;
}

gpucore_status gpucore_lm_forward_backward(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                           const gpucore_tensor *labels, double *loss)
{
    const char *op = "gpucore_lm_forward_backward";
    gpucore_status st = lm_check(lm, op);
    return st ? st : forward_backward(lm, input_ids, labels, 0, 0, loss, op);
}

void gpucore_lm_backward_options_init(gpucore_lm_backward_options *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
}

gpucore_status gpucore_lm_forward_backward_ex(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                              const gpucore_tensor *labels, const gpucore_lm_backward_options *opts,
                                              double *loss)
{
    const char *op = "gpucore_lm_forward_backward_ex";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    gpucore_lm_backward_options o;
    gpucore_lm_backward_options_init(&o);
    if (opts) {
        if (opts->struct_size != (int64_t)sizeof o)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->struct_size is %lld; set it with "
                                     "gpucore_lm_backward_options_init (sizeof = %zu)", op,
                                     (long long)opts->struct_size, sizeof o);
        o = *opts;
    }
    if (o.accumulate != 0 && o.accumulate != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: accumulate is %d; use 0 (overwrite the "
                                 "gradients) or 1 (add into them)", op, o.accumulate);
    if (o.total_label_tokens < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: total_label_tokens is %lld; give the label "
                                 "tokens of the whole accumulated batch (gpucore_lm_count_label_tokens summed over "
                                 "its micro-batches), or 0 for this batch's own mean", op,
                                 (long long)o.total_label_tokens);
    return forward_backward(lm, input_ids, labels, o.accumulate, o.total_label_tokens, loss, op);
}

gpucore_status gpucore_lm_count_label_tokens(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                             const gpucore_tensor *labels, int64_t *count)
{
    const char *op = "gpucore_lm_count_label_tokens";
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    if (!count) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: count is NULL", op);
    *count = 0;
    if ((st = check_batch(lm, input_ids, labels, op))) return st;
    gpucore_tensor *targets = NULL;
    st = shift_labels(lm, labels ? labels : input_ids, &targets);
    if (!st) st = count_targets(targets, count, op);
    gpucore_tensor_destroy(targets);
    return st;
}

static gpucore_status host_batch(gpucore_lm *lm, const int64_t *ids, const int64_t *labels, int64_t batch, int64_t seq,
                                 const char *op, gpucore_tensor **ti, gpucore_tensor **tl)
{
    *tl = NULL;
    gpucore_status st = lm_ids_from_host(lm, ids, batch, seq, op, ti);
    if (st || !labels) return st;
    for (int64_t i = 0; i < batch * seq; i++)
        if (labels[i] != LM_IGNORE_INDEX && (labels[i] < 0 || labels[i] >= lm->cfg.vocab)) {
            lm_destroy_tensor(ti);
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: label %lld at [%lld, %lld] is neither -100 nor "
                                     "in [0, vocab_size = %lld)", op, (long long)labels[i], (long long)(i / seq),
                                     (long long)(i % seq), (long long)lm->cfg.vocab);
        }
    int64_t shape[2] = {batch, seq};
    st = gpucore_tensor_create(lm->ctx, GPUCORE_I64, 2, shape, tl);
    if (!st) st = gpucore_copy_from_host(*tl, labels, batch * seq * 8);
    if (st) { lm_destroy_tensor(ti); lm_destroy_tensor(tl); }
    return st;
}

/* The host-array forms: the batch copied into tensors, then the tensor call (loss, or loss + backward). */
static gpucore_status host_run(gpucore_lm *lm, const int64_t *input_ids, const int64_t *labels, int64_t batch,
                               int64_t seq, double *loss, int backward, const char *op)
{
    gpucore_status st = lm_check(lm, op);
    if (st) return st;
    gpucore_tensor *ti = NULL, *tl = NULL;
    if ((st = host_batch(lm, input_ids, labels, batch, seq, op, &ti, &tl))) return st;
    st = backward ? gpucore_lm_forward_backward(lm, ti, tl, loss) : gpucore_lm_loss(lm, ti, tl, loss);
    gpucore_tensor_destroy(ti);
    gpucore_tensor_destroy(tl);
    return st;
}

gpucore_status gpucore_lm_loss_host(gpucore_lm *lm, const int64_t *input_ids, const int64_t *labels, int64_t batch,
                                    int64_t seq, double *loss)
{
    return host_run(lm, input_ids, labels, batch, seq, loss, 0, "gpucore_lm_loss_host");
}

gpucore_status gpucore_lm_forward_backward_host(gpucore_lm *lm, const int64_t *input_ids, const int64_t *labels,
                                                int64_t batch, int64_t seq, double *loss)
{
    return host_run(lm, input_ids, labels, batch, seq, loss, 1, "gpucore_lm_forward_backward_host");
}
