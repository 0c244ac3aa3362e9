/*
 * comm_names.h — names of collectives, reduction ops and dtypes for the messages
 * that report a failed collective, and a monotonic clock for their deadlines.
 * Static inline so the core library and the CUDA module (a separate .so) share one
 * copy of the text.
 */
#ifndef GPUCORE_COMM_NAMES_H
#define GPUCORE_COMM_NAMES_H

#include <time.h>
#include "backend/backend.h"
#include "core/mono_clock.h"

static inline const char *comm_kind_name(int kind)
{
    static const char *names[] = {"allreduce", "reduce_scatter", "all_gather", "broadcast", "barrier"};
    return kind >= 0 && kind <= GPUCORE_COMM_BARRIER ? names[kind] : "?";
}

static inline const char *comm_op_name(int op)
{
    static const char *names[] = {"sum", "avg", "max", "min"};
    return op >= 0 && op <= GPUCORE_REDUCE_MIN ? names[op] : "?";
}

static inline const char *comm_dtype_name(int dt)
{
    switch (dt) {
    case GPUCORE_F32: return "f32";
    case GPUCORE_F64: return "f64";
    case GPUCORE_F16: return "f16";
    case GPUCORE_BF16: return "bf16";
    case GPUCORE_I32: return "i32";
    default: return "?";
    }
}

#endif
