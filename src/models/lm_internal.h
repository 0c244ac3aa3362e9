/*
 * lm_internal.h — the language-model layer's shared types: the parsed config, a
 * linear layer (frozen or trainable weight, optional bias, optional LoRA pair), a
 * decoder layer, the parameter registry that names every tensor as Hugging Face
 * does, and the model handle. Built only from the public ops, train and io calls.
 */
#ifndef GPUCORE_LM_INTERNAL_H
#define GPUCORE_LM_INTERNAL_H

#include <stdint.h>
#include "gpucore.h"
#include "core/internal.h"
#include "gpucore_config.h"
#include "io/json_file.h"
#include "arch.h"

#define LM_MAGIC 0x1A4E0D31u
#define LM_CACHE_MAGIC 0x1AC4C4E1u
#define LM_IGNORE_INDEX (-100)

typedef struct lm_config {
    int arch;                      /* gpucore_lm_arch */
    const lm_arch *def;            /* its table entry (arch.c) */
    int64_t vocab, layers, hidden, heads, kv_heads, head_dim, inter, max_pos;
    int64_t sliding_window;        /* -1: none in use */
    int tie;                       /* head = embedding */
    int qkv_bias, o_bias, mlp_bias; /* linear biases (gpt2: all) */
    int layer_norm;                /* 1: LayerNorm with bias (gpt2), 0: RMSNorm */
    double eps;
    double rope_theta;             /* 0: no RoPE (gpt2) */
    int rope_llama3;
    double rs_factor, rs_low, rs_high;
    int64_t rs_orig;
    int64_t bos, eos, pad;         /* -1: none */
    int file_dtype;                /* torch_dtype of config.json, or -1 */
    char *json;                    /* config.json text as read (save_pretrained rewrites it) */
} lm_config;

/* y = x·Wᵀ + b (+ scale·B·A·drop(x)). W [out, in] as held (GPT-2's Conv1D transposed on load). */
typedef struct lm_linear {
    gpucore_tensor *w, *b;         /* b NULL: no bias; w NULL when the weight is quantized */
    gpucore_tensor *wq;            /* a quantized W's bytes (u8), read through q; NULL: W is w */
    gpucore_qweight q;             /* q.data = wq */
    gpucore_tensor *dw, *db;       /* full fine-tuning gradients, else NULL */
    gpucore_tensor *la, *lb;       /* LoRA A [r, in], B [out, r]; NULL: no adapter */
    gpucore_tensor *dla, *dlb;
    int64_t in, out;
    char *module;                  /* "model.layers.0.self_attn.q_proj" */
    const char *leaf;              /* last component: "q_proj" */
    int conv1d;                    /* stored [in, out] in the file (GPT-2) */
} lm_linear;

/* Attention linears: fused {qkv, out} (gpt2's c_attn, c_proj); others {q, k, v, o}.
 * MLP linears: GELU {fc, proj}; SwiGLU {gate, up, down} (the entry's names, arch.h). */
#define LM_QHEAD_MAX_ROWS 4 /* rows up to which the head reads its quantized blocks (head_q) */

typedef struct lm_layer {
    struct gpucore_lm *lm;
    int64_t index;
    gpucore_tensor *n1_w, *n1_b, *n2_w, *n2_b;
    gpucore_tensor *dn1_w, *dn1_b, *dn2_w, *dn2_b;
    lm_linear attn[4], mlp[3];
    int n_attn, n_mlp;
} lm_layer;

/* One named tensor: where the model holds it, its gradient slot, its shape in the file. */
typedef struct lm_param {
    char *name;
    gpucore_tensor **slot, **grad;
    int ndim;
    int64_t shape[2];              /* as held */
    int transposed;                /* file holds shape reversed (Conv1D) */
    struct lm_linear *lin;         /* the linear layer whose weight this is, or NULL */
} lm_param;

/* A trainable tensor as listed by gpucore_lm_trainable. */
typedef struct lm_trainable {
    char *name;
    gpucore_tensor *param, *grad;
} lm_trainable;

struct gpucore_lm {
    uint32_t magic;
    gpucore_context *ctx;
    char *folder;
    lm_config cfg;
    int dtype;                     /* of every weight and activation */
    gpucore_tensor *wte, *wpe, *nf_w, *nf_b, *head; /* head NULL when tied */
    gpucore_tensor *dwte, *dwpe, *dnf_w, *dnf_b, *dhead;
    gpucore_tensor *rope_cos, *rope_sin;            /* f32 [max_pos, head_dim/2] or NULL */
    /* the head's quantized blocks as a GGUF file holds them (its output weight, or the tied embedding),
     * kept beside the dense head for steps of up to LM_QHEAD_MAX_ROWS rows (a decode step reads them
     * instead: Q8_0 is a quarter of f32's bytes); wq NULL: none */
    lm_linear head_q;
    lm_layer *layer;
    lm_param *params;
    int64_t n_params;
    int full_ft;
    /* LoRA */
    int64_t lora_r, lora_count;
    double lora_alpha, lora_dropout;
    char **lora_targets;
    int64_t n_lora_targets;
    lm_trainable *train;
    int64_t n_train;
    /* training executor (created on first use) */
    gpucore_ckpt *ckpt;
    int ckpt_policy;
    int64_t ckpt_param;
    uint64_t seed;
    int training;                  /* forward_backward in progress: LoRA dropout on */
    int accumulate;                /* forward_backward in progress adds into the gradients (train.c) */
    int64_t head_chunk_rows;       /* rows per chunk of the training head and loss; 0: by size (head_loss.c) */
    /* quantized base (quantize.c): the format asked for at load (-1: none), its block size */
    int quant_fmt;
    int64_t quant_block;
    char quant_name[64];           /* gpucore_lm_quantization's answer ("" when dense) */
    gpucore_context *quant_host;   /* a CPU context quantizing while loading onto another device */
};

struct gpucore_lm_cache {
    uint32_t magic;
    gpucore_lm *lm;
    int64_t batch, max_len, len, lm_layers;
    gpucore_tensor **k, **v;       /* per layer [B, kv_heads, max_len, head_dim] */
};

/* ---- config.c ---- */
GPUCORE_HIDDEN gpucore_status lm_config_read(const char *folder, lm_config *cfg);
/* The same from config.json's text (a GGUF file's metadata written as one); label names the source. */
GPUCORE_HIDDEN gpucore_status lm_config_from_text(const char *text, const char *label, lm_config *cfg);
GPUCORE_HIDDEN void lm_config_free(lm_config *cfg);
/* torch's dtype names ("float32", "bfloat16", "float16") to a gpucore float dtype (-1: another) and back. */
GPUCORE_HIDDEN int lm_dtype_from_torch(const char *s);
GPUCORE_HIDDEN const char *lm_torch_dtype(int dtype);
/* The math refuses sequences past max_position_embeddings or an active sliding window. */
GPUCORE_HIDDEN gpucore_status lm_check_length(const gpucore_lm *lm, int64_t total, const char *op);

/* ---- weights.c: the registry of named tensors and loading them ---- */
GPUCORE_HIDDEN gpucore_status lm_build_registry(gpucore_lm *lm);
GPUCORE_HIDDEN gpucore_status lm_load_weights(gpucore_lm *lm, int dtype);
GPUCORE_HIDDEN void lm_free_weights(gpucore_lm *lm);
/* Free the registry (parameter names, layers and their linears' module names), not the tensors. */
GPUCORE_HIDDEN void lm_free_registry(gpucore_lm *lm);
/* ---- load_gguf.c: a GGUF file instead of a folder ---- */
/* Whether path is a file, read as GGUF (a Hugging Face model is a folder). */
GPUCORE_HIDDEN int lm_is_gguf(const char *path);
/* Config from the file's metadata, the registry, and every weight decoded to dtype (-1: the
 * file's float dtype, f32 for quantized weights), one tensor at a time; all or nothing. */
GPUCORE_HIDDEN gpucore_status lm_load_gguf(gpucore_lm *lm, int dtype);
/* ---- quantize.c: quantized linear weights ---- */
/* Quantizes the dense weight t ([out, in], any context, any float dtype) into l's bytes on the
 * model's context in the format asked for at load (lm->quant_fmt). t is left to the caller. */
GPUCORE_HIDDEN gpucore_status lm_quantize_linear(gpucore_lm *lm, lm_linear *l, const gpucore_tensor *t);
/* l's weight from host bytes already in format fmt (a GGUF block type, or bitsandbytes' NF4/FP4
 * with its block size): copied to the model's context. */
GPUCORE_HIDDEN gpucore_status lm_adopt_quantized(gpucore_lm *lm, lm_linear *l, int fmt, int64_t block, const void *bytes,
                                                 int64_t nbytes);
/* Replaces l's quantized weight by its dequantized values in the model's dtype (l->w). */
GPUCORE_HIDDEN gpucore_status lm_dequantize_linear(gpucore_lm *lm, lm_linear *l);
/* After loading: gpucore_lm_quantization's text from the formats held; frees the host context. */
GPUCORE_HIDDEN void lm_quant_finish(gpucore_lm *lm);
/* The tensor a parameter holds: the dense one, or a quantized weight's bytes. */
GPUCORE_HIDDEN gpucore_tensor *lm_param_tensor(const lm_param *p);

/* ---- lm.c: the handle, queries, shared helpers ---- */
GPUCORE_HIDDEN gpucore_status lm_check(const gpucore_lm *lm, const char *op);
/* printf into a new heap string (NULL on OOM). */
GPUCORE_HIDDEN char *lm_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
GPUCORE_HIDDEN void lm_destroy_tensor(gpucore_tensor **t);
/* A new contiguous tensor of t's shape and the given dtype, holding t (cast), or the
 * transpose of a 2-d t when transpose != 0. */
GPUCORE_HIDDEN gpucore_status lm_convert(gpucore_tensor *t, int dtype, int transpose, gpucore_tensor **out);
GPUCORE_HIDDEN gpucore_status lm_new(gpucore_lm *lm, int dtype, int ndim, const int64_t *shape, gpucore_tensor **out);
/* Ids from the host (checked against vocab) as an i64 [B, T] tensor. */
GPUCORE_HIDDEN gpucore_status lm_ids_from_host(gpucore_lm *lm, const int64_t *ids, int64_t batch, int64_t seq,
                                               const char *op, gpucore_tensor **out);
GPUCORE_HIDDEN gpucore_status lm_check_ids(const gpucore_lm *lm, const gpucore_tensor *ids, const char *what,
                                           const char *op);
/* Rebuild the trainable list from the adapters / full fine-tuning state. */
GPUCORE_HIDDEN gpucore_status lm_rebuild_trainable(gpucore_lm *lm);
GPUCORE_HIDDEN void lm_free_trainable(gpucore_lm *lm);
/* Visit every linear of the model. */
typedef gpucore_status (*lm_linear_fn)(gpucore_lm *lm, lm_linear *l, void *user);
GPUCORE_HIDDEN gpucore_status lm_for_each_linear(gpucore_lm *lm, lm_linear_fn fn, void *user);

/* ---- layers.c: segments (call NULL: inference, nothing saved) ---- */
typedef struct lm_run {
    gpucore_lm_cache *cache;       /* NULL: no cache */
    int64_t pos0;                  /* position of the first token */
} lm_run;
GPUCORE_HIDDEN gpucore_status lm_attention_forward(lm_layer *L, gpucore_ckpt_call *call, const lm_run *run,
                                                   const gpucore_tensor *x, gpucore_tensor **y, gpucore_stream *s);
GPUCORE_HIDDEN gpucore_status lm_mlp_forward(lm_layer *L, gpucore_ckpt_call *call, const gpucore_tensor *x,
                                             gpucore_tensor **y, gpucore_stream *s);
GPUCORE_HIDDEN gpucore_status lm_final_norm_forward(gpucore_lm *lm, gpucore_ckpt_call *call, const gpucore_tensor *x,
                                                    gpucore_tensor **y, gpucore_stream *s);
/* checkpoint-executor callbacks (user: lm_layer* / gpucore_lm*) */
GPUCORE_HIDDEN gpucore_status lm_seg_attention_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x,
                                                   gpucore_tensor **y, gpucore_stream *s, void *user);
GPUCORE_HIDDEN gpucore_status lm_seg_attention_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy,
                                                   gpucore_tensor *dx, gpucore_stream *s, void *user);
GPUCORE_HIDDEN gpucore_status lm_seg_mlp_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                             gpucore_stream *s, void *user);
GPUCORE_HIDDEN gpucore_status lm_seg_mlp_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                             gpucore_stream *s, void *user);
GPUCORE_HIDDEN gpucore_status lm_seg_norm_fwd(gpucore_ckpt_call *call, const gpucore_tensor *x, gpucore_tensor **y,
                                              gpucore_stream *s, void *user);
GPUCORE_HIDDEN gpucore_status lm_seg_norm_bwd(gpucore_ckpt_call *call, const gpucore_tensor *dy, gpucore_tensor *dx,
                                              gpucore_stream *s, void *user);

/* ---- plan.c: the memory plan ---- */
/* After a training step of batch x seq ran out of memory: the allocator's message (the last error) with
 * the plan's account of the step appended (at_start: bytes allocated when it began; the categories at
 * the planned peak) and the micro-batch / checkpoint policy that fits under the context's limit. */
GPUCORE_HIDDEN void lm_explain_oom(const gpucore_lm *lm, int64_t batch, int64_t seq, int64_t at_start);

/* ---- lora_peft.c: file helpers shared with save.c, PEFT's target rule ---- */
/* PEFT's rule for a list of target names: the module name equals target or ends with "." + target. */
GPUCORE_HIDDEN int lm_module_matches(const char *module, const char *target);
GPUCORE_HIDDEN gpucore_status lm_make_dir(const char *folder, const char *op);
GPUCORE_HIDDEN gpucore_status lm_write_text(const char *path, const char *text, const char *op);

/* ---- forward.c ---- */
GPUCORE_HIDDEN gpucore_status lm_rope_tables(gpucore_lm *lm);
/* x0 = embedding(ids) (+ wpe at positions pos0..) : new [B, T, D] */
GPUCORE_HIDDEN gpucore_status lm_embed(gpucore_lm *lm, const gpucore_tensor *ids, int64_t pos0, gpucore_tensor **x0,
                                       gpucore_tensor **pos_ids, gpucore_stream *s);
GPUCORE_HIDDEN gpucore_status lm_head_forward(gpucore_lm *lm, const gpucore_tensor *h, gpucore_tensor **logits,
                                              gpucore_stream *s);
GPUCORE_HIDDEN const gpucore_tensor *lm_head_weight(const gpucore_lm *lm);
/* Embeddings, layers and final norm without saving anything: new normed hidden states [B, T, D]. */
GPUCORE_HIDDEN gpucore_status lm_run_layers(gpucore_lm *lm, const gpucore_tensor *ids, const lm_run *run,
                                            gpucore_tensor **h);

/* ---- head_loss.c: the head and the causal-LM loss over row chunks ---- */
/* Rows of one chunk for a batch of `rows` rows. */
GPUCORE_HIDDEN int64_t lm_head_chunk_rows(const gpucore_lm *lm, int64_t rows);
/* The same for a vocabulary, a dtype and the rows asked for (0: by size), without a model. */
GPUCORE_HIDDEN int64_t lm_head_chunk_rows_for(int64_t vocab, int dtype, int64_t asked, int64_t rows);
/* *loss = (the cross-entropy of h·Wᵀ against targets [B, T], summed over the rows whose target is not
 * -100) / divisor. dh (may be NULL: the loss only) receives its gradient [B, T, D]; dw (may be NULL)
 * receives the head weight's, added to what it holds when dw_add. divisor 0: loss NaN, gradients 0. */
GPUCORE_HIDDEN gpucore_status lm_head_loss(gpucore_lm *lm, const gpucore_tensor *h, const gpucore_tensor *targets,
                                           int64_t divisor, gpucore_tensor *dh, gpucore_tensor *dw, int dw_add,
                                           double *loss);

#endif
