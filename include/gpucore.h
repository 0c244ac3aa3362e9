/*
 * gpucore.h — the one public header of libgpucore, and its manual.
 *
 * libgpucore runs neural-network tensor code on NVIDIA GPUs (CUDA backend) and on
 * the CPU (CPU backend) behind one C API. Everything here is plain C: opaque
 * handles, int64_t sizes, enums, and structs passed by pointer, so that a ctypes
 * binding can express every call.
 *
 * Conventions
 *   - Every fallible call returns gpucore_status; GPUCORE_OK (0) is success.
 *     On failure, gpucore_last_error() returns a thread-local message that says
 *     what was wrong in words a user can act on. The library never aborts,
 *     exits or prints (logging goes only where GPUCORE_LOG / a log callback says).
 *   - Lifetimes are explicit: every *_create has a *_destroy. Destroying NULL is
 *     a no-op. Using a destroyed handle is detected (GPUCORE_ERR_INVALID_HANDLE)
 *     because handle memory is never returned to the system, only recycled
 *     oldest-first; a recycled handle can still be mistaken for a new one.
 *   - Ops are asynchronous on a stream: pass a gpucore_stream, or NULL for the
 *     context's current stream. Results are visible to the host after
 *     gpucore_stream_synchronize() or a blocking copy to the host.
 *   - Host pointers passed to *_async copies must stay valid until the stream
 *     has passed that copy (as with cudaMemcpyAsync).
 *
 * ABI rule: within one major version, functions and enum values are only added,
 * never removed or renumbered, and structs passed by pointer only grow at the end
 * (each carries its own size field where it may grow). The soname carries the major.
 *
 * Environment (each also settable through the API):
 *   GPUCORE_DEVICE   = auto | cpu | cuda | cuda:N   device for contexts created with NULL
 *   GPUCORE_LOG      = off | error | warn | info | debug   log level (default off)
 *   GPUCORE_CUDA_PLUGIN = path   the CUDA backend module to load instead of the one
 *                      installed beside libgpucore.so
 */
#ifndef GPUCORE_H
#define GPUCORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GPUCORE_API __declspec(dllexport)
#else
#define GPUCORE_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------ version */

#define GPUCORE_VERSION_MAJOR 0
#define GPUCORE_VERSION_MINOR 1
#define GPUCORE_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH */
#define GPUCORE_VERSION (GPUCORE_VERSION_MAJOR * 10000 + GPUCORE_VERSION_MINOR * 100 + GPUCORE_VERSION_PATCH)

/* The version of the library actually loaded (compare with GPUCORE_VERSION). */
GPUCORE_API int gpucore_version(void);
/* "0.1.0" */
GPUCORE_API const char *gpucore_version_string(void);

/* ------------------------------------------------------------ status codes */

typedef enum gpucore_status {
    GPUCORE_OK = 0,
    GPUCORE_ERR_INVALID_ARGUMENT = 1,  /* a value is out of its documented range */
    GPUCORE_ERR_NULL_POINTER = 2,      /* a required pointer or handle was NULL */
    GPUCORE_ERR_INVALID_HANDLE = 3,    /* a handle that was destroyed or never created */
    GPUCORE_ERR_SHAPE_MISMATCH = 4,    /* shapes that must agree do not */
    GPUCORE_ERR_DTYPE_MISMATCH = 5,    /* dtypes that must agree do not, or a dtype the call does not take */
    GPUCORE_ERR_DEVICE_MISMATCH = 6,   /* tensors or streams from different devices/contexts */
    GPUCORE_ERR_OVERFLOW = 7,          /* a size whose byte count does not fit in int64 */
    GPUCORE_ERR_OUT_OF_MEMORY = 8,     /* the device (or host) allocation failed */
    GPUCORE_ERR_NOT_SUPPORTED = 9,     /* valid, but this build or device cannot do it */
    GPUCORE_ERR_BACKEND_UNAVAILABLE = 10, /* the requested backend cannot be used here (message says why) */
    GPUCORE_ERR_BACKEND = 11,          /* the CUDA runtime / cuBLAS / cuDNN reported an error */
    GPUCORE_ERR_NOT_CONTIGUOUS = 12,   /* the call needs a contiguous tensor */
    GPUCORE_ERR_NOT_READY = 13,        /* query: work is still pending (not an error) */
    GPUCORE_ERR_COMM = 14,             /* a collective failed or timed out */
    GPUCORE_ERR_IO = 15,               /* reading or writing a file failed */
    GPUCORE_ERR_CORRUPT_FILE = 16,     /* a file's content is inconsistent */
    GPUCORE_ERR_TIMEOUT = 17,          /* a wait ran past its limit */
    GPUCORE_ERR_INTERNAL = 18          /* a bug in libgpucore: please report it */
} gpucore_status;

/* Name of a status code ("GPUCORE_ERR_SHAPE_MISMATCH"); never NULL. */
GPUCORE_API const char *gpucore_status_string(gpucore_status status);
/* The message of the last failed call on this thread ("" if none). Valid until
 * the next libgpucore call on this thread. */
GPUCORE_API const char *gpucore_last_error(void);
/* Forget the last error of this thread. */
GPUCORE_API void gpucore_clear_error(void);

/* ----------------------------------------------------------------- logging */

typedef enum gpucore_log_level {
    GPUCORE_LOG_OFF = 0,
    GPUCORE_LOG_ERROR = 1,
    GPUCORE_LOG_WARN = 2,
    GPUCORE_LOG_INFO = 3,
    GPUCORE_LOG_DEBUG = 4
} gpucore_log_level;

typedef void (*gpucore_log_fn)(int level, const char *message, void *user);

/* Level in force (initially from GPUCORE_LOG, default off). */
GPUCORE_API gpucore_log_level gpucore_get_log_level(void);
GPUCORE_API gpucore_status gpucore_set_log_level(gpucore_log_level level);
/* Route log lines to fn (NULL restores the default, which writes to stderr —
 * and only when the level is above OFF, i.e. when the user asked for logs). */
GPUCORE_API void gpucore_set_log_callback(gpucore_log_fn fn, void *user);

/* ----------------------------------------------------------------- devices */

typedef enum gpucore_device_type {
    GPUCORE_DEVICE_CPU = 0,
    GPUCORE_DEVICE_CUDA = 1,
    /* Test builds only: the CUDA kernel sources run on the CPU by the SIMT layer. */
    GPUCORE_DEVICE_CUDA_EMULATED = 2
} gpucore_device_type;

/* Number of devices of a type (0 with GPUCORE_OK when the backend is absent). */
GPUCORE_API gpucore_status gpucore_device_count(gpucore_device_type type, int *count);

/* Whether a backend is usable here. GPUCORE_OK if yes; otherwise
 * GPUCORE_ERR_BACKEND_UNAVAILABLE and `why` (if not NULL) holds the reason and what
 * to do ("no NVIDIA driver found (libcuda.so.1 could not be loaded): ..."). */
GPUCORE_API gpucore_status gpucore_backend_available(gpucore_device_type type, char *why, size_t why_len);

#define GPUCORE_NAME_LEN 256

/* Properties of one device. Fields a backend cannot tell are -1. Set struct_size
 * to sizeof(gpucore_device_properties) before the call. */
typedef struct gpucore_device_properties {
    int64_t struct_size;
    char name[GPUCORE_NAME_LEN];
    int32_t type;                 /* gpucore_device_type */
    int32_t index;
    int32_t compute_major, compute_minor; /* CUDA compute capability; -1 on CPU */
    int32_t multiprocessors;      /* SMs on CUDA; logical cores on CPU */
    int32_t warp_size;
    int64_t total_memory;         /* bytes */
    int64_t free_memory;          /* bytes, at the time of the call */
    int64_t l2_cache_bytes;
    int64_t shared_memory_per_block_optin;
    int32_t clock_khz;            /* SM clock now (NVML) or -1 */
    int32_t memory_clock_khz;
    int32_t utilization_percent;  /* NVML, -1 if NVML is absent */
    int32_t temperature_c;        /* NVML, -1 if NVML is absent */
    int32_t has_native_code;      /* 1 if this build carries machine code (SASS) for this device */
    int32_t has_ptx;              /* 1 if the driver can JIT this build's PTX for this device */
    char pci_bus_id[32];
} gpucore_device_properties;

GPUCORE_API gpucore_status gpucore_device_get_properties(gpucore_device_type type, int index,
                                                         gpucore_device_properties *props);

/* Processes holding memory on a CUDA device (NVML). Fills up to max entries,
 * sets *count to the number found. NOT_SUPPORTED where NVML is absent. */
GPUCORE_API gpucore_status gpucore_device_get_processes(int cuda_index, int64_t *pids, int64_t *used_bytes,
                                                        int max, int *count);

/* Whether CUDA device a can access device b's memory directly. */
GPUCORE_API gpucore_status gpucore_device_can_access_peer(int cuda_a, int cuda_b, int *can);

/* Version of a component found at run time, as text: names are "cuda_driver",
 * "cuda_runtime" (the one this build was linked against), "cublas", "cudnn", "nccl",
 * "nvml", "openblas", "mpi", "cuda_plugin" (path of the loaded module), "build"
 * (the features and CUDA architectures compiled in). NOT_SUPPORTED when absent,
 * with the reason in gpucore_last_error(). */
GPUCORE_API gpucore_status gpucore_component_version(const char *component, char *buf, size_t buf_len);

/* ----------------------------------------------------------------- context */

typedef struct gpucore_context gpucore_context;
typedef struct gpucore_stream gpucore_stream;
typedef struct gpucore_event gpucore_event;
typedef struct gpucore_tensor gpucore_tensor;

/* Create a context bound to one device. device: "cpu", "cuda", "cuda:N", "auto",
 * or NULL for GPUCORE_DEVICE (default "auto": CUDA device 0 if usable, else CPU).
 * An explicit "cuda" request on a machine that cannot run CUDA fails with
 * GPUCORE_ERR_BACKEND_UNAVAILABLE and says why. */
GPUCORE_API gpucore_status gpucore_context_create(const char *device, gpucore_context **out);
/* Waits for the context's streams, then frees everything it owns. Tensors,
 * streams and events still alive become invalid handles. */
GPUCORE_API gpucore_status gpucore_context_destroy(gpucore_context *ctx);
GPUCORE_API gpucore_status gpucore_context_device(const gpucore_context *ctx, gpucore_device_type *type, int *index);
/* Short device name "cpu" / "cuda:0". */
GPUCORE_API const char *gpucore_context_device_name(const gpucore_context *ctx);
/* Wait for all work on all of the context's streams. */
GPUCORE_API gpucore_status gpucore_context_synchronize(gpucore_context *ctx);

/* ----------------------------------------------------------------- streams */

/* The context's default stream (owned by the context; do not destroy). */
GPUCORE_API gpucore_status gpucore_context_default_stream(gpucore_context *ctx, gpucore_stream **out);
/* The stream that ops use when given NULL. Per context and per thread; initially the default stream. */
GPUCORE_API gpucore_status gpucore_context_current_stream(gpucore_context *ctx, gpucore_stream **out);
GPUCORE_API gpucore_status gpucore_context_set_current_stream(gpucore_context *ctx, gpucore_stream *stream);

/* priority: 0 normal; negative is higher priority (CUDA convention), clamped to the device's range. */
GPUCORE_API gpucore_status gpucore_stream_create(gpucore_context *ctx, int priority, gpucore_stream **out);
/* Waits for the stream's work, then destroys it. */
GPUCORE_API gpucore_status gpucore_stream_destroy(gpucore_stream *stream);
/* Returns the first error an asynchronous op on this stream met, if any. */
GPUCORE_API gpucore_status gpucore_stream_synchronize(gpucore_stream *stream);
/* GPUCORE_OK when all work is done, GPUCORE_ERR_NOT_READY while some is pending. */
GPUCORE_API gpucore_status gpucore_stream_query(gpucore_stream *stream);

GPUCORE_API gpucore_status gpucore_event_create(gpucore_context *ctx, gpucore_event **out);
GPUCORE_API gpucore_status gpucore_event_destroy(gpucore_event *event);
/* Mark the point in `stream` (NULL: current stream) that waits and queries refer to. */
GPUCORE_API gpucore_status gpucore_event_record(gpucore_event *event, gpucore_stream *stream);
/* Make `stream` wait, without blocking the host, until `event`'s recorded point is passed. */
GPUCORE_API gpucore_status gpucore_stream_wait_event(gpucore_stream *stream, gpucore_event *event);
GPUCORE_API gpucore_status gpucore_event_synchronize(gpucore_event *event);
GPUCORE_API gpucore_status gpucore_event_query(gpucore_event *event);
/* Milliseconds between two recorded events, both completed. */
GPUCORE_API gpucore_status gpucore_event_elapsed_ms(gpucore_event *start, gpucore_event *end, float *ms);

/* ----------------------------------------------------------------- tensors */

typedef enum gpucore_dtype {
    GPUCORE_F32 = 0,
    GPUCORE_F64 = 1,
    GPUCORE_F16 = 2,
    GPUCORE_BF16 = 3,
    GPUCORE_I32 = 4,
    GPUCORE_I64 = 5,
    GPUCORE_U8 = 6,
    GPUCORE_FP8_E4M3 = 7, /* matmul operands only */
    GPUCORE_FP8_E5M2 = 8, /* matmul operands only */
    GPUCORE_DTYPE_COUNT = 9
} gpucore_dtype;

#define GPUCORE_MAX_DIMS 8

/* Bytes per element (0 for an unknown dtype). */
GPUCORE_API int64_t gpucore_dtype_size(gpucore_dtype dtype);
/* "f32", "bf16", ...; "invalid" for an unknown dtype. */
GPUCORE_API const char *gpucore_dtype_name(gpucore_dtype dtype);

/* A new contiguous (row-major) tensor with uninitialised contents. ndim 0..8;
 * shape entries >= 0 (0 makes an empty tensor). */
GPUCORE_API gpucore_status gpucore_tensor_create(gpucore_context *ctx, gpucore_dtype dtype, int ndim,
                                                 const int64_t *shape, gpucore_tensor **out);
/* Wrap memory the caller owns (host memory for a CPU context, device memory for CUDA).
 * strides are in elements (NULL: contiguous). When the tensor and all its views are
 * destroyed, deleter(deleter_ctx) is called if not NULL. The library never frees `data`. */
GPUCORE_API gpucore_status gpucore_tensor_wrap(gpucore_context *ctx, gpucore_dtype dtype, int ndim,
                                               const int64_t *shape, const int64_t *strides, void *data,
                                               void (*deleter)(void *), void *deleter_ctx,
                                               gpucore_tensor **out);
/* Release this handle. The memory is freed when the last view of it is gone,
 * in stream order (after work already queued on the allocating stream). */
GPUCORE_API gpucore_status gpucore_tensor_destroy(gpucore_tensor *t);

GPUCORE_API int gpucore_tensor_ndim(const gpucore_tensor *t);          /* -1 for an invalid handle */
GPUCORE_API gpucore_dtype gpucore_tensor_dtype(const gpucore_tensor *t);
/* Copies ndim entries into shape / strides (elements). */
GPUCORE_API gpucore_status gpucore_tensor_shape(const gpucore_tensor *t, int64_t *shape);
GPUCORE_API gpucore_status gpucore_tensor_strides(const gpucore_tensor *t, int64_t *strides);
GPUCORE_API int64_t gpucore_tensor_numel(const gpucore_tensor *t);      /* -1 for an invalid handle */
GPUCORE_API int64_t gpucore_tensor_nbytes(const gpucore_tensor *t);     /* numel * element size */
GPUCORE_API int gpucore_tensor_is_contiguous(const gpucore_tensor *t);  /* 1 / 0; -1 invalid */
/* Address of element [0,...,0] (device address for CUDA tensors). */
GPUCORE_API gpucore_status gpucore_tensor_data(const gpucore_tensor *t, void **data);
GPUCORE_API gpucore_status gpucore_tensor_context(const gpucore_tensor *t, gpucore_context **ctx);

/* Views share memory with their base and keep it alive; destroy them like tensors. */
/* Elements start, start+step, ... < stop along dim (step >= 1; start/stop clamped like Python;
 * negative start/stop count from the end). */
GPUCORE_API gpucore_status gpucore_tensor_slice(gpucore_tensor *t, int dim, int64_t start, int64_t stop,
                                                int64_t step, gpucore_tensor **out);
/* New shape with the same element count; one entry may be -1 (inferred). Needs a
 * contiguous tensor (returns GPUCORE_ERR_NOT_CONTIGUOUS otherwise). */
GPUCORE_API gpucore_status gpucore_tensor_reshape(gpucore_tensor *t, int ndim, const int64_t *shape,
                                                  gpucore_tensor **out);
/* Swap two dims (a stride change, no copy). Negative dims count from the end. */
GPUCORE_API gpucore_status gpucore_tensor_transpose(gpucore_tensor *t, int dim0, int dim1, gpucore_tensor **out);
/* Reorder dims: out dim i is input dim perm[i]. */
GPUCORE_API gpucore_status gpucore_tensor_permute(gpucore_tensor *t, const int *perm, gpucore_tensor **out);

/* ------------------------------------------------------------------ copies */

/* Host buffer -> tensor. nbytes must equal gpucore_tensor_nbytes(t); the host buffer
 * is dense row-major; t may be strided. Blocking: returns when the data is in place. */
GPUCORE_API gpucore_status gpucore_copy_from_host(gpucore_tensor *dst, const void *src, int64_t nbytes);
/* Tensor -> host buffer (dense row-major). Blocking: waits for work queued before it. */
GPUCORE_API gpucore_status gpucore_copy_to_host(void *dst, int64_t nbytes, gpucore_tensor *src);
/* Asynchronous forms on a stream (NULL: current stream). */
GPUCORE_API gpucore_status gpucore_copy_from_host_async(gpucore_tensor *dst, const void *src, int64_t nbytes,
                                                        gpucore_stream *stream);
GPUCORE_API gpucore_status gpucore_copy_to_host_async(void *dst, int64_t nbytes, gpucore_tensor *src,
                                                      gpucore_stream *stream);
/* Tensor -> tensor on one device: same dtype and shape, any strides (a strided copy).
 * dst must not overlap src unless they are the same view. */
GPUCORE_API gpucore_status gpucore_copy(gpucore_tensor *dst, const gpucore_tensor *src, gpucore_stream *stream);

/* -------------------------------------------------------- fill and random */

/* Set every element to value (converted to the dtype: rounded to nearest even for
 * floating types, truncated toward zero and range-checked for integer types). */
GPUCORE_API gpucore_status gpucore_fill(gpucore_tensor *t, double value, gpucore_stream *stream);

/* Counter-based random fill (Philox-4x32-10). Element i in row-major order of t draws
 * from the counter (offset + i/4 for uniform, offset + i/2 for normal) under key
 * seed, so CPU and CUDA give the same numbers for the same (seed, offset), any
 * thread mapping, and a recompute can replay them. To draw a fresh stream after a
 * fill of n elements, advance offset by gpucore_random_offset_advance(n, dist).
 * Floating dtypes only (f32, f64, f16, bf16); values are computed in f32 (f64:
 * in f64 from the same 32-bit draws) and rounded to the dtype. */
typedef enum gpucore_distribution {
    GPUCORE_UNIFORM = 0, /* [a, b) */
    GPUCORE_NORMAL = 1   /* mean a, standard deviation b (Box-Muller) */
} gpucore_distribution;

GPUCORE_API gpucore_status gpucore_random(gpucore_tensor *t, gpucore_distribution dist, double a, double b,
                                          uint64_t seed, uint64_t offset, gpucore_stream *stream);
/* Counter values a fill of numel elements consumes. */
GPUCORE_API uint64_t gpucore_random_offset_advance(int64_t numel, gpucore_distribution dist);

#ifdef __cplusplus
}
#endif
#endif /* GPUCORE_H */
