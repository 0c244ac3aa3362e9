/*
 * test_cuda_contract_host.c — issue 18's host-code items 4 (rest), 6 (rest), 8, 9
 * and 12 on the contract stand-ins (suite cuda-contract): each case failed
 * before its fix. Run with GPUCORE_CUDA_PLUGIN set to the contract module
 * (tests/cuda_contract/meson.build); the stand-ins' counters are taken from
 * that module with dlsym.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "contract_test.h"

#define counter standin_counter_

/* Item 12: the allocator's events only order reuse; they are created with cudaEventDisableTiming. */
static void test_untimed_events(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cuda:0", &ctx));
    if (!ctx) return;
    gpucore_stream *s = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &s));
    long timed = counter("event_created_timed"), untimed = counter("event_created_untimed");
    int64_t shape[1] = {1024};
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &t));
    CHECK_OK(gpucore_fill(t, 1.0, s));
    CHECK_OK(gpucore_tensor_record_stream(t, s));
    gpucore_tensor_destroy(t); /* reuse must wait for s: an allocator event */
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK(counter("event_created_untimed") > untimed);
    CHECK(counter("event_created_timed") == timed);
    if (counter("event_created_timed") != timed)
        fprintf(stderr, "  the allocator created %ld timed events\n", counter("event_created_timed") - timed);
    gpucore_stream_destroy(s);
    gpucore_context_destroy(ctx);
    expect_clean("untimed allocator events");
}

int main(void)
{
    if (!contract_open()) return 1;
    test_untimed_events();
    return check_finish("test_cuda_contract_host");
}
