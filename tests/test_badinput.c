/*
 * test_badinput.c — every call given bad input: NULL handles and pointers, bad
 * dtypes, negative / overflowing / too many dims, shape, dtype and device
 * mismatches, out-of-range values, and handles used after destroy. Each gets a
 * documented status and a message, and the library stays usable afterwards.
 */
#include <stdint.h>
#include "check.h"

int main(void)
{
    gpucore_context *ctx = NULL, *other = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    CHECK_OK(gpucore_context_create("cpu", &other));
    gpucore_tensor *t = NULL;
    int64_t shape[2] = {4, 5};
    float buf[20] = {0};

    /* NULLs */
    CHECK_STATUS(gpucore_context_create("cpu", NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_context_synchronize(NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_context_device(NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_create(NULL, GPUCORE_F32, 2, shape, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F32, 2, NULL, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_fill(NULL, 1.0, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_random(NULL, GPUCORE_UNIFORM, 0, 1, 0, 0, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_copy(NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_copy_from_host(NULL, buf, 80), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_copy_to_host(buf, 80, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_shape(NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_strides(NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_data(NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_slice(NULL, 0, 0, 1, 1, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_reshape(NULL, 1, shape, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_transpose(NULL, 0, 1, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_tensor_permute(NULL, NULL, &t), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_stream_create(NULL, 0, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_stream_synchronize(NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_stream_query(NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_event_create(NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_event_record(NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_event_synchronize(NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_stream_wait_event(NULL, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_context_default_stream(ctx, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_device_count(GPUCORE_DEVICE_CPU, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_device_get_properties(GPUCORE_DEVICE_CPU, 0, NULL), GPUCORE_ERR_NULL_POINTER);
    CHECK(gpucore_tensor_ndim(NULL) == -1 && gpucore_tensor_numel(NULL) == -1 && gpucore_tensor_nbytes(NULL) == -1);
    CHECK(gpucore_tensor_is_contiguous(NULL) == -1);
    CHECK_OK(gpucore_tensor_destroy(NULL));   /* destroying NULL is a no-op */
    CHECK_OK(gpucore_context_destroy(NULL));
    CHECK_OK(gpucore_stream_destroy(NULL));
    CHECK_OK(gpucore_event_destroy(NULL));

    /* bad dtypes, dims, sizes */
    CHECK_STATUS(gpucore_tensor_create(ctx, (gpucore_dtype)99, 2, shape, &t), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_tensor_create(ctx, (gpucore_dtype)-1, 2, shape, &t), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F32, -1, shape, &t), GPUCORE_ERR_INVALID_ARGUMENT);
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F32, 9, nine, &t), GPUCORE_ERR_INVALID_ARGUMENT);
    int64_t negative[2] = {4, -5};
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F32, 2, negative, &t), GPUCORE_ERR_INVALID_ARGUMENT);
    int64_t huge[2] = {INT64_MAX / 2, 3};
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F32, 2, huge, &t), GPUCORE_ERR_OVERFLOW);
    int64_t bytes_overflow[1] = {INT64_MAX / 4 + 1};
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_F64, 1, bytes_overflow, &t), GPUCORE_ERR_OVERFLOW);
    int64_t too_big[1] = {(int64_t)1 << 60}; /* fits int64 but no machine has it */
    CHECK_STATUS(gpucore_tensor_create(ctx, GPUCORE_U8, 1, too_big, &t), GPUCORE_ERR_OUT_OF_MEMORY);
    CHECK(strstr(gpucore_last_error(), "asked for") != NULL);
    int64_t zero_and_huge[2] = {0, INT64_MAX};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, zero_and_huge, &t)); /* empty: no overflow */
    CHECK(gpucore_tensor_numel(t) == 0);
    gpucore_tensor_destroy(t);
    int64_t wrap_strides[2] = {-1, 1};
    CHECK_STATUS(gpucore_tensor_wrap(ctx, GPUCORE_F32, 2, shape, wrap_strides, buf, NULL, NULL, &t), GPUCORE_ERR_NOT_SUPPORTED);
    int64_t far_strides[2] = {INT64_MAX / 2, 1};
    CHECK_STATUS(gpucore_tensor_wrap(ctx, GPUCORE_F32, 2, shape, far_strides, buf, NULL, NULL, &t), GPUCORE_ERR_OVERFLOW);
    CHECK_STATUS(gpucore_tensor_wrap(ctx, GPUCORE_F32, 2, shape, NULL, NULL, NULL, NULL, &t), GPUCORE_ERR_NULL_POINTER);

    /* views with bad arguments */
    gpucore_tensor *a = NULL, *b = NULL, *v = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &a));
    CHECK_STATUS(gpucore_tensor_slice(a, 2, 0, 1, 1, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_slice(a, -3, 0, 1, 1, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_slice(a, 0, 0, 1, 0, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_slice(a, 0, 0, 1, 1, NULL), GPUCORE_ERR_NULL_POINTER);
    int64_t bad_reshape[2] = {3, 7}, two_infer[2] = {-1, -1}, neg_reshape[1] = {-2}, infer_bad[2] = {3, -1};
    CHECK_STATUS(gpucore_tensor_reshape(a, 2, bad_reshape, &v), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "[4, 5]") != NULL);
    CHECK_STATUS(gpucore_tensor_reshape(a, 2, two_infer, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_reshape(a, 1, neg_reshape, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_reshape(a, 2, infer_bad, &v), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_tensor_reshape(a, 9, nine, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    int dup_perm[2] = {0, 0}, far_perm[2] = {0, 5};
    CHECK_STATUS(gpucore_tensor_permute(a, dup_perm, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_permute(a, far_perm, &v), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_tensor_transpose(a, 0, 2, &v), GPUCORE_ERR_INVALID_ARGUMENT);

    /* copies: size, dtype, shape, device mismatches and overlap */
    CHECK_STATUS(gpucore_copy_from_host(a, buf, 79), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "79") && strstr(gpucore_last_error(), "80"));
    CHECK_STATUS(gpucore_copy_to_host(buf, 81, a), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK_STATUS(gpucore_copy_from_host(a, NULL, 80), GPUCORE_ERR_NULL_POINTER);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F64, 2, shape, &b));
    CHECK_STATUS(gpucore_copy(b, a, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    gpucore_tensor_destroy(b);
    int64_t shape_t[2] = {5, 4};
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape_t, &b));
    CHECK_STATUS(gpucore_copy(b, a, NULL), GPUCORE_ERR_SHAPE_MISMATCH);
    CHECK(strstr(gpucore_last_error(), "[5, 4]") && strstr(gpucore_last_error(), "[4, 5]"));
    gpucore_tensor_destroy(b);
    CHECK_OK(gpucore_tensor_create(other, GPUCORE_F32, 2, shape, &b));
    CHECK_STATUS(gpucore_copy(b, a, NULL), GPUCORE_ERR_DEVICE_MISMATCH);
    {
        /* the message names both contexts by id, not only by device (two "cpu" contexts) */
        char want_a[32], want_b[32];
        CHECK(gpucore_context_id(ctx) > 0 && gpucore_context_id(other) > gpucore_context_id(ctx));
        snprintf(want_a, sizeof want_a, "context #%lld", (long long)gpucore_context_id(other));
        snprintf(want_b, sizeof want_b, "context #%lld", (long long)gpucore_context_id(ctx));
        CHECK(strstr(gpucore_last_error(), want_a) && strstr(gpucore_last_error(), want_b));
        CHECK(strstr(gpucore_last_error(), "default_context"));
        CHECK(gpucore_context_id(NULL) == -1);
    }
    gpucore_stream *other_stream = NULL;
    CHECK_OK(gpucore_context_default_stream(other, &other_stream));
    CHECK_STATUS(gpucore_fill(a, 1.0, other_stream), GPUCORE_ERR_DEVICE_MISMATCH);
    gpucore_tensor *s1 = NULL, *s2 = NULL;
    CHECK_OK(gpucore_tensor_slice(a, 0, 0, 3, 1, &s1));
    CHECK_OK(gpucore_tensor_slice(a, 0, 1, 4, 1, &s2));
    CHECK_STATUS(gpucore_copy(s1, s2, NULL), GPUCORE_ERR_INVALID_ARGUMENT); /* overlapping */
    CHECK_OK(gpucore_copy(s1, s1, NULL)); /* the same view: a no-op */
    gpucore_tensor_destroy(s1);
    gpucore_tensor_destroy(s2);

    /* fill and random with values the dtype cannot take */
    gpucore_tensor *i8 = NULL, *f8 = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_U8, 2, shape, &i8));
    CHECK_STATUS(gpucore_fill(i8, 256.0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_fill(i8, -1.0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_fill(i8, NAN, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_random(i8, GPUCORE_UNIFORM, 0, 1, 0, 0, NULL), GPUCORE_ERR_DTYPE_MISMATCH);
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_FP8_E4M3, 2, shape, &f8));
    CHECK_STATUS(gpucore_fill(f8, 1.0, NULL), GPUCORE_ERR_NOT_SUPPORTED);
    CHECK_STATUS(gpucore_random(a, (gpucore_distribution)5, 0, 1, 0, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_random(a, GPUCORE_NORMAL, 0, -1, 0, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_random(a, GPUCORE_UNIFORM, 1, 0, 0, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_random(a, GPUCORE_UNIFORM, 0, INFINITY, 0, 0, NULL), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_tensor_destroy(i8);
    gpucore_tensor_destroy(f8);

    /* use after destroy: tensors, streams, events, contexts */
    gpucore_tensor *dead = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 2, shape, &dead));
    CHECK_OK(gpucore_tensor_destroy(dead));
    CHECK_STATUS(gpucore_fill(dead, 1.0, NULL), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_tensor_destroy(dead), GPUCORE_ERR_INVALID_HANDLE); /* double destroy */
    CHECK_STATUS(gpucore_copy_to_host(buf, 80, dead), GPUCORE_ERR_INVALID_HANDLE);
    CHECK(gpucore_tensor_numel(dead) == -1);
    gpucore_stream *s = NULL;
    gpucore_event *e = NULL;
    CHECK_OK(gpucore_stream_create(ctx, 0, &s));
    CHECK_OK(gpucore_stream_destroy(s));
    CHECK_STATUS(gpucore_stream_synchronize(s), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_fill(a, 1.0, s), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_OK(gpucore_event_create(ctx, &e));
    CHECK_OK(gpucore_event_destroy(e));
    CHECK_STATUS(gpucore_event_record(e, NULL), GPUCORE_ERR_INVALID_HANDLE);
    gpucore_stream *def = NULL;
    CHECK_OK(gpucore_context_default_stream(ctx, &def));
    CHECK_STATUS(gpucore_stream_destroy(def), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(gpucore_event_elapsed_ms(NULL, NULL, NULL), GPUCORE_ERR_NULL_POINTER);

    /* destroying a context also frees the events and streams the user did not destroy */
    gpucore_event *left_event = NULL;
    gpucore_stream *left_stream = NULL;
    CHECK_OK(gpucore_event_create(other, &left_event));
    CHECK_OK(gpucore_stream_create(other, 0, &left_stream));
    CHECK_OK(gpucore_event_record(left_event, left_stream));

    /* destroying a context invalidates its tensors (and frees them) */
    gpucore_tensor *orphan = NULL;
    CHECK_OK(gpucore_tensor_create(other, GPUCORE_F32, 2, shape, &orphan));
    CHECK_OK(gpucore_context_destroy(other));
    CHECK_STATUS(gpucore_fill(orphan, 1.0, NULL), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_fill(b, 1.0, NULL), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_context_synchronize(other), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_tensor_create(other, GPUCORE_F32, 2, shape, &t), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_context_destroy(other), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_event_query(left_event), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_event_destroy(left_event), GPUCORE_ERR_INVALID_HANDLE);
    CHECK_STATUS(gpucore_stream_synchronize(left_stream), GPUCORE_ERR_INVALID_HANDLE);

    /* still usable after all of that */
    CHECK_OK(gpucore_fill(a, 7.0, NULL));
    CHECK_OK(gpucore_copy_to_host(buf, 80, a));
    CHECK(buf[19] == 7.0f);
    gpucore_tensor_destroy(a);
    CHECK_OK(gpucore_context_destroy(ctx));
    return check_finish("test_badinput");
}
