/*
 * simt_check.h — what the SIMT layer's own test programs (test_simt.cpp,
 * test_simt_mma.cpp) share: a counting CHECK, RUN (launch on the NULL stream,
 * which runs the grid now, and return simt_last_error()), and expect_error
 * (a launch must fail with an execution error whose message names the cause).
 */
#ifndef GPUCORE_SIMT_CHECK_H
#define GPUCORE_SIMT_CHECK_H

#include <stdio.h>
#include <string.h>
#include "simt.h"

static int passed, failed;
#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) passed++;                                                      \
        else {                                                                   \
            failed++;                                                            \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                        \
    } while (0)

/* Launch on the NULL stream (runs now); returns simt_last_error(). */
#define RUN(kernel, grid, block, smem, ...) \
    (simt_launch((grid), (block), (smem), NULL, kernel, __VA_ARGS__), simt_last_error())

static inline void expect_error(const char *what, int err, const char *needle)
{
    const char *msg = simt_last_error_message();
    printf("  %s -> error %d: %s\n", what, err, msg);
    CHECK(err == SIMT_ERR_LAUNCH_FAILURE);
    CHECK(strstr(msg, needle) != NULL);
}

#endif
