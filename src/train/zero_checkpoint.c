/*
 * zero_checkpoint.c — sharded (one safetensors file per rank + a JSON index) and
 * consolidated (rank 0 writes the full tensors) checkpoints of the ZeRO trainer,
 * both loadable at a different rank count: a bucket's unpadded element range is
 * the same at every N, so a new rank's shard is cut out of the old ranks' slices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_internal.h"

#define ZERO_MAX_STATES 4

typedef struct state_set {
    int n;
    const char *name[ZERO_MAX_STATES];
    gpucore_tensor *flat[ZERO_MAX_STATES]; /* [shard_total] f32, owned by the trainer or its optimizer */
} state_set;

static void state_list(gpucore_zero *z, state_set *s)
{
    static const char *const opt_states[] = {"exp_avg", "exp_avg_sq", "momentum_buffer"};
    s->n = 0;
    s->name[s->n] = "master";
    s->flat[s->n++] = z->master_flat;
    for (int k = 0; k < 3; k++) {
        gpucore_tensor *t = NULL;
        if (gpucore_optimizer_state(z->opt, 0, opt_states[k], &t) == GPUCORE_OK) {
            s->name[s->n] = opt_states[k];
            s->flat[s->n++] = t;
        }
    }
    gpucore_clear_error();
}

static gpucore_status check_ckpt(gpucore_zero *z, const void *path, gpucore_loss_scaler *scaler, const char *op,
                                 gpucore_stream **ps)
{
    gpucore_status st = zero_check(z, op);
    if (st) return st;
    if (!path) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: the path is NULL", op);
    if (z->stage == 0)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: stage 0 holds no shards; save the parameters and "
                                 "the optimizer with gpucore_checkpoint_save", op);
    if (scaler && (st = gpucore_check_loss_scaler(scaler, op))) return st;
    return gpucore_resolve_stream(z->ctx, NULL, op, ps);
}

/* A growable list of (name, tensor) pairs for one safetensors file. */
typedef struct entry_list {
    int n, cap;
    char **names;
    gpucore_tensor **tensors;
    char *owned;                 /* 1: tensor is a view this list destroys */
} entry_list;

static int list_add(entry_list *l, const char *name, gpucore_tensor *t, int owned)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **nn = realloc(l->names, sizeof *nn * (size_t)cap);
        if (nn) l->names = nn;
        gpucore_tensor **nt = realloc(l->tensors, sizeof *nt * (size_t)cap);
        if (nt) l->tensors = nt;
        char *no = realloc(l->owned, (size_t)cap);
        if (no) l->owned = no;
        if (!nn || !nt || !no) return 1;
        l->cap = cap;
    }
    l->names[l->n] = strdup(name);
    l->tensors[l->n] = t;
    l->owned[l->n] = (char)owned;
    if (!l->names[l->n]) return 1;
    l->n++;
    return 0;
}

static void list_free(entry_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->names[i]);
        if (l->owned[i]) gpucore_tensor_destroy(l->tensors[i]);
    }
    free(l->names);
    free(l->tensors);
    free(l->owned);
}

static int add_common(gpucore_zero *z, entry_list *l, gpucore_loss_scaler *scaler)
{
    gpucore_tensor *step = NULL, *lr = NULL;
    gpucore_optimizer_step_count(z->opt, &step);
    gpucore_optimizer_lr(z->opt, &lr);
    int fail = list_add(l, "optimizer.step", step, 0) | list_add(l, "optimizer.lr", lr, 0);
    if (scaler && z->rank == 0)
        fail |= list_add(l, "loss_scaler.scale", scaler->scale, 0) |
                list_add(l, "loss_scaler.growth_tracker", scaler->growth_tracker, 0);
    return fail;
}

static gpucore_status read_common(gpucore_zero *z, gpucore_safetensors *f, gpucore_loss_scaler *scaler)
{
    gpucore_tensor *step = NULL, *lr = NULL;
    gpucore_optimizer_step_count(z->opt, &step);
    gpucore_optimizer_lr(z->opt, &lr);
    gpucore_status st = gpucore_safetensors_read(f, "optimizer.step", step);
    if (!st) st = gpucore_safetensors_read(f, "optimizer.lr", lr);
    if (!st && scaler) st = gpucore_safetensors_read(f, "loss_scaler.scale", scaler->scale);
    if (!st && scaler) st = gpucore_safetensors_read(f, "loss_scaler.growth_tracker", scaler->growth_tracker);
    return st;
}

/* The view [lo, hi) of a 1-d tensor (owned by the caller). */
static gpucore_status range(gpucore_tensor *t, int64_t lo, int64_t hi, gpucore_tensor **out)
{
    return gpucore_tensor_slice(t, 0, lo, hi, 1, out);
}

static char *bucket_numel_list(const gpucore_zero *z)
{
    size_t cap = (size_t)z->nbuckets * 21 + 1;
    char *s = malloc(cap), *p = s;
    if (!s) return NULL;
    *p = 0;
    for (int k = 0; k < z->nbuckets; k++) p += snprintf(p, cap - (size_t)(p - s), k ? ",%lld" : "%lld",
                                                        (long long)z->b[k].numel);
    return s;
}

static gpucore_status write_index(gpucore_zero *z, const char *prefix)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s.index.json", prefix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return gpucore_set_error(GPUCORE_ERR_IO, "zero_save_sharded: cannot create %s", tmp);
    fprintf(f, "{\"format\": \"gpucore-zero-1\", \"world_size\": %d, \"stage\": %d, \"files\": [", z->size, z->stage);
    const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix; /* names relative to the index */
    for (int r = 0; r < z->size; r++) fprintf(f, "%s\"%s.rank%d.safetensors\"", r ? ", " : "", base, r);
    fprintf(f, "],\n \"buckets\": [");
    for (int k = 0; k < z->nbuckets; k++)
        fprintf(f, "%s{\"numel\": %lld, \"shard\": %lld, \"params\": [%d, %d]}", k ? ", " : "",
                (long long)z->b[k].numel, (long long)z->b[k].shard, z->b[k].begin, z->b[k].end);
    fprintf(f, "],\n \"params\": [");
    for (int i = 0; i < z->count; i++) {
        fprintf(f, "%s{\"bucket\": %d, \"offset\": %lld, \"dtype\": \"%s\", \"shape\": [", i ? ",\n  " : "",
                z->bucket_of[i], (long long)z->param_off[i], gpucore_dtype_name((gpucore_dtype)z->dtypes[i]));
        for (int d = 0; d < z->ndims[i]; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)z->shapes[i][d]);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    int bad = ferror(f);
    bad |= fclose(f);
    if (bad || rename(tmp, path)) {
        remove(tmp);
        return gpucore_set_error(GPUCORE_ERR_IO, "zero_save_sharded: cannot write %s", path);
    }
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_save_sharded(gpucore_zero *z, const char *prefix, gpucore_loss_scaler *scaler)
{
    const char *op = "zero_save_sharded";
    gpucore_stream *ps = NULL;
    gpucore_status st = check_ckpt(z, prefix, scaler, op, &ps);
    if (st) return st;
    state_set ss;
    state_list(z, &ss);
    entry_list l = {0};
    int fail = 0;
    for (int s = 0; s < ss.n && !st; s++)
        for (int k = 0; k < z->nbuckets && !st; k++) {
            char name[96];
            gpucore_tensor *v = NULL;
            snprintf(name, sizeof name, "bucket.%d.%s", k, ss.name[s]);
            if (!(st = range(ss.flat[s], z->b[k].shard_off, z->b[k].shard_off + z->b[k].shard, &v)))
                fail |= list_add(&l, name, v, 1);
        }
    fail |= add_common(z, &l, scaler);
    char *numels = bucket_numel_list(z), ws[16], rk[16], path[4096];
    snprintf(ws, sizeof ws, "%d", z->size);
    snprintf(rk, sizeof rk, "%d", z->rank);
    snprintf(path, sizeof path, "%s.rank%d.safetensors", prefix, z->rank);
    if (!st && (fail || !numels)) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    const char *keys[3] = {"zero.world_size", "zero.rank", "zero.bucket_numel"};
    const char *vals[3] = {ws, rk, numels};
    if (!st) st = gpucore_safetensors_save(path, (const char *const *)l.names, l.tensors, l.n, keys, vals, 3);
    if (!st && z->rank == 0) st = write_index(z, prefix);
    free(numels);
    list_free(&l);
    return st;
}

/* Copy elements [a, b) of bucket k's unpadded range from src (holding [src_lo, ...)) into
 * this rank's flat state (whose bucket-k shard holds [rank*shard, ...)). */
static gpucore_status copy_overlap(gpucore_zero *z, int k, gpucore_tensor *flat, gpucore_tensor *src, int64_t src_lo,
                                   int64_t src_hi, gpucore_stream *ps)
{
    const zero_bucket *b = &z->b[k];
    int64_t lo = z->rank * b->shard, hi = lo + b->shard;
    if (hi > b->numel) hi = b->numel;
    int64_t a = src_lo > lo ? src_lo : lo, e = src_hi < hi ? src_hi : hi;
    if (a >= e) return GPUCORE_OK;
    gpucore_tensor *sv = NULL, *dv = NULL;
    gpucore_status st = range(src, a - src_lo, e - src_lo, &sv);
    if (!st) st = range(flat, b->shard_off + a - lo, b->shard_off + e - lo, &dv);
    if (!st) st = gpucore_copy(dv, sv, ps);
    gpucore_tensor_destroy(sv);
    gpucore_tensor_destroy(dv);
    return st;
}

/* After the state was read: zero the padding is already there (filled before), put
 * the parameters in place and wait, so the caller's tensors can be freed at once. */
static gpucore_status finish_load(gpucore_zero *z, gpucore_stream *ps)
{
    gpucore_status st = zero_publish_params(z, ps);
    if (!st) st = gpucore_stream_synchronize(ps);
    return st;
}

gpucore_status gpucore_zero_load_sharded(gpucore_zero *z, const char *prefix, gpucore_loss_scaler *scaler)
{
    const char *op = "zero_load_sharded";
    gpucore_stream *ps = NULL;
    gpucore_status st = check_ckpt(z, prefix, scaler, op, &ps);
    if (st) return st;
    char path[4096];
    snprintf(path, sizeof path, "%s.rank0.safetensors", prefix);
    gpucore_safetensors *f0 = NULL;
    if ((st = gpucore_safetensors_open(path, &f0))) return st;
    const char *ws = gpucore_safetensors_metadata(f0, "zero.world_size");
    const char *bn = gpucore_safetensors_metadata(f0, "zero.bucket_numel");
    char *mine = bucket_numel_list(z);
    int old = ws ? atoi(ws) : 0;
    if (!mine) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    else if (old < 1 || !bn)
        st = gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: %s has no zero.world_size / zero.bucket_numel metadata; "
                               "it was not written by gpucore_zero_save_sharded", op, path);
    else if (strcmp(bn, mine))
        st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: the checkpoint's buckets hold %s elements but this "
                               "trainer's hold %s; create it with the same parameters, bucket_bytes and units", op,
                               bn, mine);
    free(mine);
    gpucore_safetensors **files = st ? NULL : calloc((size_t)old, sizeof *files);
    if (!st && !files) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int q = 0; q < old && !st; q++) {
        if (q == 0) { files[0] = f0; f0 = NULL; continue; }
        snprintf(path, sizeof path, "%s.rank%d.safetensors", prefix, q);
        st = gpucore_safetensors_open(path, &files[q]);
    }
    state_set ss;
    state_list(z, &ss);
    for (int s = 0; s < ss.n && !st; s++) {
        if (!(st = gpucore_fill(ss.flat[s], 0.0, ps))) st = gpucore_stream_synchronize(ps);
        for (int k = 0; k < z->nbuckets && !st; k++) {
            int64_t old_shard = (z->b[k].numel + old - 1) / old;
            for (int q = 0; q < old && !st; q++) {
                char name[96];
                gpucore_tensor *src = NULL;
                snprintf(name, sizeof name, "bucket.%d.%s", k, ss.name[s]);
                if (!(st = gpucore_safetensors_load_tensor(files[q], z->ctx, name, &src)))
                    st = copy_overlap(z, k, ss.flat[s], src, q * old_shard, (q + 1) * old_shard, ps);
                if (!st) st = gpucore_stream_synchronize(ps);
                gpucore_tensor_destroy(src);
            }
        }
    }
    if (!st) st = read_common(z, files[0], scaler);
    if (!st) st = finish_load(z, ps);
    for (int q = 0; files && q < old; q++) gpucore_safetensors_close(files[q]);
    free(files);
    gpucore_safetensors_close(f0);
    return st;
}

/* All-gather state s of bucket k into a new [padded] f32 tensor (collective). */
static gpucore_status gather_state(gpucore_zero *z, gpucore_tensor *flat, int k, gpucore_stream *ps,
                                   gpucore_tensor **out)
{
    const zero_bucket *b = &z->b[k];
    gpucore_tensor *full = NULL, *mine = NULL, *src = NULL;
    gpucore_status st = zero_vector_on(z->ctx, GPUCORE_F32, zero_padded(z, b), z->cs, &full);
    if (!st) st = gpucore_tensor_record_stream(full, ps);
    if (!st) st = range(full, z->rank * b->shard, (z->rank + 1) * b->shard, &mine);
    if (!st) st = range(flat, b->shard_off, b->shard_off + b->shard, &src);
    if (!st) st = gpucore_copy(mine, src, ps);
    if (!st) st = gpucore_comm_all_gather(z->comm, full, mine, ps);
    gpucore_tensor_destroy(mine);
    gpucore_tensor_destroy(src);
    if (st) gpucore_tensor_destroy(full);
    else *out = full;
    return st;
}

static gpucore_status check_names(const gpucore_zero *z, const char *const *names, const char *op)
{
    if (!names) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "%s: names is NULL", op);
    for (int i = 0; i < z->count; i++)
        if (!names[i] || !names[i][0])
            return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: names[%d] is %s", op, i,
                                     names[i] ? "empty" : "NULL");
    return GPUCORE_OK;
}

gpucore_status gpucore_zero_save_consolidated(gpucore_zero *z, const char *path, const char *const *names,
                                              gpucore_loss_scaler *scaler)
{
    const char *op = "zero_save_consolidated";
    gpucore_stream *ps = NULL;
    gpucore_status st = check_ckpt(z, path, scaler, op, &ps);
    if (st || (st = check_names(z, names, op))) return st;
    state_set ss;
    state_list(z, &ss);
    entry_list l = {0};
    int fail = 0;
    gpucore_tensor **views = calloc((size_t)z->count, sizeof *views);
    if (!views) return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int k = 0; k < z->nbuckets && !st; k++) {
        const zero_bucket *b = &z->b[k];
        if (z->stage == 3 && !(st = gpucore_zero_gather(z, k))) /* the parameters in their dtype */
            for (int i = b->begin; i < b->end && !st; i++) {
                gpucore_tensor *t = NULL;
                if (!(st = gpucore_zero_param(z, i, ps, &t)) && !(st = gpucore_tensor_reshape(t, z->ndims[i],
                                                                                             z->shapes[i], &views[i])))
                    fail |= list_add(&l, names[i], views[i], 1);
            }
        for (int i = b->begin; i < b->end && z->stage < 3; i++) fail |= list_add(&l, names[i], z->params[i], 0);
        for (int s = 0; s < ss.n && !st; s++) {
            gpucore_tensor *full = NULL;
            if ((st = gather_state(z, ss.flat[s], k, ps, &full))) break;
            st = zero_param_views(z, b, full, views);
            for (int i = b->begin; i < b->end && !st; i++) {
                char name[512];
                snprintf(name, sizeof name, "%s.%s", names[i], ss.name[s]);
                fail |= list_add(&l, name, views[i], 1);
                views[i] = NULL;
            }
            gpucore_tensor_destroy(full); /* the views keep it alive */
        }
    }
    fail |= add_common(z, &l, scaler);
    if (!st && fail) st = gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (!st && z->rank == 0) st = gpucore_safetensors_save(path, (const char *const *)l.names, l.tensors, l.n, NULL,
                                                           NULL, 0);
    if (!st) st = gpucore_stream_synchronize(ps);
    list_free(&l);
    for (int k = 0; k < z->nbuckets && z->stage == 3; k++) gpucore_zero_release(z, k, ps);
    free(views);
    return st;
}

gpucore_status gpucore_zero_load_consolidated(gpucore_zero *z, const char *path, const char *const *names,
                                              gpucore_loss_scaler *scaler)
{
    const char *op = "zero_load_consolidated";
    gpucore_stream *ps = NULL;
    gpucore_status st = check_ckpt(z, path, scaler, op, &ps);
    if (st || (st = check_names(z, names, op))) return st;
    gpucore_safetensors *f = NULL;
    if ((st = gpucore_safetensors_open(path, &f))) return st;
    state_set ss;
    state_list(z, &ss);
    for (int s = 0; s < ss.n && !st; s++) {
        if (!(st = gpucore_fill(ss.flat[s], 0.0, ps))) st = gpucore_stream_synchronize(ps);
        for (int i = 0; i < z->count && !st; i++) {
            char name[512];
            snprintf(name, sizeof name, "%s.%s", names[i], ss.name[s]);
            gpucore_tensor *t = NULL, *flat = NULL;
            int64_t n = 1;
            for (int d = 0; d < z->ndims[i]; d++) n *= z->shapes[i][d];
            if (!(st = gpucore_safetensors_load_tensor(f, z->ctx, name, &t))) {
                if (gpucore_tensor_numel(t) != n || gpucore_tensor_dtype(t) != GPUCORE_F32)
                    st = gpucore_set_error(GPUCORE_ERR_SHAPE_MISMATCH, "%s: %s in %s is not %lld f32 elements", op,
                                           name, path, (long long)n);
                else if (!(st = gpucore_tensor_reshape(t, 1, &n, &flat)))
                    st = copy_overlap(z, z->bucket_of[i], ss.flat[s], flat, z->param_off[i], z->param_off[i] + n, ps);
                if (!st) st = gpucore_stream_synchronize(ps);
            }
            gpucore_tensor_destroy(flat);
            gpucore_tensor_destroy(t);
        }
    }
    if (!st) st = read_common(z, f, scaler);
    if (!st) st = finish_load(z, ps);
    gpucore_safetensors_close(f);
    return st;
}
