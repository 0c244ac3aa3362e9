/*
 * arch.h — what makes one language-model architecture differ from another, as one table entry
 * (arch.c holds the entries): the config.json keys its sizes are read from, its Hugging Face and
 * GGUF tensor names, the norm, MLP and position kinds the layers compute, and PEFT's default LoRA
 * targets. The config reader, the weight registry, the GGUF reader, the layers and PEFT I/O read
 * the entry; code paths differ only where the math does, selected by the kind fields.
 * docs/ADDING_AN_ARCHITECTURE.md says how to add one.
 */
#ifndef GPUCORE_MODELS_ARCH_H
#define GPUCORE_MODELS_ARCH_H

#include "core/base.h"

/* Which config.json keys hold the sizes. */
typedef enum lm_keys_kind {
    LM_KEYS_GPT2,      /* n_embd, n_layer, n_head, n_positions, n_inner, layer_norm_epsilon, activation_function */
    LM_KEYS_LLAMA,     /* hidden_size, num_hidden_layers, num_key_value_heads, rms_norm_eps, rope_theta, ... */
} lm_keys_kind;
typedef enum lm_norm_kind { LM_NORM_LAYER, LM_NORM_RMS } lm_norm_kind;         /* LayerNorm with bias / RMSNorm */
typedef enum lm_mlp_kind { LM_MLP_GELU_TANH, LM_MLP_SWIGLU } lm_mlp_kind;      /* fc, proj / gate, up, down */
typedef enum lm_pos_kind { LM_POS_LEARNED, LM_POS_ROPE } lm_pos_kind;          /* a position embedding / rotary */
/* Which linears have biases: all; as config.json's attention_bias (q, k, v, o) and mlp_bias say; q, k and v
 * only; none (the last two refuse those keys set). */
typedef enum lm_bias_kind { LM_BIAS_ALL, LM_BIAS_KEYS, LM_BIAS_QKV, LM_BIAS_NONE } lm_bias_kind;
/* A sliding attention window: none; config.json's sliding_window (null: none); sliding_window (4096 when
 * absent) when use_sliding_window is true. */
typedef enum lm_window_kind { LM_WINDOW_NONE, LM_WINDOW_KEY, LM_WINDOW_FLAG } lm_window_kind;

/* A Hugging Face tensor name (per-layer ones after "<layer_prefix>.<i>.") and its GGUF name. */
typedef struct lm_name_pair { const char *hf, *gguf; } lm_name_pair;

typedef struct lm_arch {
    int id;                        /* gpucore_lm_arch */
    const char *model_type;        /* config.json's model_type, and gpucore_lm_arch_name's answer */
    lm_keys_kind keys;
    lm_norm_kind norm;
    lm_mlp_kind mlp;
    lm_pos_kind pos;
    lm_bias_kind bias;
    lm_window_kind window;
    int head_dim_key;              /* config.json's head_dim may differ from hidden_size / num_attention_heads */
    int fused_qkv;                 /* attention: q|k|v in one linear (attn[0]) and the output (attn[1]) */
    int conv1d;                    /* linear weights stored [in, out] (transformers' Conv1D) */
    int prefix_optional;           /* files may name the tensors without "<prefix>." */
    /* Hugging Face names: "<prefix>.<embed>.weight", "<layer_prefix>.<i>.<attn[k]>.weight", ... */
    const char *prefix, *embed, *pos_embed, *final_norm, *layer_prefix;
    const char *norm1, *norm2;     /* the norms before attention and before the MLP */
    const char *attn[4];           /* attention linears in lm_layer.attn's order (2 when fused_qkv) */
    const char *mlp_names[3];      /* MLP linears in lm_layer.mlp's order (2 for LM_MLP_GELU_TANH) */
    const char *skip[2];           /* name suffixes of buffers the files may hold that are no weights */
    const char *lora_targets;      /* PEFT's default target_modules, comma-separated */
    /* GGUF: general.architecture (NULL: not read from GGUF), the name pairs, and whether llama.cpp's
     * converter permuted the q and k rows (put back on load) */
    const char *gguf_arch;
    const lm_name_pair *gguf_global, *gguf_layer;
    int n_gguf_global, n_gguf_layer;
    int gguf_unpermute_qk;
} lm_arch;

/* The entry of config.json's model_type, of a GGUF general.architecture, of a gpucore_lm_arch; NULL: none. */
GPUCORE_HIDDEN const lm_arch *lm_arch_by_type(const char *model_type);
GPUCORE_HIDDEN const lm_arch *lm_arch_by_gguf(const char *gguf_arch);
GPUCORE_HIDDEN const lm_arch *lm_arch_by_id(int id);
/* The model_types known ("llama, mistral, qwen2 and gpt2"; gguf: those read from GGUF files, by their
 * GGUF names) into buf, for messages. */
GPUCORE_HIDDEN const char *lm_arch_list(int gguf, char *buf, size_t len);
/* Adds an entry (tests define a toy architecture this way); INVALID_ARGUMENT when its model_type or id
 * is taken or the table is full. The entry must outlive every model made from it. */
GPUCORE_HIDDEN gpucore_status lm_arch_register(const lm_arch *a);
/* The attention and MLP linear counts of an entry. */
static inline int lm_arch_n_attn(const lm_arch *a) { return a->fused_qkv ? 2 : 4; }
static inline int lm_arch_n_mlp(const lm_arch *a) { return a->mlp == LM_MLP_SWIGLU ? 3 : 2; }

#endif
