/*
 * bench_attention.c — fused scaled dot-product attention: forward and
 * backward TFLOP/s and the allocator's peak memory beyond the inputs, causal
 * and not, head_dim 64/128, over sequence lengths (CPU: 128–1024; GPU: up to
 * 8192 with --full). FLOPs counted as the matmuls a dense implementation does:
 * forward 4·B·H·S²·D, backward 2.5× that (halved when causal), the convention
 * of FlashAttention's and PyTorch's benchmarks. Times are event-timed medians
 * after warm-up. The peer is PyTorch's scaled_dot_product_attention
 * (bench/peers/torch_attention.py, same case names). --json prints DESIGN.md's
 * one-object-per-line contract. The human table names the CUDA kernel path of
 * each row: "wmma" (tensor cores: f16/bf16 with head dims that are multiples
 * of 16 up to 128, so every f16/bf16 case here) or "fma" (f32); "cpu" on the
 * CPU. Tensor-core figures exist only from a GPU run (bench/results/).
 *
 *   bench_attention [--json] [--quick|--full] [--device cpu|cuda] [--dtype f32|f16|bf16]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

static int json;
static const char *device_name;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_attention: %s: %s\n", what, gpucore_last_error());
    exit(1);
}

typedef struct att_state {
    gpucore_tensor *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
    gpucore_attention_options opts;
    int backward;
} att_state;

static gpucore_status run(att_state *s)
{
    if (!s->backward) return gpucore_attention_forward(s->out, s->lse, s->q, s->k, s->v, NULL, NULL, &s->opts, NULL);
    return gpucore_attention_backward(s->dq, s->dk, s->dv, s->dout, s->q, s->k, s->v, s->out, s->lse, NULL, NULL,
                                      &s->opts, NULL);
}

/* Median milliseconds over reps event-timed runs after one warm-up. */
static float time_op(gpucore_context *ctx, att_state *st, int reps)
{
    gpucore_stream *s = NULL;
    gpucore_event *e0 = NULL, *e1 = NULL;
    gpucore_context_current_stream(ctx, &s);
    gpucore_event_create(ctx, &e0);
    gpucore_event_create(ctx, &e1);
    float ms[16];
    if (run(st)) die("warm-up");
    for (int r = 0; r < reps; r++) {
        gpucore_event_record(e0, s);
        if (run(st)) die("run");
        gpucore_event_record(e1, s);
        gpucore_event_synchronize(e1);
        gpucore_event_elapsed_ms(e0, e1, &ms[r]);
    }
    gpucore_event_destroy(e0);
    gpucore_event_destroy(e1);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    return ms[reps / 2];
}

static gpucore_tensor *make(gpucore_context *ctx, gpucore_dtype dt, int nd, const int64_t *shape, uint64_t seed)
{
    gpucore_tensor *t = NULL;
    if (gpucore_tensor_create(ctx, dt, nd, shape, &t)) die("tensor_create");
    if (gpucore_random(t, GPUCORE_UNIFORM, -1, 1, seed, 0, NULL)) die("random");
    return t;
}

static const char *kernel_path; /* the human table's last column */

static void report(const char *cs, const char *metric, double value, const char *unit)
{
    if (json)
        printf("{\"bench\":\"attention\",\"case\":\"%s\",\"device\":\"%s\",\"metric\":\"%s\",\"value\":%.4f,"
               "\"unit\":\"%s\"}\n", cs, device_name, metric, value, unit);
    else printf("%-40s %-10s %12.4f %-8s %s\n", cs, metric, value, unit, kernel_path);
}

/* The CUDA kernel that serves a case (kernels/attention.cu's dispatch), or "cpu". */
static const char *path_of(int cpu, gpucore_dtype dt, int64_t D)
{
    if (cpu) return "cpu";
    return dt != GPUCORE_F32 && D % 16 == 0 && D <= 128 ? "wmma" : "fma";
}

int main(int argc, char **argv)
{
    const char *dev = NULL, *dts = "f32";
    int full = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--quick")) full = 0;
        else if (!strcmp(argv[i], "--full")) full = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dts = argv[++i];
        else {
            fprintf(stderr, "usage: bench_attention [--json] [--quick|--full] [--device cpu|cuda] [--dtype f32|f16|bf16]\n");
            return 2;
        }
    }
    const gpucore_dtype dt = !strcmp(dts, "bf16") ? GPUCORE_BF16 : !strcmp(dts, "f16") ? GPUCORE_F16 : GPUCORE_F32;
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(dev, &ctx)) die("context_create");
    device_name = gpucore_context_device_name(ctx);
    gpucore_device_type type;
    int idx;
    gpucore_context_device(ctx, &type, &idx);
    const int cpu = type == GPUCORE_DEVICE_CPU;
    static const int64_t seqs_cpu[] = {128, 256, 512, 1024}, seqs_gpu[] = {512, 1024, 2048, 4096, 8192};
    const int64_t *seqs = cpu ? seqs_cpu : seqs_gpu;
    const int nseq = cpu ? (full ? 4 : 3) : (full ? 5 : 3);
    const int64_t B = cpu ? 1 : 4, H = cpu ? 4 : 16;
    const int reps = cpu ? 3 : 10;
    if (!json)
        printf("bench_attention on %s, %s, batch %lld, heads %lld; TFLOP/s = dense-equivalent matmul FLOPs / median time\n",
               device_name, dts, (long long)B, (long long)H);
    for (int si = 0; si < nseq; si++)
        for (int64_t D = 64; D <= 128; D *= 2)
            for (int causal = 0; causal < 2; causal++) {
                const int64_t S = seqs[si], shape[4] = {B, H, S, D}, ln = B * H * S;
                att_state st = {0};
                st.q = make(ctx, dt, 4, shape, 1);
                st.k = make(ctx, dt, 4, shape, 2);
                st.v = make(ctx, dt, 4, shape, 3);
                st.dout = make(ctx, dt, 4, shape, 4);
                st.out = make(ctx, dt, 4, shape, 5);
                st.dq = make(ctx, dt, 4, shape, 6);
                st.dk = make(ctx, dt, 4, shape, 7);
                st.dv = make(ctx, dt, 4, shape, 8);
                if (gpucore_tensor_create(ctx, GPUCORE_F32, 1, &ln, &st.lse)) die("tensor_create");
                gpucore_attention_options_init(&st.opts);
                st.opts.is_causal = causal;
                char cs[96];
                snprintf(cs, sizeof cs, "b%lld h%lld s%lld d%lld %s %s", (long long)B, (long long)H, (long long)S,
                         (long long)D, causal ? "causal" : "full", dts);
                kernel_path = path_of(cpu, dt, D);
                const double fwd_flops = 4.0 * (double)(B * H * S * S * D) * (causal ? 0.5 : 1.0);
                gpucore_context_synchronize(ctx);
                gpucore_memory_stats m0 = {.struct_size = sizeof m0}, m1 = {.struct_size = sizeof m1};
                gpucore_memory_reset_peak_stats(ctx, GPUCORE_MEMORY_DEVICE);
                gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &m0);
                st.backward = 0;
                float fms = time_op(ctx, &st, reps);
                st.backward = 1;
                float bms = time_op(ctx, &st, reps);
                gpucore_memory_get_stats(ctx, GPUCORE_MEMORY_DEVICE, &m1);
                report(cs, "fwd", fms > 0 ? fwd_flops / (fms * 1e-3) / 1e12 : 0, "TFLOP/s");
                report(cs, "bwd", bms > 0 ? 2.5 * fwd_flops / (bms * 1e-3) / 1e12 : 0, "TFLOP/s");
                report(cs, "peak_extra", (double)(m1.allocated_bytes_peak - m0.allocated_bytes) / (1 << 20), "MiB");
                gpucore_tensor *ts[9] = {st.q, st.k, st.v, st.out, st.lse, st.dout, st.dq, st.dk, st.dv};
                for (int i = 0; i < 9; i++) gpucore_tensor_destroy(ts[i]);
            }
    gpucore_context_destroy(ctx);
    return 0;
}
