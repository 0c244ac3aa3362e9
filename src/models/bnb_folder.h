/*
 * bnb_folder.h — bitsandbytes' 4-bit layout of a Hugging Face folder (bnb_folder.c): the
 * quantization_config read from config.json, a quantized linear layer's tensors read and written.
 */
#ifndef GPUCORE_MODELS_BNB_FOLDER_H
#define GPUCORE_MODELS_BNB_FOLDER_H
#include "lm_internal.h"

typedef struct lm_bnb {
    int fmt;            /* GPUCORE_QUANT_NF4 or GPUCORE_QUANT_FP4; -1: no quantization_config */
    int compute_dtype;  /* bnb_4bit_compute_dtype (float32 when absent) */
    void *root;         /* config.json parsed (cJSON), owned */
    const void *skip;   /* llm_int8_skip_modules (a cJSON array in root) or NULL */
} lm_bnb;

/* config.json's quantization_config: none (fmt -1), bitsandbytes 4-bit (fmt, compute dtype), or an
 * error naming what is not read (another quant_method, load_in_8bit, quant storage, ...). */
GPUCORE_HIDDEN gpucore_status lm_bnb_read_config(const char *json, lm_bnb *b);
GPUCORE_HIDDEN void lm_bnb_free(lm_bnb *b);
/* A module llm_int8_skip_modules keeps dense (transformers' rule: its name holds an entry). */
GPUCORE_HIDDEN int lm_bnb_skipped(const lm_bnb *b, const char *module);
/* name is one of the tensors bitsandbytes stores beside a weight named weight of format fmt
 * (NF4/FP4: .absmax, .quant_map, .quant_state.*, .nested_*; INT8_ROW: <m>.SCB, .weight_format). */
GPUCORE_HIDDEN int lm_bnb_state_key(int fmt, const char *weight, const char *name);
/* The open file holding tensor name (its file name in *file), or NULL. */
typedef gpucore_safetensors *(*lm_bnb_find)(void *user, const char *name, const char **file);
/* l's weight read from its four tensors (six with double quantization: the absmax rebuilt in f32
 * as bitsandbytes does, and config.json's bnb_4bit_use_double_quant turned false), every dtype,
 * shape and quant_state field checked, the code book equal to ours; adopted as l->wq. */
GPUCORE_HIDDEN gpucore_status lm_bnb_load_linear(gpucore_lm *lm, const lm_bnb *b, lm_linear *l, lm_bnb_find find,
                                                 void *user);
/* l's weight as bitsandbytes' tensors on hc: names[0..*count-1] (malloc'ed) and ts[...]: four for
 * NF4/FP4, three for INT8_ROW (weight, SCB, weight_format; i8[0] set: the weight is written I8). */
GPUCORE_HIDDEN gpucore_status lm_bnb_save_linear(gpucore_lm *lm, const lm_linear *l, gpucore_context *hc,
                                                 char **names, gpucore_tensor **ts, const char **i8, int *count);
/* config.json text with transformers' quantization_config for load_in_4bit (NF4/FP4) or
 * load_in_8bit (INT8_ROW), compute dtype dtype, inserted first (malloc'ed; NULL when json has no
 * object). */
GPUCORE_HIDDEN char *lm_bnb_config_text(const char *json, int fmt, int dtype);
#endif
