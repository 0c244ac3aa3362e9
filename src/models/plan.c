/*
 * plan.c — the memory plan of a training step (gpucore_lm_plan): the step's allocations
 * replayed on a ledger instead of a device. Each buffer the model layer, the checkpoint
 * executor, the head and loss and the optimizer would allocate is entered in the order they
 * allocate it (rounded by the caching allocator's own rule), referenced as they reference it
 * (the executor's saves, stored inputs, the segment outputs passed along) and freed when its
 * last reference goes, so the ledger's peak is the allocator's allocated peak of the step and
 * what each category holds at that moment. The shapes come from the model's registry
 * (lm_build_registry, run on the config alone when no model is loaded), the head's chunk rows
 * from head_loss.c's rule, the budget policy's plan from the executor's own search fed with
 * the segments' planned records. The replay follows layers.c, train.c, head_loss.c,
 * checkpoint.c and lora.c: a change to what they allocate is a change here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lm_internal.h"
#include "alloc/caching_allocator.h"
#include "train/checkpoint_internal.h"

/* ------------------------------------------------------------------ the ledger */

typedef struct buf { int64_t bytes; void *ptr; int cat, refs; } buf;

typedef struct ledger {
    caching_allocator *a;          /* the allocator's own block and segment rules, over no memory */
    uintptr_t next;                /* the next address its raw segments get */
    buf *b;
    int64_t n, cap;
    int64_t live[GPUCORE_MEM_CATEGORIES], total, peak, at_peak[GPUCORE_MEM_CATEGORIES];
    int phase;                     /* where the replay stands: a gpucore_ckpt_phase or -1 */
    int64_t seg;                   /* executor segment, -1 outside */
    const char *what;              /* outside the executor: "head and loss", ... */
    char where[64];
    int phase_at_peak;
    int64_t seg_at_peak;
    int oom;                       /* host allocation failed */
    int64_t limit;                 /* > 0: the allocator's limit (gpucore_memory_set_limit) */
    char limit_hit[96];            /* where the first request past the limit was: "" for none */
} ledger;

typedef int64_t id;                /* a buffer; -1: none */
#define NONE ((id)-1)

/* Raw segments at addresses that are never touched: the allocator keeps its books outside them. */
static gpucore_status raw_alloc(void *bctx, size_t bytes, void **ptr)
{
    uintptr_t *next = bctx;
    *ptr = (void *)*next;
    *next += (bytes + 4095) & ~(size_t)4095;
    return GPUCORE_OK;
}

static void raw_free(void *bctx, void *ptr)
{
    (void)bctx;
    (void)ptr;
}

/* Events that are always complete: under a limit the allocator waits on a cached segment's stream before it
 * releases the segment, and the ledger's one stream has nothing queued. */
static gpucore_status event_none(void *bctx, void **event)
{
    (void)bctx;
    *event = (void *)&event_none;
    return GPUCORE_OK;
}

static gpucore_status event_done(void *bctx, void *event)
{
    (void)bctx;
    (void)event;
    return GPUCORE_OK;
}

static gpucore_status event_record_none(void *bctx, void *event, void *stream)
{
    (void)stream;
    return event_done(bctx, event);
}

static void event_drop(void *bctx, void *event)
{
    (void)bctx;
    (void)event;
}

/* no memory information: one stream, no device limit */
static const gpucore_backend no_backend = {.event_create_untimed = event_none, .event_record = event_record_none,
                                           .event_synchronize = event_done, .event_query = event_done,
                                           .event_destroy = event_drop, .stream_synchronize = event_done};

static int ledger_init(ledger *g, int64_t limit)
{
    memset(g, 0, sizeof *g);
    g->limit = limit;
    g->phase = -1;
    g->seg = -1;
    g->next = (uintptr_t)1 << 44;
    caching_allocator_params p = {.be = &no_backend, .bctx = &g->next, .raw_alloc = raw_alloc, .raw_free = raw_free,
                                  .name = "plan", .what = "planned memory"};
    if (caching_allocator_create(&p, &g->a) != GPUCORE_OK) return 0;
    if (limit > 0) caching_allocator_set_limit(g->a, limit);
    return 1;
}

static void ledger_free(ledger *g)
{
    caching_allocator_destroy(g->a);
    free(g->b);
}

static int64_t allocated_now(ledger *g)
{
    gpucore_memory_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    caching_allocator_get_stats(g->a, &st);
    return st.allocated_bytes;
}

static void note_peak(ledger *g)
{
    if (g->total <= g->peak) return;
    g->peak = g->total;
    memcpy(g->at_peak, g->live, sizeof g->live);
    g->phase_at_peak = g->phase;
    g->seg_at_peak = g->seg;
    snprintf(g->where, sizeof g->where, "%s", g->what ? g->what : "");
}

/* A block as the allocator hands it out for `bytes` (its size: the request rounded, or a whole
 * free block or segment when the rest is too small to split off). */
static id alloc_buf(ledger *g, int cat, int64_t bytes)
{
    if (g->n == g->cap) {
        int64_t nc = g->cap ? g->cap * 2 : 256;
        buf *nb = realloc(g->b, sizeof *nb * (size_t)nc);
        if (!nb) { g->oom = 1; return NONE; }
        g->b = nb;
        g->cap = nc;
    }
    void *ptr = NULL;
    int64_t size = 0;
    if (bytes > 0) {
        const int64_t before = allocated_now(g);
        if (caching_allocator_alloc(g->a, bytes, (void *)1, &ptr)) {
            if (g->limit <= 0) { g->oom = 1; return NONE; }
            if (!g->limit_hit[0]) /* past the limit: the rest of the replay goes on without this buffer */
                snprintf(g->limit_hit, sizeof g->limit_hit, "%lld bytes asked at %s with %lld allocated",
                         (long long)bytes, g->what ? g->what : "", (long long)g->total);
            gpucore_clear_error();
            return NONE;
        }
        size = allocated_now(g) - before;
    }
    g->b[g->n] = (buf){size, ptr, cat, 1};
    g->live[cat] += size;
    g->total += size;
    note_peak(g);
    return g->n++;
}

static id ref(ledger *g, id x)
{
    if (x >= 0) g->b[x].refs++;
    return x;
}

static void unref(ledger *g, id x)
{
    if (x < 0 || --g->b[x].refs > 0) return;
    g->live[g->b[x].cat] -= g->b[x].bytes;
    g->total -= g->b[x].bytes;
    if (g->b[x].ptr) caching_allocator_free(g->a, g->b[x].ptr);
}

/* x is held as `cat` from now on (a segment's output passed on, a tensor the executor keeps). */
static void recat(ledger *g, id x, int cat)
{
    if (x < 0 || g->b[x].refs <= 0 || g->b[x].cat == cat) return;
    g->live[g->b[x].cat] -= g->b[x].bytes;
    g->live[cat] += g->b[x].bytes;
    g->b[x].cat = cat;
}

/* A buffer that exists only for a moment (an op's scratch): counted, then gone. */
static void moment(ledger *g, int cat, int64_t bytes)
{
    unref(g, alloc_buf(g, cat, bytes));
}

/* ------------------------------------------------------------------ the model */

typedef struct shape {
    const gpucore_lm *lm;          /* the registry (a loaded model or one built from the config) */
    const gpucore_lm_plan_options *o;
    int64_t B, T, N, D, e;         /* rows, tokens, B·T, hidden, dtype bytes */
    int dtype, cuda, ln;
    int fused, gelu, learned;      /* the architecture's kinds: q|k|v one linear, GELU MLP, learned positions */
    int64_t ws;                    /* CUDA matmul workspace per GEMM, 0 on the CPU */
    int64_t lora_r;
    int lora_drop;
    int accumulate;
} shape;

static int64_t act(const shape *m, int64_t cols) { return m->N * cols * m->e; }

static int has_lora(const shape *m, const lm_linear *l)
{
    if (m->lora_r <= 0) return 0;
    for (int64_t t = 0; t < m->o->n_lora_targets; t++)
        if (lm_module_matches(l->module, m->o->lora_targets[t])) return 1;
    return 0;
}

/* A GEMM's workspace while it runs (CUDA). */
static void gemm(ledger *g, const shape *m)
{
    if (m->ws) moment(g, GPUCORE_MEM_WORKSPACE, m->ws);
}

/* lin_fwd: y [N, out]; with an adapter and saving, xa [N, r] (saved), the dropout scratch. */
static id lin_fwd(ledger *g, const shape *m, const lm_linear *l, int call, id *xa)
{
    id y = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, l->out));
    *xa = NONE;
    gemm(g, m);
    if (has_lora(m, l)) {
        id h = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, m->lora_r)); /* xa, or lora.c's own h scratch */
        if (m->lora_drop) moment(g, GPUCORE_MEM_TRANSIENT, act(m, l->in));
        gemm(g, m);
        if (call) *xa = h;
        else unref(g, h);
    }
    return y;
}

/* lin_bwd: dx [N, in] (when wanted) and the adapter's scratch. */
static id lin_bwd(ledger *g, const shape *m, const lm_linear *l, int want_dx)
{
    id dx = want_dx ? alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, l->in)) : NONE;
    if (has_lora(m, l)) {
        id xd = m->lora_drop ? alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, l->in)) : NONE;
        id dh = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, m->lora_r));
        gemm(g, m);
        if (want_dx && m->lora_drop) moment(g, GPUCORE_MEM_TRANSIENT, act(m, l->in));
        unref(g, xd);
        unref(g, dh);
    } else if (want_dx || m->o->full_finetune) {
        gemm(g, m);
    }
    return dx;
}

/* The saves of one segment run (kept: held until its backward). */
#define MAX_SAVES 24
typedef struct saves { id s[MAX_SAVES]; int n; } saves;

static void save(ledger *g, saves *sv, id x)
{
    if (sv && sv->n < MAX_SAVES) sv->s[sv->n++] = ref(g, x);
}

static void release(ledger *g, saves *sv)
{
    for (int i = 0; i < sv->n; i++) unref(g, sv->s[i]);
    sv->n = 0;
}

/* norm_fwd: n [N, D], rstd (and mean) f32 [N]; saves x, rstd, mean, n. */
static id norm_fwd(ledger *g, const shape *m, id x, saves *sv)
{
    id n = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, m->D));
    id rstd = alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->N * 4);
    id mean = m->ln ? alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->N * 4) : NONE;
    save(g, sv, x);
    save(g, sv, rstd);
    save(g, sv, mean >= 0 ? mean : rstd);
    save(g, sv, n);
    unref(g, mean);
    unref(g, rstd);
    return n;
}

static id attention_fwd(ledger *g, const shape *m, const lm_layer *L, id x, saves *sv)
{
    const lm_config *c = &m->lm->cfg;
    id n = norm_fwd(g, m, x, sv), p[3] = {NONE, NONE, NONE}, xa[4] = {NONE, NONE, NONE, NONE};
    const int np = m->fused ? 1 : 3;
    for (int k = 0; k < np; k++) p[k] = lin_fwd(g, m, &L->attn[k], sv != NULL, &xa[k]);
    id ao = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, c->heads * c->head_dim));
    id lse = sv ? alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->B * c->heads * m->T * 4) : NONE;
    id o = lin_fwd(g, m, &L->attn[m->fused ? 1 : 3], sv != NULL, &xa[3]);
    for (int k = 0; k < 3; k++) save(g, sv, p[m->fused ? 0 : k]);
    save(g, sv, ao);
    save(g, sv, lse);
    for (int k = 0; k < 4; k++) if (xa[k] >= 0) save(g, sv, xa[k]);
    id all[] = {n, p[0], p[1], p[2], xa[0], xa[1], xa[2], xa[3], ao, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) unref(g, all[i]);
    return o;
}

static id mlp_fwd(ledger *g, const shape *m, const lm_layer *L, id x, saves *sv)
{
    id n = norm_fwd(g, m, x, sv), xa[3] = {NONE, NONE, NONE}, b = NONE;
    id a = lin_fwd(g, m, &L->mlp[0], sv != NULL, &xa[0]);
    id mm = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, L->mlp[0].out));
    if (!m->gelu) b = lin_fwd(g, m, &L->mlp[1], sv != NULL, &xa[1]);
    id o = lin_fwd(g, m, &L->mlp[m->gelu ? 1 : 2], sv != NULL, &xa[2]);
    save(g, sv, a);
    save(g, sv, b >= 0 ? b : a);
    save(g, sv, mm);
    for (int k = 0; k < 3; k++) if (xa[k] >= 0) save(g, sv, xa[k]);
    id all[] = {n, a, b, mm, xa[0], xa[1], xa[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) unref(g, all[i]);
    return o;
}

/* Segment i: 2l attention, 2l+1 MLP of layer l, the last the final norm. */
static id segment_fwd(ledger *g, const shape *m, int64_t i, id x, saves *sv)
{
    const int64_t nl = m->lm->cfg.layers;
    if (i == 2 * nl) return norm_fwd(g, m, x, sv);
    const lm_layer *L = &m->lm->layer[i / 2];
    return i % 2 ? mlp_fwd(g, m, L, x, sv) : attention_fwd(g, m, L, x, sv);
}

static int has_bias(const shape *m, const lm_linear *l)
{
    for (int64_t i = 0; i < m->lm->n_params; i++)
        if (m->lm->params[i].slot == &l->b) return 1;
    return 0;
}

/* A part's gradients replaced by scratch while an accumulating step runs it (train.c). */
static int64_t grad_bytes_of_norm(const shape *m) { return m->o->full_finetune ? m->D * m->e : 0; }

static void accumulation_scratch(ledger *g, const shape *m, const lm_linear *lin, int nlin, int norms, id *out, int *n)
{
    *n = 0;
    if (!m->accumulate) return;
    for (int k = 0; k < norms; k++)
        if (grad_bytes_of_norm(m)) out[(*n)++] = alloc_buf(g, GPUCORE_MEM_GRADIENTS, grad_bytes_of_norm(m));
    for (int k = 0; k < nlin; k++) {
        const lm_linear *l = &lin[k];
        if (has_lora(m, l)) {
            out[(*n)++] = alloc_buf(g, GPUCORE_MEM_GRADIENTS, m->lora_r * l->in * m->e);
            out[(*n)++] = alloc_buf(g, GPUCORE_MEM_GRADIENTS, l->out * m->lora_r * m->e);
        } else if (m->o->full_finetune) {
            out[(*n)++] = alloc_buf(g, GPUCORE_MEM_GRADIENTS, l->out * l->in * m->e);
            if (has_bias(m, l)) out[(*n)++] = alloc_buf(g, GPUCORE_MEM_GRADIENTS, l->out * m->e);
        }
    }
}

static void segment_bwd(ledger *g, const shape *m, int64_t i, int want_dx)
{
    const int64_t nl = m->lm->cfg.layers;
    const lm_config *c = &m->lm->cfg;
    const int ft = m->o->full_finetune;
    id scratch[32];
    int ns = 0;
    if (i == 2 * nl) {                                 /* final norm: into dx directly */
        accumulation_scratch(g, m, NULL, 0, m->ln ? 2 : 1, scratch, &ns);
    } else if (i % 2 == 0) {                           /* attention */
        const lm_layer *L = &m->lm->layer[i / 2];
        accumulation_scratch(g, m, L->attn, L->n_attn, m->ln ? 2 : 1, scratch, &ns);
        const int nla = m->fused ? 2 : 4, want_dh = want_dx || ft;
        id dao = lin_bwd(g, m, &L->attn[nla - 1], 1);
        id d0 = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, c->heads * c->head_dim));
        id d1 = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, c->kv_heads * c->head_dim));
        id d2 = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, c->kv_heads * c->head_dim));
        id dh = NONE, dqkv = NONE;
        if (m->fused) {
            dqkv = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, L->attn[0].out));
            dh = lin_bwd(g, m, &L->attn[0], want_dh);
        } else {
            for (int k = 0; k < 3; k++) {
                id t = lin_bwd(g, m, &L->attn[k], want_dh);
                if (dh < 0) dh = t;
                else unref(g, t);
            }
        }
        id all[] = {dao, d0, d1, d2, dqkv, dh};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) unref(g, all[k]);
    } else {                                           /* MLP */
        const lm_layer *L = &m->lm->layer[i / 2];
        accumulation_scratch(g, m, L->mlp, L->n_mlp, m->ln ? 2 : 1, scratch, &ns);
        const int want_dh = want_dx || ft;
        const int64_t F = L->mlp[0].out;
        id dm = lin_bwd(g, m, &L->mlp[m->gelu ? 1 : 2], 1), da = NONE, db = NONE, dh = NONE;
        if (m->gelu) {
            dh = lin_bwd(g, m, &L->mlp[0], want_dh);
        } else {
            da = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, F));
            db = alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, F));
            dh = lin_bwd(g, m, &L->mlp[0], want_dh);
            unref(g, lin_bwd(g, m, &L->mlp[1], want_dh));
        }
        id all[] = {dm, da, db, dh};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) unref(g, all[k]);
    }
    for (int k = 0; k < ns; k++) unref(g, scratch[k]);
}

/* ------------------------------------------------------------------ the executor */

typedef struct exec {
    int64_t n;
    int32_t *modes;
    saves *sv;
    id *stored;
} exec;

static void set_where(ledger *g, const shape *m, int64_t seg, int phase)
{
    g->seg = seg;
    g->phase = phase;
    static const char *const ph[] = {"forward", "recompute", "backward"};
    static char buf[64];
    const int64_t nl = m->lm->cfg.layers;
    if (seg < 0) return;
    if (seg == 2 * nl) snprintf(buf, sizeof buf, "final norm %s", ph[phase]);
    else snprintf(buf, sizeof buf, "layer %lld %s %s", (long long)(seg / 2), seg % 2 ? "mlp" : "attention", ph[phase]);
    g->what = buf;
}

/* gpucore_ckpt_forward: y (held by the executor); x0 stays the caller's. */
static id exec_forward(ledger *g, const shape *m, exec *x, id x0)
{
    id cur = ref(g, x0);
    for (int64_t i = 0; i < x->n; i++) {
        set_where(g, m, i, GPUCORE_CKPT_PHASE_FORWARD);
        const int keep = x->modes[i] == GPUCORE_CKPT_KEPT;
        saves tmp = {.n = 0};
        id out = segment_fwd(g, m, i, cur, &tmp);
        if (keep) {
            x->sv[i] = tmp;
            for (int k = 0; k < tmp.n; k++) recat(g, tmp.s[k], GPUCORE_MEM_ACTIVATIONS);
        } else {
            release(g, &tmp);
        }             /* dropped at once under a recompute policy */
        if (x->modes[i] == GPUCORE_CKPT_CHECKPOINT) x->stored[i] = cur;
        else unref(g, cur);
        cur = out;
        recat(g, cur, GPUCORE_MEM_ACTIVATIONS);
    }
    return cur;
}

static id backward_one(ledger *g, const shape *m, exec *x, int64_t i, id gy, int dx_user)
{
    set_where(g, m, i, GPUCORE_CKPT_PHASE_BACKWARD);
    id dx = i > 0 ? alloc_buf(g, GPUCORE_MEM_TRANSIENT, act(m, m->D)) : NONE;
    segment_bwd(g, m, i, i > 0 || dx_user);
    release(g, &x->sv[i]);
    unref(g, gy);
    return dx;
}

/* gpucore_ckpt_backward from dy (the caller's). */
static void exec_backward(ledger *g, const shape *m, exec *x, id y, id dy, int dx_user)
{
    unref(g, y);
    id gy = ref(g, dy);
    for (int64_t i = x->n - 1; i >= 0;) {
        if (x->modes[i] == GPUCORE_CKPT_KEPT) {
            gy = backward_one(g, m, x, i, gy, dx_user);
            i--;
            continue;
        }
        int64_t e = i, b0 = i;
        while (b0 > 0 && x->modes[b0] != GPUCORE_CKPT_CHECKPOINT) b0--;
        id cur = ref(g, x->stored[b0]);
        for (int64_t j = b0; j <= e; j++) {
            set_where(g, m, j, GPUCORE_CKPT_PHASE_RECOMPUTE);
            id out = segment_fwd(g, m, j, cur, &x->sv[j]);
            for (int k = 0; k < x->sv[j].n; k++) recat(g, x->sv[j].s[k], GPUCORE_MEM_ACTIVATIONS);
            unref(g, cur);
            cur = out;
        }
        unref(g, cur);
        unref(g, x->stored[b0]);
        x->stored[b0] = NONE;
        for (int64_t j = e; j >= b0; j--) gy = backward_one(g, m, x, j, gy, dx_user);
        i = b0 - 1;
    }
    unref(g, gy);
}

/* The records the executor measures for the budget planner, from a replay of each segment. */
static void budget_records(ledger *g, const shape *m, ckpt_top *t, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        ledger s;
        if (!ledger_init(&s, 0)) { g->oom = 1; return; }
        id x = alloc_buf(&s, GPUCORE_MEM_ACTIVATIONS, act(m, m->D));
        const int64_t before = s.total;
        s.peak = s.total;
        saves sv = {.n = 0};
        id out = segment_fwd(&s, m, i, x, &sv);
        t[i].out_bytes = act(m, m->D);
        t[i].transient = s.peak - before;
        t[i].saves_input = 1;
        t[i].saves_output = i == n - 1;    /* the final norm saves its output */
        t[i].saved_bytes = 0;
        for (int k = 0; k < sv.n; k++) {   /* unique storages other than the input, unrounded as measured */
            int dup = sv.s[k] == x;
            for (int j = 0; j < k && !dup; j++) dup = sv.s[j] == sv.s[k];
            if (!dup) t[i].saved_bytes += s.b[sv.s[k]].bytes;
        }
        t[i].bwd_known = 0;
        release(&s, &sv);
        unref(&s, out);
        unref(&s, x);
        if (s.oom) g->oom = 1;
        ledger_free(&s);
    }
}

/* ------------------------------------------------------------------ the step */

static void persistent(ledger *g, const shape *m)
{
    const gpucore_lm *lm = m->lm;
    const gpucore_lm_plan_options *o = m->o;
    const int64_t e = m->e;
    int64_t trainable[4096 + 64];
    int64_t nt = 0, extra = 0;
    for (int64_t i = 0; i < lm->n_params; i++) {
        const lm_param *p = &lm->params[i];
        const int64_t numel = p->ndim == 1 ? p->shape[0] : p->shape[0] * p->shape[1];
        int64_t bytes = numel * e;
        if (o->quant_format >= 0)          /* a decoder linear's weight at its format's size */
            for (int64_t l = 0; l < lm->cfg.layers; l++) {
                const lm_layer *L = &lm->layer[l];
                for (int k = 0; k < L->n_attn + L->n_mlp; k++) {
                    const lm_linear *li = k < L->n_attn ? &L->attn[k] : &L->mlp[k - L->n_attn];
                    if (p->slot == &li->w)
                        gpucore_quant_size((gpucore_quant_format)o->quant_format, li->out, li->in,
                                           o->quant_block_size, o->quant_flags, &bytes);
                }
            }
        alloc_buf(g, GPUCORE_MEM_WEIGHTS, bytes);
        if (o->full_finetune) {
            alloc_buf(g, GPUCORE_MEM_GRADIENTS, numel * e);
            if (nt < (int64_t)(sizeof trainable / sizeof trainable[0])) trainable[nt++] = numel;
            else extra += numel;
        }
    }
    if (lm->head_q.wq) /* a GGUF file's quantized head, kept beside the dense one for decode steps */
        alloc_buf(g, GPUCORE_MEM_WEIGHTS, gpucore_tensor_nbytes(lm->head_q.wq));
    if (lm->cfg.rope_theta > 0) {         /* RoPE tables, f32 [max_pos, head_dim / 2] */
        alloc_buf(g, GPUCORE_MEM_WEIGHTS, lm->cfg.max_pos * (lm->cfg.head_dim / 2) * 4);
        alloc_buf(g, GPUCORE_MEM_WEIGHTS, lm->cfg.max_pos * (lm->cfg.head_dim / 2) * 4);
    }
    for (int64_t l = 0; m->lora_r > 0 && l < lm->cfg.layers; l++) {
        const lm_layer *L = &lm->layer[l];
        for (int k = 0; k < L->n_attn + L->n_mlp; k++) {
            const lm_linear *li = k < L->n_attn ? &L->attn[k] : &L->mlp[k - L->n_attn];
            if (!has_lora(m, li)) continue;
            const int64_t na = m->lora_r * li->in, nb = li->out * m->lora_r;
            alloc_buf(g, GPUCORE_MEM_WEIGHTS, na * e);
            alloc_buf(g, GPUCORE_MEM_WEIGHTS, nb * e);
            alloc_buf(g, GPUCORE_MEM_GRADIENTS, na * e);
            alloc_buf(g, GPUCORE_MEM_GRADIENTS, nb * e);
            if (nt + 2 <= (int64_t)(sizeof trainable / sizeof trainable[0])) { trainable[nt++] = na; trainable[nt++] = nb; }
            else extra += na + nb;
        }
    }
    if (o->optimizer < 0) return;          /* optim.c: state0, state1, master per parameter; lr, step */
    const int adamw = o->optimizer == GPUCORE_OPTIMIZER_ADAMW;
    for (int64_t i = 0; i <= nt; i++) {
        const int64_t numel = i < nt ? trainable[i] : extra;
        if (!numel) continue;
        if (adamw || o->momentum > 0) alloc_buf(g, GPUCORE_MEM_OPTIMIZER, numel * 4);
        if (adamw) alloc_buf(g, GPUCORE_MEM_OPTIMIZER, numel * 4);
        if (m->dtype != GPUCORE_F32) alloc_buf(g, GPUCORE_MEM_OPTIMIZER, numel * 4);
    }
    alloc_buf(g, GPUCORE_MEM_OPTIMIZER, 4);
    alloc_buf(g, GPUCORE_MEM_OPTIMIZER, 4);
}

/* lm_head_loss over chunks: dy [B, T, D] is made by train.c before it. */
static void head_loss(ledger *g, const shape *m)
{
    g->seg = -1;
    g->phase = -1;
    g->what = "head and loss";
    const int64_t V = m->lm->cfg.vocab;
    const int64_t R = lm_head_chunk_rows_for(V, m->dtype, m->o->head_chunk_rows > 0 ? m->o->head_chunk_rows
                                             : m->lm->head_chunk_rows, m->N);
    const int64_t chunks = (m->N + R - 1) / R;
    id logits = alloc_buf(g, GPUCORE_MEM_HEAD_LOSS, R * V * m->e);
    id losses = alloc_buf(g, GPUCORE_MEM_HEAD_LOSS, chunks * 4);
    id dloss = alloc_buf(g, GPUCORE_MEM_HEAD_LOSS, 4);
    gemm(g, m);
    unref(g, logits);
    unref(g, losses);
    unref(g, dloss);
}

/* The embeddings' gradients (full fine-tuning; train.c's embedding_grads). */
static void embedding_grads(ledger *g, const shape *m)
{
    const gpucore_lm *lm = m->lm;
    g->what = "embedding backward";
    const int tied = lm->cfg.tie;
    const int add = tied || m->accumulate;
    if (!m->cuda && m->N * 8 <= lm->cfg.vocab) {      /* the rows the batch touches */
        id idc = alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->N * 8);
        id remap = alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->N * 8);
        id part = alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->N * m->D * m->e); /* at most N distinct ids */
        unref(g, idc);
        unref(g, remap);
        unref(g, part);
    } else if (add) {
        moment(g, GPUCORE_MEM_TRANSIENT, lm->cfg.vocab * m->D * m->e);
    }
    if (m->learned) {
        id dpe = alloc_buf(g, GPUCORE_MEM_TRANSIENT, m->T * m->D * m->e);
        if (m->accumulate) moment(g, GPUCORE_MEM_GRADIENTS, lm->cfg.max_pos * m->D * m->e);
        unref(g, dpe);
    }
}

static gpucore_status run_plan(const gpucore_lm *lm, const gpucore_lm_plan_options *o, int dtype, int cuda,
                               int64_t ws, gpucore_lm_memory_plan *plan)
{
    const lm_config *c = &lm->cfg;
    shape m = {.lm = lm, .o = o, .B = o->batch, .T = o->seq, .N = o->batch * o->seq, .D = c->hidden,
               .e = gpucore_dtype_size((gpucore_dtype)dtype), .dtype = dtype, .cuda = cuda,
               .fused = c->def->fused_qkv, .gelu = c->def->mlp == LM_MLP_GELU_TANH,
               .learned = c->def->pos == LM_POS_LEARNED, .ln = c->layer_norm, .ws = cuda ? ws : 0,
               .lora_r = o->lora_r, .lora_drop = o->lora_r > 0 && o->lora_dropout > 0,
               .accumulate = o->grad_accum > 1};
    const int64_t n = 2 * c->layers + 1;
    ledger g;
    if (!ledger_init(&g, o->memory_limit)) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_plan: out of host memory");
    g.what = "before the step";
    exec x = {.n = n};
    x.modes = calloc((size_t)n, sizeof *x.modes);
    x.sv = calloc((size_t)n, sizeof *x.sv);
    x.stored = malloc(sizeof *x.stored * (size_t)n);
    ckpt_top *tops = calloc((size_t)n, sizeof *tops);
    int32_t *scratch = calloc((size_t)n, sizeof *scratch);
    gpucore_status st = GPUCORE_OK;
    if (!x.modes || !x.sv || !x.stored || !tops || !scratch) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_plan: out of host memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) x.stored[i] = NONE;
    persistent(&g, &m);
    const int64_t held = g.total;
    /* the caller's ids and labels; train.c's targets, embeddings (and GPT-2's positions) */
    alloc_buf(&g, GPUCORE_MEM_ACTIVATIONS, m.N * 8);
    alloc_buf(&g, GPUCORE_MEM_ACTIVATIONS, m.N * 8);
    id targets = alloc_buf(&g, GPUCORE_MEM_ACTIVATIONS, m.N * 8);
    g.what = "embedding";
    id x0 = alloc_buf(&g, GPUCORE_MEM_ACTIVATIONS, act(&m, m.D)), pos = NONE;
    if (m.learned) {
        pos = alloc_buf(&g, GPUCORE_MEM_ACTIVATIONS, m.T * 8);
        moment(&g, GPUCORE_MEM_TRANSIENT, m.T * m.D * m.e);
    }
    /* the checkpoint plan */
    gpucore_ckpt_policy pol = (gpucore_ckpt_policy)o->ckpt_policy;
    int64_t k = pol == GPUCORE_CKPT_EVERY_K ? o->ckpt_param : pol == GPUCORE_CKPT_SQRT_N ? (int64_t)ceil(sqrt((double)n))
                                                             : 1;
    for (int64_t i = 0; i < n; i++)
        x.modes[i] = pol == GPUCORE_CKPT_KEEP_ALL ? GPUCORE_CKPT_KEPT
                     : i % k == 0                 ? GPUCORE_CKPT_CHECKPOINT
                                                  : GPUCORE_CKPT_RECOMPUTED;
    if (pol == GPUCORE_CKPT_BUDGET) {
        int64_t best = 0, lean = 0, lean_k = 0;
        budget_records(&g, &m, tops, n);
        if (!gpucore_ckpt_budget_search(tops, n, o->ckpt_param - g.total, scratch, x.modes, &best, &lean, &lean_k)) {
            st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_plan: a checkpoint budget of %lld bytes "
                                   "cannot be met: %lld bytes are allocated when the step starts and the leanest "
                                   "plan (a checkpoint every %lld segments) needs an estimated %lld more; raise the "
                                   "budget to at least %lld or shrink the batch", (long long)o->ckpt_param,
                                   (long long)g.total, (long long)lean_k, (long long)lean, (long long)(g.total + lean));
            goto done;
        }
    }
    id y = exec_forward(&g, &m, &x, x0);
    id dy = alloc_buf(&g, GPUCORE_MEM_HEAD_LOSS, act(&m, m.D));
    head_loss(&g, &m);
    id dx0 = o->full_finetune ? alloc_buf(&g, GPUCORE_MEM_TRANSIENT, act(&m, m.D)) : NONE;
    exec_backward(&g, &m, &x, y, dy, dx0 >= 0);
    g.seg = -1;
    g.phase = -1;
    if (o->full_finetune) embedding_grads(&g, &m);
    if (g.oom) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_plan: out of host memory");
        goto done;
    }
    if (g.limit_hit[0]) {
        st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "gpucore_lm_plan: the step does not fit under a memory "
                               "limit of %lld bytes: the allocator refuses %s", (long long)o->memory_limit,
                               g.limit_hit);
        goto done;
    }
    memset(plan, 0, sizeof *plan);
    plan->struct_size = sizeof *plan;
    plan->peak_bytes = g.peak;
    memcpy(plan->bytes, g.at_peak, sizeof plan->bytes);
    plan->persistent_bytes = held;
    plan->phase = g.phase_at_peak;
    plan->layer = g.seg_at_peak >= 0 && g.seg_at_peak < 2 * c->layers ? g.seg_at_peak / 2 : -1;
    snprintf(plan->where, sizeof plan->where, "%s", g.where);
    plan->segments = n;
    for (int64_t i = 0; i < n; i++) plan->recomputed_segments += x.modes[i] != GPUCORE_CKPT_KEPT;
    (void)targets;
    (void)pos;
done:
    free(x.modes);
    free(x.sv);
    free(x.stored);
    free(tops);
    free(scratch);
    ledger_free(&g);
    return st;
}

/* ------------------------------------------------------------------ the call */

void gpucore_lm_plan_options_init(gpucore_lm_plan_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->dtype = -1;
    o->device_type = -1;
    o->ckpt_policy = GPUCORE_CKPT_KEEP_ALL;
    o->optimizer = GPUCORE_OPTIMIZER_ADAMW;
    o->world_size = 1;
    o->grad_accum = 1;
    o->quant_format = -1;
}

static gpucore_status check_options(const gpucore_lm *lm, const gpucore_lm_plan_options *o, const char *op)
{
    if (o->struct_size != (int64_t)sizeof *o)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: opts->struct_size is %lld; set it with "
                                 "gpucore_lm_plan_options_init (sizeof = %zu)", op, (long long)o->struct_size, sizeof *o);
    if (o->batch < 1 || o->seq < 2)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: batch %lld, seq %lld: a training step needs "
                                 "batch >= 1 and seq >= 2", op, (long long)o->batch, (long long)o->seq);
    if (o->seq > lm->cfg.max_pos)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: seq %lld is past max_position_embeddings %lld",
                                 op, (long long)o->seq, (long long)lm->cfg.max_pos);
    if (o->dtype != -1 && o->dtype != GPUCORE_F32 && o->dtype != GPUCORE_BF16 && o->dtype != GPUCORE_F16)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: dtype %d: pass -1 (the model's), GPUCORE_F32, "
                                 "GPUCORE_BF16 or GPUCORE_F16", op, o->dtype);
    if (o->full_finetune != 0 && o->full_finetune != 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: full_finetune is %d; use 0 or 1", op,
                                 o->full_finetune);
    if (o->lora_r < 0 || (o->lora_r > 0 && (!o->lora_targets || o->n_lora_targets < 1)))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: lora_r %lld: give r > 0 with at least one target "
                                 "module, or r = 0 for no adapters", op, (long long)o->lora_r);
    if (o->lora_r > 0 && o->full_finetune)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: LoRA adapters and full fine-tuning exclude each "
                                 "other (adding adapters freezes the base)", op);
    if (!o->full_finetune && o->lora_r == 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: nothing is trainable: set lora_r and lora_targets, "
                                 "or full_finetune", op);
    for (int64_t t = 0; o->lora_r > 0 && t < o->n_lora_targets; t++) {
        if (!o->lora_targets[t])
            return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: lora_targets[%lld] is NULL", op, (long long)t);
        int hit = 0;
        for (int64_t l = 0; l < lm->cfg.layers && !hit; l++)
            for (int k = 0; k < lm->layer[l].n_attn + lm->layer[l].n_mlp && !hit; k++) {
                const lm_layer *L = &lm->layer[l];
                hit = lm_module_matches(k < L->n_attn ? L->attn[k].module : L->mlp[k - L->n_attn].module,
                                        o->lora_targets[t]);
            }
        if (!hit)
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: target module '%s' matches no linear layer of "
                                     "this %s model", op, o->lora_targets[t], gpucore_lm_arch_name(lm) ? gpucore_lm_arch_name(lm) : "");
    }
    if (o->ckpt_policy < GPUCORE_CKPT_KEEP_ALL || o->ckpt_policy > GPUCORE_CKPT_BUDGET)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: unknown checkpoint policy %d", op, o->ckpt_policy);
    if (o->ckpt_policy == GPUCORE_CKPT_EVERY_K && o->ckpt_param < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: EVERY_K needs ckpt_param k >= 1, got %lld", op,
                                 (long long)o->ckpt_param);
    if (o->ckpt_policy == GPUCORE_CKPT_BUDGET && o->ckpt_param <= 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: BUDGET needs ckpt_param, a budget in bytes > 0, got "
                                 "%lld", op, (long long)o->ckpt_param);
    if (o->optimizer != -1 && o->optimizer != GPUCORE_OPTIMIZER_SGD && o->optimizer != GPUCORE_OPTIMIZER_ADAMW)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: optimizer %d: use -1 (none), GPUCORE_OPTIMIZER_SGD "
                                 "or GPUCORE_OPTIMIZER_ADAMW", op, o->optimizer);
    if (o->zero_stage < 0 || o->zero_stage > 3 || o->world_size < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: zero_stage %d, world_size %d: stages are 0-3 and "
                                 "world_size >= 1", op, o->zero_stage, o->world_size);
    if (o->zero_stage > 0 || o->world_size > 1)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: zero_stage %d, world_size %d: the model layer's "
                                 "training step runs on one device (its segments read their own weights, not a ZeRO "
                                 "trainer's gathered buckets), so the plan covers zero_stage 0, world_size 1; ZeRO "
                                 "trains models built from the executor's blocks (gpucore_zero_bind_ckpt)", op,
                                 o->zero_stage, o->world_size);
    if (o->grad_accum < 1)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: grad_accum is %lld; it must be >= 1", op,
                                 (long long)o->grad_accum);
    if (o->head_chunk_rows < 0 || o->workspace_bytes < 0 || o->memory_limit < 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: head_chunk_rows, workspace_bytes and memory_limit "
                                 "must be >= 0", op);
    if (o->quant_format >= 0) {            /* every decoder linear must take the format */
        for (int64_t l = 0; l < lm->cfg.layers; l++)
            for (int k = 0; k < lm->layer[l].n_attn + lm->layer[l].n_mlp; k++) {
                const lm_layer *L = &lm->layer[l];
                const lm_linear *li = k < L->n_attn ? &L->attn[k] : &L->mlp[k - L->n_attn];
                int64_t b = 0;
                gpucore_status st = gpucore_quant_size((gpucore_quant_format)o->quant_format, li->out, li->in,
                                                       o->quant_block_size, o->quant_flags, &b);
                if (st) return st;
            }
    } else if (o->quant_format != -1) {
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: quant_format %d: -1 for dense weights or a "
                                 "gpucore_quant_format", op, o->quant_format);
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_lm_plan(const gpucore_lm *lm, const char *folder, const gpucore_lm_plan_options *opts,
                               gpucore_lm_memory_plan *plan)
{
    const char *op = "gpucore_lm_plan";
    gpucore_status st;
    if (!opts) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: opts is NULL", op);
    if (!plan) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: plan is NULL", op);
    if (plan->struct_size != (int64_t)sizeof *plan)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: plan->struct_size is %lld; set it to "
                                 "sizeof(gpucore_lm_memory_plan) = %zu", op, (long long)plan->struct_size, sizeof *plan);
    if (lm && (st = lm_check(lm, op))) return st;
    if (!lm && !folder) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: give a model or a folder", op);
    gpucore_lm *shell = NULL;
    if (!lm) {
        if (lm_is_gguf(folder))
            return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: %s is a GGUF file; its config is read with its "
                                     "weights: load it (gpucore_lm_create) and plan from the model", op, folder);
        shell = calloc(1, sizeof *shell);
        if (!shell) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        st = lm_config_read(folder, &shell->cfg);
        if (!st) st = lm_build_registry(shell);
        if (st) {
            lm_free_registry(shell);
            lm_config_free(&shell->cfg);
            free(shell);
            return st;
        }
        shell->magic = LM_MAGIC;
        lm = shell;
    }
    gpucore_lm_plan_options qo;
    if (!shell && opts->struct_size == (int64_t)sizeof qo && opts->quant_format == -1 && lm->quant_fmt >= 0) {
        qo = *opts;                        /* a model loaded quantized: its format unless another is asked */
        qo.quant_format = lm->quant_fmt;
        qo.quant_block_size = lm->quant_block;
        opts = &qo;
    }
    st = check_options(lm, opts, op);
    if (!st) {
        int dtype = opts->dtype >= 0 ? opts->dtype
                    : !shell           ? lm->dtype
                    : lm->cfg.file_dtype == GPUCORE_BF16 || lm->cfg.file_dtype == GPUCORE_F16 ? lm->cfg.file_dtype
                                                                                               : GPUCORE_F32;
        int dev = opts->device_type >= 0 ? opts->device_type : !shell ? (int)lm->ctx->type : GPUCORE_DEVICE_CPU;
        int64_t ws = opts->workspace_bytes;
        if (!ws && !shell) ws = atomic_load(&lm->ctx->matmul_workspace_bytes);
        if (!ws) ws = MATMUL_DEFAULT_WORKSPACE;
        st = run_plan(lm, opts, dtype, dev == GPUCORE_DEVICE_CUDA, ws, plan);
    }
    if (shell) {
        lm_free_registry(shell);
        lm_config_free(&shell->cfg);
        free(shell);
    }
    return st;
}

/* ------------------------------------------------------------------ out of memory */

/* The plan of lm's training step at batch x seq under its own settings (no optimizer: the model does not
 * know it), with the policy and micro-batch given. */
static gpucore_status plan_as_set(const gpucore_lm *lm, int64_t batch, int64_t seq, int policy, int64_t param,
                                  int64_t limit, gpucore_lm_memory_plan *p)
{
    gpucore_lm_plan_options o;
    gpucore_lm_plan_options_init(&o);
    o.batch = batch;
    o.seq = seq;
    o.optimizer = -1;
    o.full_finetune = lm->full_ft;
    o.lora_r = lm->full_ft ? 0 : lm->lora_r;
    o.lora_targets = (const char *const *)lm->lora_targets;
    o.n_lora_targets = lm->full_ft ? 0 : lm->n_lora_targets;
    o.lora_dropout = lm->lora_dropout;
    o.ckpt_policy = policy;
    o.ckpt_param = param;
    o.memory_limit = limit;
    p->struct_size = sizeof *p;
    return gpucore_lm_plan(lm, NULL, &o, p);
}

void lm_explain_oom(const gpucore_lm *lm, int64_t batch, int64_t seq, int64_t at_start)
{
    char *prev = lm_strdupf("%s", gpucore_last_error());
    gpucore_lm_memory_plan p;
    gpucore_memory_stats ms;
    memset(&ms, 0, sizeof ms);
    ms.struct_size = sizeof ms;
    if (!prev || gpucore_memory_get_stats(lm->ctx, GPUCORE_MEMORY_DEVICE, &ms) ||
        plan_as_set(lm, batch, seq, lm->ckpt_policy, lm->ckpt_param, 0, &p)) {
        if (prev) gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s", prev); /* the allocator's message stands */
        free(prev);
        return;
    }
    /* the step's own memory, planned; what was allocated when it began is measured (it holds the
     * optimizer's state and the caller's other tensors, which the model does not know) */
    const int64_t step = p.peak_bytes - p.persistent_bytes;
    char cats[400] = "";
    size_t n = 0;
    for (int c = 0; c < GPUCORE_MEM_CATEGORIES && n < sizeof cats; c++)
        n += (size_t)snprintf(cats + n, sizeof cats - n, "%s%s %.1f MiB", c ? ", " : "", gpucore_mem_category_name(c),
                              p.bytes[c] / 1048576.0);
    /* what was live, by category, when the allocator refused (the step has freed its part since) */
    gpucore_memory_categories mc = {.struct_size = sizeof mc};
    char live[400] = "";
    n = 0;
    if (gpucore_memory_get_categories(lm->ctx, &mc) == GPUCORE_OK)
        for (int c = 0; c <= GPUCORE_MEM_CATEGORIES && n < sizeof live; c++)
            n += (size_t)snprintf(live + n, sizeof live - n, "%s%s %lld", c ? ", " : "",
                                  c < GPUCORE_MEM_CATEGORIES ? gpucore_mem_category_name(c) : "other",
                                  (long long)mc.at_oom[c]);
    char fit[200] = "no checkpoint policy or smaller micro-batch fits under it either: shorten the sequence, "
                    "use LoRA, a lower rank or bf16";
    const int64_t limit = ms.limit_bytes;
    if (limit <= 0) {
        snprintf(fit, sizeof fit, "no memory limit is set on the context, so the device itself is full");
    } else {
        static const int pols[] = {GPUCORE_CKPT_KEEP_ALL, GPUCORE_CKPT_SQRT_N, GPUCORE_CKPT_RECOMPUTE_ALL};
        static const char *const names[] = {"keep_all", "sqrt_n", "recompute_all"};
        int found = 0;
        for (int64_t b = batch; b >= 1 && !found; b /= 2) {
            for (int k = 0; k < 3 && !found; k++) {
                /* replayed under the limit less what the step's start holds beyond the model's own bytes
                 * (the optimizer's state, the caller's tensors): the limit caps segments, not blocks */
                gpucore_lm_memory_plan q;
                const int64_t extra = at_start - p.persistent_bytes;
                if (limit - extra <= 0 || plan_as_set(lm, b, seq, pols[k], 0, limit - extra, &q)) continue;
                const int64_t need = at_start + (q.peak_bytes - q.persistent_bytes);
                if (need > limit) continue;
                found = 1;
                snprintf(fit, sizeof fit, "fits under it: micro-batch %lld (gradient accumulation over %lld) with "
                         "checkpoint policy %s (planned peak %.1f MiB)", (long long)b, (long long)((batch + b - 1) / b),
                         names[k], need / 1048576.0);
            }
            if (b == 1) break;
        }
    }
    gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s. The training step of batch %lld x seq %lld (gpucore_lm_plan): "
                      "%.1f MiB allocated when it began, %.1f MiB more planned at its peak (%s); live by category "
                      "when the allocator refused, in bytes: %s; planned at the peak by category: %s; limit %.1f "
                      "MiB: %s", prev, (long long)batch, (long long)seq, at_start / 1048576.0, step / 1048576.0,
                      p.where, live, cats, limit / 1048576.0, fit);
    free(prev);
}
