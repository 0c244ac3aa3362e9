/*
 * op_tables.h — the one list of each enumerated op family and of the dtypes,
 * as X-macros. Everything that must stay in step with a list is generated from
 * it: the internal codes (GPUCORE_EW_*, GPUCORE_RED_*, GPUCORE_ROWS_*,
 * GPUCORE_KDT_*), the names (gpucore_enum_name, gpucore_dtype_name, profiler
 * names), the range checks and their messages (src/ops/op_names.c), the
 * per-element formulas of the elementwise family (elementwise_math.h, used by
 * the CPU loop, the CUDA kernel and the SIMT emulation alike), and static
 * asserts that the public enums of include/gpucore.h carry the same values.
 * Python checks its constants against these lists through gpucore_enum_name
 * (python/tests/test_constants.py).
 *
 * Each family is a macro taking X; an entry is X(NAME, name, ...columns). The
 * public enum value is the entry's position, so append new entries at the end
 * (the public header's ABI rule: values are never renumbered).
 * Plain C preprocessor, no includes: nvcc, the CPU backend and the API layer
 * read the same file. docs/ADDING_AN_OP.md says which files an op touches.
 */
#ifndef GPUCORE_KERNELS_OP_TABLES_H
#define GPUCORE_KERNELS_OP_TABLES_H

/* Tensor dtypes (gpucore_dtype): X(NAME, name, bytes). */
#define GPUCORE_DTYPE_TABLE(X)                                                                                       \
    X(F32, f32, 4) X(F64, f64, 8) X(F16, f16, 2) X(BF16, bf16, 2) X(I32, i32, 4) X(I64, i64, 8) X(U8, u8, 1)          \
    X(FP8_E4M3, fp8_e4m3, 1) X(FP8_E5M2, fp8_e5m2, 1)

/* Binary ops (gpucore_binary_op): X(NAME, name, f32 formula of a and b). A fused
 * activation is applied to the result. The formulas past DIV are functions of
 * elementwise_math.h (PyTorch's div rounding modes, NaN-propagating max/min). */
#define GPUCORE_BINARY_TABLE(X)                                                                                      \
    X(ADD, add, a + b)                                                                                               \
    X(SUB, sub, a - b)                                                                                               \
    X(MUL, mul, a * b)                                                                                               \
    X(DIV, div, a / b)                                                                                               \
    X(DIV_TRUNC, div_trunc, truncf(a / b))                                                                           \
    X(DIV_FLOOR, div_floor, gpucore_floor_divide(a, b))                                                              \
    X(MAXIMUM, maximum, gpucore_maximum(a, b))                                                                       \
    X(MINIMUM, minimum, gpucore_minimum(a, b))

/* Unary ops (gpucore_unary_op): X(NAME, name, f32 formula of a, SIMD or SCALAR).
 * SIMD: the CPU loop may vectorise the formula (it gives the same bits as the
 * scalar call: +, *, fabsf, ...); SCALAR: a libm call, which the CPU runs
 * through SLEEF's vector version where cpu_vec.c has one (within 1 ulp), else
 * scalar. */
#define GPUCORE_UNARY_TABLE(X)                                                                                       \
    X(EXP, exp, expf(a), SCALAR)                                                                                     \
    X(LOG, log, logf(a), SCALAR)                                                                                     \
    X(SQRT, sqrt, sqrtf(a), SCALAR)                                                                                  \
    X(RSQRT, rsqrt, 1.0f / sqrtf(a), SCALAR)                                                                         \
    X(ABS, abs, fabsf(a), SIMD)                                                                                      \
    X(NEG, neg, -a, SIMD)                                                                                            \
    X(SQUARE, square, a * a, SIMD)

/* Activations after ACT_NONE (gpucore_activation 1..): X(NAME, name, forward,
 * derivative, SIMD or SCALAR), the formulas being activation_math.h's functions. */
#define GPUCORE_ACTIVATION_TABLE(X)                                                                                  \
    X(RELU, relu, gpucore_relu, gpucore_relu_grad, SIMD)                                                             \
    X(GELU_ERF, gelu_erf, gpucore_gelu_erf, gpucore_gelu_erf_grad, SCALAR)                                           \
    X(GELU_TANH, gelu_tanh, gpucore_gelu_tanh, gpucore_gelu_tanh_grad, SCALAR)                                       \
    X(SILU, silu, gpucore_silu, gpucore_silu_grad, SCALAR)                                                           \
    X(SIGMOID, sigmoid, gpucore_sigmoid, gpucore_sigmoid_grad, SCALAR)                                               \
    X(TANH, tanh, gpucore_tanh_act, gpucore_tanh_grad, SCALAR)

/* Reductions (gpucore_reduction, GPUCORE_REDUCTION_NAME): X(NAME, name). */
#define GPUCORE_REDUCTION_TABLE(X) X(SUM, sum) X(MEAN, mean) X(MAX, max) X(MIN, min) X(ARGMAX, argmax) X(SUMSQ, sumsq)

/* Cross-entropy loss reductions (gpucore_loss_reduction, GPUCORE_LOSS_NAME): X(NAME, name). */
#define GPUCORE_LOSS_REDUCTION_TABLE(X) X(NONE, none) X(MEAN, mean) X(SUM, sum)

/* Matmul epilogues (gpucore_epilogue, GPUCORE_EPILOGUE_NAME): X(NAME, name). */
#define GPUCORE_EPILOGUE_TABLE(X)                                                                                    \
    X(NONE, none) X(BIAS, bias) X(RELU, relu) X(BIAS_RELU, bias_relu) X(GELU, gelu) X(BIAS_GELU, bias_gelu)          \
    X(DGELU, dgelu) X(DGELU_BGRAD, dgelu_bgrad) X(BGRAD_A, bgrad_a) X(BGRAD_B, bgrad_b)

/* Row-family ops (internal, GPUCORE_ROWS_*): X(NAME, profiler name, main-operand
 * traffic in rows x cols elements). */
#define GPUCORE_ROWS_TABLE(X)                                                                                        \
    X(SOFTMAX, softmax, 2)                                                                                           \
    X(LOG_SOFTMAX, log_softmax, 2)                                                                                   \
    X(SOFTMAX_BWD, softmax_backward, 3)                                                                              \
    X(LOG_SOFTMAX_BWD, log_softmax_backward, 3)                                                                      \
    X(LAYERNORM, layer_norm, 2)                                                                                      \
    X(LAYERNORM_BWD, layer_norm_backward, 3)                                                                         \
    X(RMSNORM, rms_norm, 2)                                                                                          \
    X(RMSNORM_BWD, rms_norm_backward, 3)                                                                             \
    X(CE_FWD, cross_entropy, 1)                                                                                      \
    X(CE_BWD, cross_entropy_backward, 2)                                                                             \
    X(EMBED, embedding, 1)                                                                                           \
    X(EMBED_BWD, embedding_backward, 1)

/* An entry's name as a string, for `{GPUCORE_xxx_TABLE(GPUCORE_TABLE_NAME_STR)}` name arrays. */
#define GPUCORE_TABLE_NAME_STR(N, name, ...) #name,

#endif
