/*
 * fuzz_alloc_conf.c — libFuzzer target: the GPUCORE_ALLOC_CONF parser and the
 * other configuration strings (device specs). Any string must be accepted or
 * refused with a status and a message; a context created with an accepted
 * configuration must work.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    gpucore_status st = gpucore_alloc_conf_validate(text);
    if (st != GPUCORE_OK && !gpucore_last_error()[0]) abort(); /* a refusal must say why */
    /* the same bytes as a device string: refused or a working context */
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(text, &ctx) == GPUCORE_OK) {
        gpucore_stream *s = NULL;
        if (gpucore_context_default_stream(ctx, &s) != GPUCORE_OK) abort();
        gpucore_context_destroy(ctx);
    }
    free(text);
    return 0;
}
