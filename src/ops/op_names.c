/*
 * op_names.c — the names and range checks of the public enums that list ops
 * (and dtypes), generated from kernels/op_tables.h: gpucore_enum_name (what
 * bindings read their constants through), ops_check_enum (the "op 9 is not a
 * gpucore_unary_op (exp=0, ...)" errors of every front-end), and compile-time
 * proof that each public enum value equals its table entry's internal code.
 */
#include <stdio.h>
#include <string.h>
#include "ops_internal.h"
#include "op_tables.h"
#include "elementwise_math.h"
#include "reduce_math.h"
#include "rows_math.h"

/* ---- public enum value == internal code, entry by entry (a table entry without
 * its public enum value, or with another one, does not compile) ---- */
#define ASSERT_DTYPE(N, ...) _Static_assert((int)GPUCORE_##N == GPUCORE_KDT_##N, "gpucore_dtype " #N);
GPUCORE_DTYPE_TABLE(ASSERT_DTYPE)
_Static_assert((int)GPUCORE_DTYPE_COUNT == GPUCORE_KDT_COUNT, "gpucore_dtype has an entry op_tables.h lacks");
#define ASSERT_BINARY(N, ...) _Static_assert((int)GPUCORE_##N == GPUCORE_EW_##N, "gpucore_binary_op " #N);
GPUCORE_BINARY_TABLE(ASSERT_BINARY)
#define ASSERT_UNARY(N, ...) \
    _Static_assert((int)GPUCORE_##N == GPUCORE_EW_##N - GPUCORE_EW_UNARY_FIRST, "gpucore_unary_op " #N);
GPUCORE_UNARY_TABLE(ASSERT_UNARY)
#define ASSERT_ACT(N, ...) _Static_assert((int)GPUCORE_ACT_##N == GPUCORE_ACT_CODE_##N, "gpucore_activation " #N);
GPUCORE_ACTIVATION_TABLE(ASSERT_ACT)
_Static_assert((int)GPUCORE_ACT_NONE == GPUCORE_ACT_CODE_NONE, "gpucore_activation NONE");
#define ASSERT_RED(N, ...) _Static_assert((int)GPUCORE_REDUCTION_##N == GPUCORE_RED_##N, "gpucore_reduction " #N);
GPUCORE_REDUCTION_TABLE(ASSERT_RED)
#define ASSERT_LOSS(N, ...) _Static_assert((int)GPUCORE_LOSS_##N == GPUCORE_ROWS_RED_##N, "gpucore_loss_reduction " #N);
GPUCORE_LOSS_REDUCTION_TABLE(ASSERT_LOSS)
enum {
#define EPI_ENUM(N, ...) EPI_##N,
    GPUCORE_EPILOGUE_TABLE(EPI_ENUM)
    EPI_COUNT
};
#define ASSERT_EPI(N, ...) _Static_assert((int)GPUCORE_EPILOGUE_##N == EPI_##N, "gpucore_epilogue " #N);
GPUCORE_EPILOGUE_TABLE(ASSERT_EPI)

/* ---- the names, by public value ---- */
#define NAME_OF GPUCORE_TABLE_NAME_STR
static const char *const dtype_names[] = {GPUCORE_DTYPE_TABLE(NAME_OF)};
static const char *const binary_names[] = {GPUCORE_BINARY_TABLE(NAME_OF)};
static const char *const unary_names[] = {GPUCORE_UNARY_TABLE(NAME_OF)};
static const char *const activation_names[] = {"none", GPUCORE_ACTIVATION_TABLE(NAME_OF)};
static const char *const reduction_names[] = {GPUCORE_REDUCTION_TABLE(NAME_OF)};
static const char *const loss_names[] = {GPUCORE_LOSS_REDUCTION_TABLE(NAME_OF)};
static const char *const epilogue_names[] = {GPUCORE_EPILOGUE_TABLE(NAME_OF)};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const struct enum_table {
    const char *type;
    const char *const *names;
    int count;
} tables[] = {
    {"gpucore_dtype", dtype_names, COUNT(dtype_names)},
    {"gpucore_binary_op", binary_names, COUNT(binary_names)},
    {"gpucore_unary_op", unary_names, COUNT(unary_names)},
    {"gpucore_activation", activation_names, COUNT(activation_names)},
    {"gpucore_reduction", reduction_names, COUNT(reduction_names)},
    {"gpucore_loss_reduction", loss_names, COUNT(loss_names)},
    {"gpucore_epilogue", epilogue_names, COUNT(epilogue_names)},
};

static const struct enum_table *table_of(const char *type)
{
    if (!type) return NULL;
    /* the library's own callers pass the literal the table holds (the linker merges equal
     * literals), so the pointer usually matches and each op skips the string compares */
    for (int i = 0; i < COUNT(tables); i++)
        if (tables[i].type == type) return &tables[i];
    for (int i = 0; i < COUNT(tables); i++)
        if (strcmp(tables[i].type, type) == 0) return &tables[i];
    return NULL;
}

const char *gpucore_enum_name(const char *enum_type, int value)
{
    const struct enum_table *t = table_of(enum_type);
    return t && value >= 0 && value < t->count ? t->names[value] : NULL;
}

gpucore_status ops_check_enum(const char *op, const char *what, const char *type, int value, int first)
{
    const struct enum_table *t = table_of(type);
    if (t && value >= first && value < t->count) return GPUCORE_OK;
    char list[512] = "";
    size_t len = 0;
    for (int i = first; t && i < t->count && len < sizeof list; i++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s=%d", i > first ? ", " : "", t->names[i], i);
        if (w < 0) break;
        len += (size_t)w;
    }
    return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "%s: %s %d is not %s %s (%s)", op, what, value,
                             first ? "one of the" : "a", type, list);
}
