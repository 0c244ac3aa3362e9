/*
 * arch.c — the architectures, one entry each (the fields are described in arch.h): gpt2, llama,
 * mistral, qwen2, and the lookups by model_type, GGUF name and id. Tests add toy entries with
 * lm_arch_register.
 */
#include <stdio.h>
#include <string.h>
#include "arch.h"

#define N(a) ((int)(sizeof a / sizeof a[0]))

static const lm_name_pair llama_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
static const lm_name_pair llama_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},      {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},      {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},      {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.o_proj.bias", "attn_output.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},       {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.weight", "ffn_up.weight"},           {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.weight", "ffn_down.weight"},       {"mlp.down_proj.bias", "ffn_down.bias"},
};
/* GPT-2's Conv1D weights are stored transposed by llama.cpp's converter: [out, in] row-major, as held here. */
static const lm_name_pair gpt2_global[] = {
    {"transformer.wte.weight", "token_embd.weight"}, {"transformer.wpe.weight", "position_embd.weight"},
    {"transformer.ln_f.weight", "output_norm.weight"}, {"transformer.ln_f.bias", "output_norm.bias"},
    {"lm_head.weight", "output.weight"},
};
static const lm_name_pair gpt2_layer[] = {
    {"ln_1.weight", "attn_norm.weight"},        {"ln_1.bias", "attn_norm.bias"},
    {"attn.c_attn.weight", "attn_qkv.weight"},  {"attn.c_attn.bias", "attn_qkv.bias"},
    {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
    {"ln_2.weight", "ffn_norm.weight"},         {"ln_2.bias", "ffn_norm.bias"},
    {"mlp.c_fc.weight", "ffn_up.weight"},       {"mlp.c_fc.bias", "ffn_up.bias"},
    {"mlp.c_proj.weight", "ffn_down.weight"},   {"mlp.c_proj.bias", "ffn_down.bias"},
};

static const lm_arch gpt2 = {
    GPUCORE_LM_GPT2, "gpt2", LM_KEYS_GPT2, LM_NORM_LAYER, LM_MLP_GELU_TANH, LM_POS_LEARNED, LM_BIAS_ALL,
    LM_WINDOW_NONE, 0, 1, 1, 1,
    "transformer", "wte", "wpe", "ln_f", "transformer.h", "ln_1", "ln_2",
    {"attn.c_attn", "attn.c_proj"}, {"mlp.c_fc", "mlp.c_proj"}, {".attn.bias", ".attn.masked_bias"},
    "c_attn", "gpt2", gpt2_global, gpt2_layer, N(gpt2_global), N(gpt2_layer), 0,
};

/* Llama, Mistral and Qwen2 share names and math; they differ in biases and the sliding window. */
#define LLAMA_FAMILY(id, type, bias, window, head_dim_key, gguf, unpermute)                                 \
    {id, type, LM_KEYS_LLAMA, LM_NORM_RMS, LM_MLP_SWIGLU, LM_POS_ROPE, bias, window, head_dim_key, 0, 0, 0,   \
     "model", "embed_tokens", NULL, "norm", "model.layers", "input_layernorm", "post_attention_layernorm",   \
     {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"},                       \
     {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}, {NULL, NULL}, "q_proj,v_proj",                       \
     gguf, gguf ? llama_global : NULL, gguf ? llama_layer : NULL, gguf ? N(llama_global) : 0,                \
     gguf ? N(llama_layer) : 0, unpermute}
static const lm_arch llama = LLAMA_FAMILY(GPUCORE_LM_LLAMA, "llama", LM_BIAS_KEYS, LM_WINDOW_NONE, 0, "llama", 1);
/* llama.cpp writes Mistral models as general.architecture "llama" (read as a llama model) */
static const lm_arch mistral = LLAMA_FAMILY(GPUCORE_LM_MISTRAL, "mistral", LM_BIAS_NONE, LM_WINDOW_KEY, 1, NULL, 0);
static const lm_arch qwen2 = LLAMA_FAMILY(GPUCORE_LM_QWEN2, "qwen2", LM_BIAS_QKV, LM_WINDOW_FLAG, 0, "qwen2", 0);

#define MAX_ARCHS 16
static const lm_arch *archs[MAX_ARCHS] = {&llama, &mistral, &qwen2, &gpt2};
static int n_archs = 4;

const lm_arch *lm_arch_by_type(const char *model_type)
{
    for (int i = 0; model_type && i < n_archs; i++)
        if (!strcmp(archs[i]->model_type, model_type)) return archs[i];
    return NULL;
}

const lm_arch *lm_arch_by_gguf(const char *gguf_arch)
{
    for (int i = 0; gguf_arch && i < n_archs; i++)
        if (archs[i]->gguf_arch && !strcmp(archs[i]->gguf_arch, gguf_arch)) return archs[i];
    return NULL;
}

const lm_arch *lm_arch_by_id(int id)
{
    for (int i = 0; i < n_archs; i++)
        if (archs[i]->id == id) return archs[i];
    return NULL;
}

const char *lm_arch_list(int gguf, char *buf, size_t len)
{
    size_t used = 0;
    int total = 0, k = 0;
    for (int i = 0; i < n_archs; i++) total += (gguf ? archs[i]->gguf_arch : archs[i]->model_type) != NULL;
    buf[0] = 0;
    for (int i = 0; i < n_archs && used < len; i++) {
        const char *name = gguf ? archs[i]->gguf_arch : archs[i]->model_type;
        if (!name) continue;
        k++;
        used += (size_t)snprintf(buf + used, len - used, "%s%s", k == 1 ? "" : k == total ? " and " : ", ", name);
    }
    return buf;
}

gpucore_status lm_arch_register(const lm_arch *a)
{
    if (!a || !a->model_type)
        return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "lm_arch_register: the entry or its model_type is NULL");
    if (lm_arch_by_type(a->model_type) || lm_arch_by_id(a->id))
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "lm_arch_register: model_type \"%s\" or id %d is "
                                 "already an architecture", a->model_type, a->id);
    if (n_archs == MAX_ARCHS)
        return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "lm_arch_register: the table holds %d architectures "
                                 "already", MAX_ARCHS);
    archs[n_archs++] = a;
    return GPUCORE_OK;
}

const char *gpucore_lm_default_lora_targets(const char *model_type)
{
    const lm_arch *a = lm_arch_by_type(model_type);
    if (!a) {
        char known[160];
        gpucore_set_error(model_type ? GPUCORE_ERR_INVALID_ARGUMENT : GPUCORE_ERR_NULL_POINTER,
                          "gpucore_lm_default_lora_targets: model_type \"%.64s\" is not an architecture (%s are)",
                          model_type ? model_type : "(null)", lm_arch_list(0, known, sizeof known));
        return NULL;
    }
    return a->lora_targets;
}
