/*
 * lm_stub.c — placeholders for the language-model API (include/gpucore.h, "language models"),
 * so bindings can be written against the symbols while the implementation lands.
 * Every call reports GPUCORE_ERR_NOT_SUPPORTED. Replaced file by file by src/models/.
 */
#include "gpucore.h"
#include "core/internal.h"

gpucore_status gpucore_lm_create(gpucore_context *ctx, const char *folder, int dtype, gpucore_lm **out)
{
    (void)ctx; (void)folder; (void)dtype; (void)out;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_create: not implemented yet");
}

gpucore_status gpucore_lm_destroy(gpucore_lm *lm)
{
    (void)lm;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_destroy: not implemented yet");
}

gpucore_status gpucore_lm_context(const gpucore_lm *lm, gpucore_context **ctx)
{
    (void)lm; (void)ctx;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_context: not implemented yet");
}

gpucore_status gpucore_lm_config_int(const gpucore_lm *lm, const char *key, int64_t *value)
{
    (void)lm; (void)key; (void)value;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_config_int: not implemented yet");
}

gpucore_status gpucore_lm_config_double(const gpucore_lm *lm, const char *key, double *value)
{
    (void)lm; (void)key; (void)value;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_config_double: not implemented yet");
}

const char * gpucore_lm_arch_name(const gpucore_lm *lm)
{
    (void)lm;
    return NULL;
}

int64_t gpucore_lm_parameter_count(const gpucore_lm *lm)
{
    (void)lm;
    return -1;
}

gpucore_status gpucore_lm_parameter(gpucore_lm *lm, int64_t i, const char **name, gpucore_tensor **param)
{
    (void)lm; (void)i; (void)name; (void)param;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_parameter: not implemented yet");
}

gpucore_status gpucore_lm_forward(gpucore_lm *lm, const gpucore_tensor *input_ids, gpucore_tensor **logits)
{
    (void)lm; (void)input_ids; (void)logits;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_forward: not implemented yet");
}

gpucore_status gpucore_lm_forward_host(gpucore_lm *lm, const int64_t *input_ids, int64_t batch, int64_t seq, gpucore_tensor **logits)
{
    (void)lm; (void)input_ids; (void)batch; (void)seq; (void)logits;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_forward_host: not implemented yet");
}

gpucore_status gpucore_lm_cache_create(gpucore_lm *lm, int64_t batch, int64_t max_len, gpucore_lm_cache **out)
{
    (void)lm; (void)batch; (void)max_len; (void)out;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_cache_create: not implemented yet");
}

gpucore_status gpucore_lm_cache_destroy(gpucore_lm_cache *cache)
{
    (void)cache;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_cache_destroy: not implemented yet");
}

int64_t gpucore_lm_cache_length(const gpucore_lm_cache *cache)
{
    (void)cache;
    return -1;
}

gpucore_status gpucore_lm_cache_reset(gpucore_lm_cache *cache)
{
    (void)cache;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_cache_reset: not implemented yet");
}

gpucore_status gpucore_lm_forward_cached(gpucore_lm *lm, gpucore_lm_cache *cache, const gpucore_tensor *input_ids, int last_only, gpucore_tensor **logits)
{
    (void)lm; (void)cache; (void)input_ids; (void)last_only; (void)logits;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_forward_cached: not implemented yet");
}

gpucore_status gpucore_lm_generate(gpucore_lm *lm, const int64_t *input_ids, int64_t batch, int64_t prompt_len, int64_t max_new_tokens, int do_sample, double temperature, int64_t top_k, double top_p, uint64_t seed, int64_t eos_token_id, int64_t pad_token_id, int64_t *output_ids, int64_t *out_len)
{
    (void)lm; (void)input_ids; (void)batch; (void)prompt_len; (void)max_new_tokens; (void)do_sample; (void)temperature; (void)top_k; (void)top_p; (void)seed; (void)eos_token_id; (void)pad_token_id; (void)output_ids; (void)out_len;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_generate: not implemented yet");
}

int64_t gpucore_lm_trainable_count(const gpucore_lm *lm)
{
    (void)lm;
    return -1;
}

gpucore_status gpucore_lm_trainable(gpucore_lm *lm, int64_t i, const char **name, gpucore_tensor **param, gpucore_tensor **grad)
{
    (void)lm; (void)i; (void)name; (void)param; (void)grad;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_trainable: not implemented yet");
}

gpucore_status gpucore_lm_set_full_finetune(gpucore_lm *lm, int enable)
{
    (void)lm; (void)enable;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_set_full_finetune: not implemented yet");
}

gpucore_status gpucore_lm_loss(gpucore_lm *lm, const gpucore_tensor *input_ids, const gpucore_tensor *labels, double *loss)
{
    (void)lm; (void)input_ids; (void)labels; (void)loss;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_loss: not implemented yet");
}

gpucore_status gpucore_lm_forward_backward(gpucore_lm *lm, const gpucore_tensor *input_ids, const gpucore_tensor *labels, double *loss)
{
    (void)lm; (void)input_ids; (void)labels; (void)loss;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_forward_backward: not implemented yet");
}

gpucore_status gpucore_lm_loss_host(gpucore_lm *lm, const int64_t *input_ids, const int64_t *labels, int64_t batch, int64_t seq, double *loss)
{
    (void)lm; (void)input_ids; (void)labels; (void)batch; (void)seq; (void)loss;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_loss_host: not implemented yet");
}

gpucore_status gpucore_lm_forward_backward_host(gpucore_lm *lm, const int64_t *input_ids, const int64_t *labels, int64_t batch, int64_t seq, double *loss)
{
    (void)lm; (void)input_ids; (void)labels; (void)batch; (void)seq; (void)loss;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_forward_backward_host: not implemented yet");
}

gpucore_status gpucore_lm_set_checkpoint_policy(gpucore_lm *lm, gpucore_ckpt_policy policy, int64_t param)
{
    (void)lm; (void)policy; (void)param;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_set_checkpoint_policy: not implemented yet");
}

gpucore_status gpucore_lm_set_seed(gpucore_lm *lm, uint64_t seed)
{
    (void)lm; (void)seed;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_set_seed: not implemented yet");
}

gpucore_status gpucore_lm_add_lora(gpucore_lm *lm, int64_t r, double lora_alpha, double lora_dropout, const char *const *target_modules, int64_t count, uint64_t seed)
{
    (void)lm; (void)r; (void)lora_alpha; (void)lora_dropout; (void)target_modules; (void)count; (void)seed;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_add_lora: not implemented yet");
}

gpucore_status gpucore_lm_load_adapter(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_load_adapter: not implemented yet");
}

gpucore_status gpucore_lm_save_adapter(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_save_adapter: not implemented yet");
}

gpucore_status gpucore_lm_merge_adapter(gpucore_lm *lm)
{
    (void)lm;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_merge_adapter: not implemented yet");
}

int64_t gpucore_lm_lora_count(const gpucore_lm *lm)
{
    (void)lm;
    return -1;
}

gpucore_status gpucore_lm_save_pretrained(gpucore_lm *lm, const char *folder)
{
    (void)lm; (void)folder;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "gpucore_lm_save_pretrained: not implemented yet");
}
