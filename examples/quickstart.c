/*
 * quickstart.c — the smallest complete libgpucore program: pick a device
 * (GPUCORE_DEVICE or auto), make a tensor, fill it with Philox normals, view a
 * slice, copy it back and print statistics. Every call's status is checked.
 *
 *   cc quickstart.c $(pkg-config --cflags --libs gpucore) -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "gpucore.h"

#define TRY(call)                                                                                 \
    do {                                                                                          \
        gpucore_status st_ = (call);                                                              \
        if (st_ != GPUCORE_OK) {                                                                  \
            fprintf(stderr, "%s failed: %s: %s\n", #call, gpucore_status_string(st_), gpucore_last_error()); \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

int main(void)
{
    gpucore_context *ctx = NULL;
    TRY(gpucore_context_create(NULL, &ctx));
    printf("libgpucore %s on %s\n", gpucore_version_string(), gpucore_context_device_name(ctx));

    int64_t shape[2] = {1024, 1024};
    gpucore_tensor *x = NULL, *rows = NULL;
    TRY(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &x));
    TRY(gpucore_random(x, GPUCORE_NORMAL, 0.0, 2.0, /*seed*/ 2024, /*offset*/ 0, NULL));
    TRY(gpucore_tensor_slice(x, 0, 0, 8, 1, &rows)); /* a view of the first 8 rows */

    int64_t n = gpucore_tensor_numel(x);
    float *host = malloc(sizeof(float) * (size_t)n);
    if (!host) return 1;
    TRY(gpucore_copy_to_host(host, n * 4, x));
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) { sum += host[i]; sq += (double)host[i] * host[i]; }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    printf("normal(0, 2) fill of %lld floats: mean %+.4f, sd %.4f\n", (long long)n, mean, sd);
    printf("first row view: %lld elements, first value %+.6f\n", (long long)gpucore_tensor_numel(rows), host[0]);

    free(host);
    TRY(gpucore_tensor_destroy(rows));
    TRY(gpucore_tensor_destroy(x));
    TRY(gpucore_context_destroy(ctx));
    return fabs(mean) < 0.02 && fabs(sd - 2.0) < 0.02 ? 0 : 1;
}
