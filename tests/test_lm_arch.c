/*
 * test_lm_arch.c — an architecture is one table entry (src/models/arch.h): toy architectures
 * registered here, each by one entry and nothing else, load tiny folders this test writes and run
 * forward. "toy_named" is Llama's math under other tensor names and its own model_type: its logits
 * equal, bit for bit, those of a llama folder holding the same weights under Llama's names.
 * "toy_fused" also fuses q, k and v into one linear (with grouped-query heads, which GPT-2's fused
 * attention never has) and names other default LoRA targets: its logits match the llama model's
 * within f32 rounding, PEFT's default targets come from its entry (gpucore_lm_default_lora_targets),
 * and a target it does not have is refused naming the leaves it has. Linked with the library's
 * static sources (lm_arch_register is internal); on every backend present.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "models/arch.h"

#define V_ 16
#define D_ 8
#define F_ 12
#define H_ 2
#define HKV_ 1
#define HD_ 4
#define T_ 5

static const lm_arch toy_named = {
    .id = 100, .model_type = "toy_named", .keys = LM_KEYS_LLAMA, .norm = LM_NORM_RMS, .mlp = LM_MLP_SWIGLU,
    .pos = LM_POS_ROPE, .bias = LM_BIAS_NONE, .window = LM_WINDOW_NONE,
    .prefix = "net", .embed = "tok", .final_norm = "out_norm", .layer_prefix = "net.blocks",
    .norm1 = "pre_attn", .norm2 = "pre_mlp", .attn = {"attn.wq", "attn.wk", "attn.wv", "attn.wo"},
    .mlp_names = {"ffn.w1", "ffn.w3", "ffn.w2"}, .lora_targets = "wq,wv",
};
static const lm_arch toy_fused = {
    .id = 101, .model_type = "toy_fused", .keys = LM_KEYS_LLAMA, .norm = LM_NORM_RMS, .mlp = LM_MLP_SWIGLU,
    .pos = LM_POS_ROPE, .bias = LM_BIAS_NONE, .window = LM_WINDOW_NONE, .fused_qkv = 1,
    .prefix = "net", .embed = "tok", .final_norm = "out_norm", .layer_prefix = "net.blocks",
    .norm1 = "pre_attn", .norm2 = "pre_mlp", .attn = {"attn.wqkv", "attn.wo"},
    .mlp_names = {"ffn.w1", "ffn.w3", "ffn.w2"}, .lora_targets = "wqkv",
};

/* The weights: Llama's name, the toys' name, shape. q, k, v are rows 0.., D_.., D_ + HKV_*HD_.. of wqkv. */
typedef struct wt { const char *llama, *toy; int64_t s0, s1; } wt;
static const wt weights[] = {
    {"model.embed_tokens.weight", "net.tok.weight", V_, D_},
    {"model.layers.0.input_layernorm.weight", "net.blocks.0.pre_attn.weight", D_, 0},
    {"model.layers.0.self_attn.q_proj.weight", "net.blocks.0.attn.wq.weight", H_ * HD_, D_},
    {"model.layers.0.self_attn.k_proj.weight", "net.blocks.0.attn.wk.weight", HKV_ * HD_, D_},
    {"model.layers.0.self_attn.v_proj.weight", "net.blocks.0.attn.wv.weight", HKV_ * HD_, D_},
    {"model.layers.0.self_attn.o_proj.weight", "net.blocks.0.attn.wo.weight", D_, H_ * HD_},
    {"model.layers.0.post_attention_layernorm.weight", "net.blocks.0.pre_mlp.weight", D_, 0},
    {"model.layers.0.mlp.gate_proj.weight", "net.blocks.0.ffn.w1.weight", F_, D_},
    {"model.layers.0.mlp.up_proj.weight", "net.blocks.0.ffn.w3.weight", F_, D_},
    {"model.layers.0.mlp.down_proj.weight", "net.blocks.0.ffn.w2.weight", D_, F_},
    {"model.norm.weight", "net.out_norm.weight", D_, 0},
    {"lm_head.weight", "lm_head.weight", V_, D_},
};
#define NW ((int)(sizeof weights / sizeof weights[0]))
#define QKV_ROWS ((H_ + 2 * HKV_) * HD_)

static char root[256];
static float values[NW][V_ * F_];

static void write_config(const char *dir, const char *type)
{
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) { CHECK(!"cannot write config.json"); return; }
    fprintf(f, "{\"model_type\": \"%s\", \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
               "\"num_hidden_layers\": 1, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
               "\"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
               "\"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}\n", type, V_, D_, F_, H_, HKV_);
    fclose(f);
}

/* The folder root/name with the weights under Llama's names (which 0), the toy's (1), or the toy's
 * with q, k, v fused (2). */
static void write_folder(gpucore_context *ctx, const char *name, const char *type, int which)
{
    char dir[300], path[512];
    snprintf(dir, sizeof dir, "%s/%s", root, check_device);
    mkdir(dir, 0777);
    snprintf(dir, sizeof dir, "%s/%s/%s", root, check_device, name);
    mkdir(dir, 0777);
    write_config(dir, type);
    gpucore_tensor *ts[NW];
    const char *names[NW];
    int n = 0;
    for (int i = 0; i < NW; i++) {
        int q = which == 2 && strstr(weights[i].toy, ".wq."), kv = which == 2 && (strstr(weights[i].toy, ".wk.") ||
                                                                                 strstr(weights[i].toy, ".wv."));
        if (kv) continue; /* inside wqkv */
        int64_t shape[2] = {q ? QKV_ROWS : weights[i].s0, weights[i].s1};
        int nd = weights[i].s1 ? 2 : 1;
        CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, nd, shape, &ts[n]));
        if (q) {
            float qkv[QKV_ROWS * D_];
            memcpy(qkv, values[i], sizeof(float) * H_ * HD_ * D_);
            memcpy(qkv + H_ * HD_ * D_, values[i + 1], sizeof(float) * HKV_ * HD_ * D_);
            memcpy(qkv + (H_ + HKV_) * HD_ * D_, values[i + 2], sizeof(float) * HKV_ * HD_ * D_);
            CHECK_OK(gpucore_copy_from_host(ts[n], qkv, sizeof qkv));
            names[n++] = "net.blocks.0.attn.wqkv.weight";
            continue;
        }
        CHECK_OK(gpucore_copy_from_host(ts[n], values[i], sizeof(float) * weights[i].s0 * (nd == 2 ? weights[i].s1 : 1)));
        names[n++] = which ? weights[i].toy : weights[i].llama;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(gpucore_safetensors_save(path, names, ts, n, NULL, NULL, 0));
    for (int i = 0; i < n; i++) gpucore_tensor_destroy(ts[i]);
}

static void logits(gpucore_context *ctx, const char *name, const int64_t *ids, float *out, gpucore_lm **keep)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s/%s", root, check_device, name);
    gpucore_lm *lm = NULL;
    gpucore_tensor *lg = NULL;
    CHECK_OK(gpucore_lm_create(ctx, dir, GPUCORE_F32, &lm));
    if (!lm) { fprintf(stderr, "  %s: %s\n", name, gpucore_last_error()); return; }
    CHECK_OK(gpucore_lm_forward_host(lm, ids, 1, T_, &lg));
    if (lg) CHECK_OK(gpucore_copy_to_host(out, sizeof(float) * T_ * V_, lg));
    gpucore_tensor_destroy(lg);
    if (keep) *keep = lm;
    else gpucore_lm_destroy(lm);
}

static void toy_models(gpucore_context *ctx);

int main(void)
{
    snprintf(root, sizeof root, "/tmp/gpucore_test_lm_arch_%d", (int)getpid());
    mkdir(root, 0777);
    uint64_t x = 88172645463325252ull; /* xorshift: the weights, in [-0.5, 0.5) (norms in [0.8, 1.2)) */
    for (int i = 0; i < NW; i++)
        for (int j = 0; j < V_ * F_; j++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            double u = (double)(x >> 11) / 9007199254740992.0;
            values[i][j] = (float)(weights[i].s1 ? u - 0.5 : 0.8 + 0.4 * u);
        }
    CHECK_OK(lm_arch_register(&toy_named));
    CHECK_OK(lm_arch_register(&toy_fused));
    CHECK_STATUS(lm_arch_register(&toy_named), GPUCORE_ERR_INVALID_ARGUMENT);
    const device_test_fn tests[] = {toy_models};
    for_each_device(tests, 1);
    CHECK(gpucore_lm_default_lora_targets("nonesuch") == NULL);
    CHECK(strstr(gpucore_last_error(), "toy_fused") != NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd)) fprintf(stderr, "  could not remove %s\n", root);
    return check_finish("test_lm_arch");
}

/* The toys and llama on one backend, each against llama's logits on the same backend. */
static void toy_models(gpucore_context *ctx)
{
    write_folder(ctx, "llama", "llama", 0);
    write_folder(ctx, "named", "toy_named", 1);
    write_folder(ctx, "fused", "toy_fused", 2);
    const int64_t ids[T_] = {3, 1, 4, 15, 9};
    static float ref[T_ * V_], got[T_ * V_], fused[T_ * V_];
    gpucore_lm *lm = NULL;
    logits(ctx, "llama", ids, ref, NULL);
    logits(ctx, "named", ids, got, NULL);
    logits(ctx, "fused", ids, fused, &lm);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    double worst = 0, scale = 0;
    for (int i = 0; i < T_ * V_; i++) {
        worst = fmax(worst, fabs((double)fused[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    printf("toy_fused vs llama: max |diff| %.3g (max |logit| %.3g)\n", worst, scale);
    CHECK(scale > 0.1 && worst <= 1e-5 * scale);
    if (lm) {
        CHECK(!strcmp(gpucore_lm_arch_name(lm), "toy_fused"));
        const char *def = gpucore_lm_default_lora_targets("toy_fused");
        CHECK(def && !strcmp(def, "wqkv"));
        CHECK_OK(gpucore_lm_add_lora(lm, 2, 4.0, 0.0, &def, 1, 0));
        const char *llama_leaf = "q_proj";
        CHECK_STATUS(gpucore_lm_add_lora(lm, 2, 4.0, 0.0, &llama_leaf, 1, 0), GPUCORE_ERR_INVALID_ARGUMENT);
        CHECK(strstr(gpucore_last_error(), "(wqkv, wo, w1, w3, w2)") != NULL);
        gpucore_lm_destroy(lm);
    }
}
