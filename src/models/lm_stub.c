/*
 * lm_stub.c — the language-model calls not implemented yet: each reports
 * GPUCORE_ERR_NOT_SUPPORTED, so bindings can be written against every symbol.
 */
#include "gpucore.h"
#include "core/internal.h"

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
