/*
 * cpu_quant.c — the CPU backend's quantize and dequantize: one task on the stream, parallel
 * over the format's work items (blocks, or rows for INT8_ROW) with OpenMP when large; the
 * arithmetic is kernels/quant_formats.h's, so every backend writes the same bits.
 */
#include "cpu_internal.h"
#include "quant_formats.h"

#define CPU_QUANT_PARALLEL_VALUES 32768

static gpucore_status quant_task(void *p)
{
    const gpucore_quant_args *a = p;
    const gpucore_quant_layout *L = &a->L;
    const int parallel = L->n > CPU_QUANT_PARALLEL_VALUES && L->nblocks > 1;
    if (a->dequantize) {
        CPU_PARALLEL_FOR(parallel, item, L->nblocks,
                         gpucore_quant_item_dequantize(L, a->bytes, item, a->values, a->values_dtype););
        return GPUCORE_OK;
    }
    int64_t first_bad = -1;
    CPU_PARALLEL_FOR(parallel, item, L->nblocks,
        int64_t bad = gpucore_quant_item_quantize(L, a->values, a->values_dtype, item, a->bytes);
        if (bad >= 0) {
            _Pragma("omp critical(cpu_quant_bad)")
            if (first_bad < 0 || bad < first_bad) first_bad = bad;
        });
    *a->first_bad = first_bad;
    return GPUCORE_OK;
}

gpucore_status cpu_quant(void *bctx, const gpucore_quant_args *args, void *s)
{
    (void)bctx;
    return args->L.n <= 4096 ? cpu_stream_enqueue_small(s, quant_task, args, sizeof *args)
                             : cpu_stream_enqueue(s, quant_task, args, sizeof *args);
}
