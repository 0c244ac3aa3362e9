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
 *   - Threads: every call may be made from any thread. Several threads may share
 *     one context, each issuing ops on its own streams (allocator, profiler,
 *     stream list and per-device handles are locked inside); the current stream
 *     and the last error are per thread. What the caller must order: two threads
 *     must not enqueue onto the SAME stream at once (the order of their ops would
 *     be undefined), must not write one tensor from different streams without
 *     events between them, and must not destroy a handle (context, stream,
 *     tensor, event, communicator) while another thread still uses it. Destroy
 *     a context only after every other thread is done with it. Collectives on
 *     one communicator are issued by one thread at a time (MPI/NCCL rules).
 *
 * Contents (the sections below, in order; scripts/check_tree.py --toc prints this list)
 *   version
 *   status codes
 *   logging
 *   devices
 *   context
 *   streams
 *   tensors
 *   copies
 *   fill and random
 *   elementwise ops
 *   reductions
 *   row ops: softmax, norms, cross-entropy, embedding
 *   memory: the caching allocator
 *   profiling
 *   streams: priorities and pool
 *   quantized weights
 *   matmul
 *   linear
 *   convolution
 *   training primitives
 *   safetensors
 *   GGUF
 *   token data
 *   collective communication
 *   data-parallel gradient reducer
 *   gradient checkpointing
 *   attention and transformer ops
 *   language models (src/models)
 *   text: tokenizer and chat prompts (src/text)
 *
 * Rules for functions added from now on (older ones keep their names and orders):
 *   - Argument order: the op code or the handle acted on, then outputs, then inputs, then scalars and
 *     options, then the stream last (as gpucore_copy(dst, src, stream) and gpucore_binary(op, out, a, b,
 *     stream)). matmul and linear keep BLAS's order, operands before the result.
 *   - An options struct is filled with its defaults by gpucore_<name>_options_init(&opts); the older
 *     *_options_default / *_config_default / *_block_init spellings stay as they are.
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
 *   GPUCORE_ALLOC_CONF = key:value,...   caching allocator settings (keys documented
 *                      in the "memory" section below)
 *   GPUCORE_PROFILE  = 1   per-op profiler on for every new context ("profiling" section)
 *   GPUCORE_NVTX     = 1   NVTX ranges per op, segment and collective (CUDA builds; Nsight Systems)
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
    int64_t free_memory;          /* bytes, at the time of the call (CUDA: from NVML, which creates no
                                     context on the device; -1 without NVML; CPU: what the machine can
                                     still give, within a cgroup limit, less what blocks this library
                                     handed out may still take; CPU blocks of 256 MiB or more that do
                                     not fit in it are refused with GPUCORE_ERR_OUT_OF_MEMORY) */
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
 * "nvml", "openblas", "mpi", "mpi_module" (path of the loaded MPI module),
 * "cuda_plugin" (path of the loaded module), "build"
 * (the features and CUDA architectures compiled in), "openmp" (the CPU backend's
 * thread count and how idle OpenMP threads wait: docs/DESIGN.md, thread policy). NOT_SUPPORTED when absent,
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
/* The context's id: 1 for the first context this process created, then 2, 3, ... (never reused).
 * Error messages about tensors from different contexts name contexts by it ("context #2 (cpu)").
 * Every gpucore_context_create makes a new context with its own allocator and streams, also for a
 * device that already has one; tensors of one call must all come from one context. -1 for an
 * invalid handle. */
GPUCORE_API int64_t gpucore_context_id(const gpucore_context *ctx);
/* Wait for all work on all of the context's streams. */
GPUCORE_API gpucore_status gpucore_context_synchronize(gpucore_context *ctx);
/* Where the host can see it (the CPU backend): the address of a word that reads 0 exactly
 * when nothing is queued or running on any stream of ctx and no asynchronous error waits to
 * be reported, so gpucore_context_synchronize would return GPUCORE_OK at once. A caller for
 * whom a call costs more than a load (an interpreter binding) may read it first and skip the
 * call when it is 0. Read it with an acquire load (__atomic_load_n(word, __ATOMIC_ACQUIRE));
 * a 0 read that way also makes the finished work's results visible. Work run inline on
 * another thread at that moment is not counted, as synchronize does not wait for it either.
 * The word stays readable memory after gpucore_context_destroy and then reads nonzero.
 * GPUCORE_ERR_NOT_SUPPORTED on CUDA, where the device runs the work. */
GPUCORE_API gpucore_status gpucore_context_pending_word(gpucore_context *ctx, const uint64_t **word);

/* ----------------------------------------------------------------- streams */

/* The context's default stream (owned by the context; do not destroy). */
GPUCORE_API gpucore_status gpucore_context_default_stream(gpucore_context *ctx, gpucore_stream **out);
/* The stream that ops use when given NULL. Per context and per thread; initially the default stream. */
GPUCORE_API gpucore_status gpucore_context_current_stream(gpucore_context *ctx, gpucore_stream **out);
GPUCORE_API gpucore_status gpucore_context_set_current_stream(gpucore_context *ctx, gpucore_stream *stream);

/* priority: 0 normal; negative is higher priority (CUDA convention), clamped to the device's range. */
GPUCORE_API gpucore_status gpucore_stream_create(gpucore_context *ctx, int priority, gpucore_stream **out);
/* Waits for the stream's work, then destroys it; returns the error of an earlier asynchronous op
 * on it not yet reported by a synchronize (the stream is destroyed either way). */
GPUCORE_API gpucore_status gpucore_stream_destroy(gpucore_stream *stream);
/* Returns the first error an asynchronous op on this stream met, if any. */
GPUCORE_API gpucore_status gpucore_stream_synchronize(gpucore_stream *stream);
/* GPUCORE_OK when all work is done, GPUCORE_ERR_NOT_READY while some is pending. */
GPUCORE_API gpucore_status gpucore_stream_query(gpucore_stream *stream);
/* The backend's own stream object, for interop (DLPack, the CUDA array interface, your own
 * CUDA calls): a cudaStream_t on CUDA contexts; an opaque pointer on the CPU. Valid until the
 * stream is destroyed. */
GPUCORE_API gpucore_status gpucore_stream_native_handle(gpucore_stream *stream, void **handle);

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
    GPUCORE_FP8_E4M3 = 7, /* OCP e4m3fn; matmul operands, casts, a LoRA base */
    GPUCORE_FP8_E5M2 = 8, /* OCP e5m2; matmul operands, casts, a LoRA base */
    GPUCORE_DTYPE_COUNT = 9
} gpucore_dtype;

#define GPUCORE_MAX_DIMS 8

/* Bytes per element (0 for an unknown dtype). */
GPUCORE_API int64_t gpucore_dtype_size(gpucore_dtype dtype);
/* "f32", "bf16", ...; "invalid" for an unknown dtype. */
GPUCORE_API const char *gpucore_dtype_name(gpucore_dtype dtype);
/* The lower-case name of value `value` of the public enum named enum_type, one of
 * "gpucore_dtype", "gpucore_binary_op", "gpucore_unary_op", "gpucore_activation",
 * "gpucore_reduction", "gpucore_loss_reduction", "gpucore_epilogue" (e.g. "exp",
 * "gelu_tanh", "bias_gelu"); NULL for an unknown type or value. Bindings read their
 * constants through this, so they stay in step with the library. */
GPUCORE_API const char *gpucore_enum_name(const char *enum_type, int value);

/* A new contiguous (row-major) tensor with uninitialised contents. ndim 0..8;
 * shape entries >= 0 (0 makes an empty tensor). */
GPUCORE_API gpucore_status gpucore_tensor_create(gpucore_context *ctx, gpucore_dtype dtype, int ndim,
                                                 const int64_t *shape, gpucore_tensor **out);
/* Wrap memory the caller owns (host memory for a CPU context, device memory for CUDA).
 * strides are in elements (NULL: contiguous). When the tensor and all its views are
 * destroyed, the context's streams are synchronized (queued ops may still use the memory)
 * and then deleter(deleter_ctx) is called if not NULL. The library never frees `data`.
 * The deleter runs on the thread that destroyed the last view (or the context); it must not
 * call back into libgpucore for the same context. */
GPUCORE_API gpucore_status gpucore_tensor_wrap(gpucore_context *ctx, gpucore_dtype dtype, int ndim,
                                               const int64_t *shape, const int64_t *strides, void *data,
                                               void (*deleter)(void *), void *deleter_ctx,
                                               gpucore_tensor **out);
/* Release this handle. The memory is freed when the last view of it is gone,
 * in stream order (after work already queued on the allocating stream). */
GPUCORE_API gpucore_status gpucore_tensor_destroy(gpucore_tensor *t);
/* Release count handles in one call (a binding's batched release of dropped tensors). NULL
 * entries are skipped; every valid handle is released even after an invalid one, and the first
 * invalid one is reported (GPUCORE_ERR_INVALID_HANDLE naming its index). */
GPUCORE_API gpucore_status gpucore_tensor_destroy_many(gpucore_tensor *const *tensors, int64_t count);

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
/* Any view of t's memory: shape, strides (elements, >= 0) and an offset in elements from the
 * start of the memory t shares with its base (see gpucore_tensor_storage_offset). Every element
 * the view can address must lie inside that memory (checked: GPUCORE_ERR_INVALID_ARGUMENT).
 * Squeeze, unsqueeze, expand (stride 0) and diagonal views are special cases. */
GPUCORE_API gpucore_status gpucore_tensor_as_strided(gpucore_tensor *t, int ndim, const int64_t *shape,
                                                     const int64_t *strides, int64_t storage_offset,
                                                     gpucore_tensor **out);
/* Offset in elements of t's element [0,...,0] from the start of its memory. */
GPUCORE_API gpucore_status gpucore_tensor_storage_offset(const gpucore_tensor *t, int64_t *offset);

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
/* Layout ops are strided copies:
 *   permute / transpose into contiguous: gpucore_copy(dense, permuted_view, s)
 *   slice-assign x[a:b] = y:            gpucore_copy(slice_view_of_x, y, s)
 * and concatenation: out = the inputs joined along dim. Every input has out's dtype,
 * context and shape except along dim, where their sizes add up to out's; out must
 * not overlap any input. One strided copy per input into a slice of out. */
GPUCORE_API gpucore_status gpucore_concat(gpucore_tensor *out, gpucore_tensor *const *inputs, int count, int dim,
                                          gpucore_stream *stream);

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

/* ------------------------------------------------------- elementwise ops
 *
 * Common rules for the elementwise calls below:
 *   - Tensors are f32, f16 or bf16 (math is done in f32 and rounded to nearest
 *     even on store), all of the same dtype and on the same context, except
 *     gpucore_cast which converts between dtypes.
 *   - Inputs broadcast to out's shape numpy-style (dims aligned from the right;
 *     a dim of 1 or a missing dim repeats); out's shape is never broadcast.
 *   - Any strides are accepted (transposed, sliced views).
 *   - In place is allowed: out may be exactly the same view as an input (same
 *     address, shape and strides). Any other overlap between out and an input is
 *     rejected with GPUCORE_ERR_INVALID_ARGUMENT, since the result would depend on
 *     the order in which elements are written.
 *   - Empty tensors are a no-op. Asynchronous on `stream` (NULL: current stream). */

typedef enum gpucore_binary_op {
    GPUCORE_ADD = 0, GPUCORE_SUB = 1, GPUCORE_MUL = 2, GPUCORE_DIV = 3,
    /* --- PyTorch's div rounding modes and elementwise max/min --- */
    GPUCORE_DIV_TRUNC = 4, /* trunc(a / b): torch.div(a, b, rounding_mode="trunc") */
    GPUCORE_DIV_FLOOR = 5, /* floor(a / b) as Python's a // b: rounding_mode="floor" */
    GPUCORE_MAXIMUM = 6,   /* max(a, b), NaN if either is NaN (torch.maximum) */
    GPUCORE_MINIMUM = 7    /* min(a, b), NaN if either is NaN (torch.minimum) */
} gpucore_binary_op;

typedef enum gpucore_unary_op {
    GPUCORE_EXP = 0, GPUCORE_LOG = 1, GPUCORE_SQRT = 2, GPUCORE_RSQRT = 3, GPUCORE_ABS = 4, GPUCORE_NEG = 5,
    GPUCORE_SQUARE = 6 /* a * a */
} gpucore_unary_op;

/* Activations (the formulas are in kernels/activation_math.h). GELU_ERF is
 * 0.5x(1+erf(x/sqrt2)); GELU_TANH the tanh approximation. */
typedef enum gpucore_activation {
    GPUCORE_ACT_NONE = 0, GPUCORE_ACT_RELU = 1, GPUCORE_ACT_GELU_ERF = 2, GPUCORE_ACT_GELU_TANH = 3,
    GPUCORE_ACT_SILU = 4, GPUCORE_ACT_SIGMOID = 5, GPUCORE_ACT_TANH = 6
} gpucore_activation;

/* out = a op b. */
GPUCORE_API gpucore_status gpucore_binary(gpucore_binary_op op, gpucore_tensor *out, const gpucore_tensor *a,
                                          const gpucore_tensor *b, gpucore_stream *stream);
/* *out = a op b on a new tensor: gpucore_tensor_create on a's context with a's dtype and the
 * broadcast shape of a and b (contiguous), then gpucore_binary, in one call (what a binding
 * does per op, without a second trip across its foreign-function boundary). On failure *out is
 * NULL and nothing is left allocated; destroy the result with gpucore_tensor_destroy. The
 * other *_new calls below do the same for their op, the result shaped like a (or x). */
GPUCORE_API gpucore_status gpucore_binary_new(gpucore_binary_op op, const gpucore_tensor *a, const gpucore_tensor *b,
                                              gpucore_stream *stream, gpucore_tensor **out);
/* out = act(a op b) in one pass: bias add + activation is
 * gpucore_binary_act(GPUCORE_ADD, GPUCORE_ACT_GELU_TANH, y, x, bias, s) with bias of shape [cols]. */
GPUCORE_API gpucore_status gpucore_binary_act(gpucore_binary_op op, gpucore_activation act, gpucore_tensor *out,
                                              const gpucore_tensor *a, const gpucore_tensor *b,
                                              gpucore_stream *stream);
/* out = op(a). */
GPUCORE_API gpucore_status gpucore_unary(gpucore_unary_op op, gpucore_tensor *out, const gpucore_tensor *a,
                                         gpucore_stream *stream);
/* *out = op(a) on a new tensor shaped like a (see gpucore_binary_new). */
GPUCORE_API gpucore_status gpucore_unary_new(gpucore_unary_op op, const gpucore_tensor *a, gpucore_stream *stream,
                                             gpucore_tensor **out);
/* out = alpha * a + beta. */
GPUCORE_API gpucore_status gpucore_scale(gpucore_tensor *out, const gpucore_tensor *a, double alpha, double beta,
                                         gpucore_stream *stream);
/* *out = alpha * a + beta on a new tensor shaped like a (see gpucore_binary_new). */
GPUCORE_API gpucore_status gpucore_scale_new(const gpucore_tensor *a, double alpha, double beta, gpucore_stream *stream,
                                             gpucore_tensor **out);
/* y = alpha * x + y (x broadcasts to y). */
GPUCORE_API gpucore_status gpucore_axpy(gpucore_tensor *y, double alpha, const gpucore_tensor *x,
                                        gpucore_stream *stream);
/* out = min(max(a, lo), hi); NaN stays NaN. lo <= hi. */
GPUCORE_API gpucore_status gpucore_clamp(gpucore_tensor *out, const gpucore_tensor *a, double lo, double hi,
                                         gpucore_stream *stream);
/* out = act(x). act must not be GPUCORE_ACT_NONE. */
GPUCORE_API gpucore_status gpucore_activation_forward(gpucore_activation act, gpucore_tensor *out,
                                                      const gpucore_tensor *x, gpucore_stream *stream);
/* *out = act(x) on a new tensor shaped like x (see gpucore_binary_new). */
GPUCORE_API gpucore_status gpucore_activation_forward_new(gpucore_activation act, const gpucore_tensor *x,
                                                          gpucore_stream *stream, gpucore_tensor **out);
/* dx = dy * act'(x), x being the forward input. dx may be dy in place. */
GPUCORE_API gpucore_status gpucore_activation_backward(gpucore_activation act, gpucore_tensor *dx,
                                                       const gpucore_tensor *dy, const gpucore_tensor *x,
                                                       gpucore_stream *stream);
/* out = a converted to out's dtype; f32, f64, f16, bf16, fp8_e4m3, fp8_e5m2 in any
 * combination, same shape (no broadcast). Round to nearest even (f64 -> f16/bf16/fp8
 * rounds once, not twice); NaN stays NaN, Inf stays Inf, values past the range
 * become Inf. To fp8 (OCP FP8 as CUDA's cuda_fp8.h, e4m3fn: max 448, no Inf, NaN
 * 0x7f/0xff; e5m2: max 57344, Inf): saturating as __nv_cvt_float_to_fp8 with
 * __NV_SATFINITE, so values past the largest finite and ±Inf become ±max, and NaN
 * becomes 0x7f. From fp8: exact. No scaling: multiply by the scale before or after. */
GPUCORE_API gpucore_status gpucore_cast(gpucore_tensor *out, const gpucore_tensor *a, gpucore_stream *stream);
/* Inverted dropout: out[i] = x[i] / (1-p) where u_i >= p, else 0, with u_i the
 * Philox uniform of element i (row-major index in out) under (seed, offset), the
 * same numbers on every backend. Backward is the same call on dy with the same
 * (seed, offset, p): dx = dropout(dy). 0 <= p <= 1. Advance offset by
 * gpucore_random_offset_advance(numel, GPUCORE_UNIFORM) for the next draw. */
GPUCORE_API gpucore_status gpucore_dropout(gpucore_tensor *out, const gpucore_tensor *x, double p, uint64_t seed,
                                           uint64_t offset, gpucore_stream *stream);

/* ------------------------------------------------------------ reductions
 *
 * Deterministic: the same call on the same backend gives the same bits every
 * run (fixed chunking and fixed reduction trees; no float atomics). Inputs are
 * f32, f16 or bf16, any strides; sums accumulate in f32 on GPUs (f64 on the
 * CPU backend). Max/min/argmax propagate NaN; argmax returns the first index of
 * the maximum. out must not overlap a. */

typedef enum gpucore_reduction {
    GPUCORE_REDUCTION_SUM = 0, GPUCORE_REDUCTION_MEAN = 1, GPUCORE_REDUCTION_MAX = 2, GPUCORE_REDUCTION_MIN = 3,
    GPUCORE_REDUCTION_ARGMAX = 4, GPUCORE_REDUCTION_SUMSQ = 5   /* SUMSQ: sum of squares */
} gpucore_reduction;

/* Pass as axis to reduce over every element (out then holds one element). */
#define GPUCORE_ALL_AXES 0x7fffffff

/* Reduce a over `axis` (negative counts from the end, or GPUCORE_ALL_AXES).
 * out has a's shape with that dim removed or kept as 1; its dtype is a's, or
 * i64 for ARGMAX. An empty axis gives 0 for SUM/SUMSQ, NaN for MEAN, and is an
 * error for MAX/MIN/ARGMAX. */
GPUCORE_API gpucore_status gpucore_reduce(gpucore_reduction op, gpucore_tensor *out, const gpucore_tensor *a,
                                          int axis, gpucore_stream *stream);
/* --- reductions over several dims at once (PyTorch's sum(x, dim=(0, 2)), dim=()) ---
 * Reduce a over the ndims dims listed in dims (each once; negative counts from
 * the end) in one pass over the merged reduced dims. ndims == 0 reduces every
 * dim (PyTorch's dim=()); dims may then be NULL. out has a's shape with those
 * dims removed, or with each kept as 1 (keepdim); dtype rules, empty dims and
 * determinism as gpucore_reduce. ARGMAX takes one dim only (several is
 * GPUCORE_ERR_INVALID_ARGUMENT; use GPUCORE_ALL_AXES for a flat index). */
GPUCORE_API gpucore_status gpucore_reduce_dims(gpucore_reduction op, gpucore_tensor *out, const gpucore_tensor *a,
                                               const int *dims, int ndims, gpucore_stream *stream);
/* Bias gradient: db[c] = sum of dy[..., c] over every leading dim (column sums);
 * db has shape [C] where dy is [..., C]; same dtype. */
GPUCORE_API gpucore_status gpucore_bias_grad(gpucore_tensor *db, const gpucore_tensor *dy, gpucore_stream *stream);

/* ------------------------------------- row ops: softmax, norms, cross-entropy, embedding
 *
 * Common rules for the row calls below:
 *   - They work along the last dim of x ([..., C]: every leading index is a row).
 *     Data tensors (x, y, dy, dx, logits) are f32, f16 or bf16, all of one dtype;
 *     math is f32 inside (f64 on the CPU backend), rounded to nearest even on store.
 *     softmax, log-softmax and their backward also take f64 tensors (f64 math).
 *   - Inputs may have any strides (non-contiguous ones are copied first); outputs too.
 *   - Deterministic: the same call gives the same bits every run (fixed chunking and
 *     reduction trees; no float atomics anywhere, including every backward).
 *   - Numerically stable: softmax, log-softmax and cross-entropy subtract the row max
 *     (logits of +-1e4 are fine; -inf logits are masked out; a row of only -inf or any
 *     NaN gives NaN). Rows of any length (a row longer than 16384 is split across
 *     blocks on GPUs).
 *   - Outputs must not overlap inputs, except the exact in-place uses named below.
 *   - Empty tensors are a no-op. Asynchronous on `stream` (NULL: current stream). */

/* y = softmax(x) (log_softmax != 0: log-softmax) along the last dim. y may be x (in place). */
GPUCORE_API gpucore_status gpucore_softmax(gpucore_tensor *y, const gpucore_tensor *x, int log_softmax,
                                           gpucore_stream *stream);
/* Backward from the forward OUTPUT y: softmax dx = y * (dy - sum(dy * y));
 * log-softmax dx = dy - exp(y) * sum(dy). dx may be dy (in place). */
GPUCORE_API gpucore_status gpucore_softmax_backward(gpucore_tensor *dx, const gpucore_tensor *dy,
                                                    const gpucore_tensor *y, int log_softmax,
                                                    gpucore_stream *stream);
/* LayerNorm over the last dim: y = (x - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps),
 * var the biased variance. gamma, beta: [C], both NULL or both given (any float dtype, the
 * same for both; it may differ from x's, e.g. f32 parameters for bf16 activations).
 * mean, rstd: NULL (inference), or contiguous f32 tensors of rows elements saved for the
 * backward. y may be x (in place). */
GPUCORE_API gpucore_status gpucore_layer_norm(gpucore_tensor *y, gpucore_tensor *mean, gpucore_tensor *rstd,
                                              const gpucore_tensor *x, const gpucore_tensor *gamma,
                                              const gpucore_tensor *beta, double eps, gpucore_stream *stream);
/* LayerNorm backward. mean and rstd are the forward's; gamma as in the forward (NULL if it
 * had none). Any of dx, dgamma, dbeta may be NULL when not wanted (dgamma/dbeta: [C], one
 * dtype, gamma's if given). dgamma and dbeta sum over rows in a fixed order. */
GPUCORE_API gpucore_status gpucore_layer_norm_backward(gpucore_tensor *dx, gpucore_tensor *dgamma,
                                                       gpucore_tensor *dbeta, const gpucore_tensor *dy,
                                                       const gpucore_tensor *x, const gpucore_tensor *mean,
                                                       const gpucore_tensor *rstd, const gpucore_tensor *gamma,
                                                       gpucore_stream *stream);
/* RMSNorm: y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps); gamma [C] or NULL; rstd as
 * for LayerNorm (NULL or f32 [rows]). y may be x (in place). */
GPUCORE_API gpucore_status gpucore_rms_norm(gpucore_tensor *y, gpucore_tensor *rstd, const gpucore_tensor *x,
                                            const gpucore_tensor *gamma, double eps, gpucore_stream *stream);
GPUCORE_API gpucore_status gpucore_rms_norm_backward(gpucore_tensor *dx, gpucore_tensor *dgamma,
                                                     const gpucore_tensor *dy, const gpucore_tensor *x,
                                                     const gpucore_tensor *rstd, const gpucore_tensor *gamma,
                                                     gpucore_stream *stream);

typedef enum gpucore_loss_reduction {
    GPUCORE_LOSS_NONE = 0, /* one loss per row */
    GPUCORE_LOSS_MEAN = 1, /* sum over rows / number of rows whose target is not ignore_index */
    GPUCORE_LOSS_SUM = 2
} gpucore_loss_reduction;

/* Cross-entropy of softmax(logits) against integer class targets, fused (the softmax is
 * never stored): loss_r = logsumexp(logits_r) - logits_r[target_r]. logits [..., C];
 * targets i32 or i64 with logits' leading shape. Rows whose target == ignore_index
 * contribute 0 and are not counted by MEAN (MEAN of no counted rows is NaN, like PyTorch).
 * A target outside [0, C) other than ignore_index gives a NaN loss for its row (it is
 * not checked on the host, which would need a device sync). loss: any float dtype;
 * NONE: targets' shape; MEAN/SUM: one element (any shape of numel 1). */
GPUCORE_API gpucore_status gpucore_cross_entropy(gpucore_tensor *loss, const gpucore_tensor *logits,
                                                 const gpucore_tensor *targets, int64_t ignore_index,
                                                 gpucore_loss_reduction reduction, gpucore_stream *stream);
/* dlogits = dloss_r * (softmax(logits_r) - onehot(target_r)); 0 on ignored rows; MEAN
 * divides by the counted rows. dloss has loss's shape for the same reduction.
 * dlogits may be logits (in place). */
GPUCORE_API gpucore_status gpucore_cross_entropy_backward(gpucore_tensor *dlogits, const gpucore_tensor *dloss,
                                                          const gpucore_tensor *logits,
                                                          const gpucore_tensor *targets, int64_t ignore_index,
                                                          gpucore_loss_reduction reduction,
                                                          gpucore_stream *stream);
/* Cross-entropy with PyTorch's options (torch.nn.functional.cross_entropy), forward and
 * backward. class_dim: the class dim of logits (negative: from the end, -1 = last, as the
 * calls above), or GPUCORE_CE_CLASS_DIM_TORCH for PyTorch's rule (dim 1, or 0 for 1-d
 * logits). logits [..., C, ...] of any strides (a contiguous one is read in place, others
 * are staged); targets are i32/i64 class indices of logits' shape without the class dim, or
 * class probabilities (logits' dtype and shape); weight: NULL or [C] per-class weights (any
 * float dtype); label_smoothing ε in [0, 1]. With the row's target mass
 * q_c = w_c ε/C + [c = t] (1-ε) w_t (index t) or q_c = w_c ((1-ε) p_c + ε/C) (probabilities p),
 * Q = Σ_c q_c and nl_c = logsumexp(logits_r) - logits_rc:
 *   loss_r = (1-ε) w_t nl_t + ε/C Σ_c w_c nl_c (index t; 0 when t == ignore_index, NaN when t
 *   lies outside [0, C): not checked on the host) or Σ_c q_c nl_c (probabilities);
 *   MEAN = Σ_r loss_r / Σ_{rows not ignored} w_{t_r} (indices; NaN when none is counted) or
 *   / rows (probabilities); SUM = Σ_r loss_r (summed in a fixed order);
 *   dlogits_r = g_r (Q softmax(logits_r) - q), g_r = dloss[r] (NONE), dloss[0] (SUM) or
 *   dloss[0] / the MEAN divisor above. loss / dloss: any float dtype, the targets' index shape
 *   (NONE) or one element (MEAN, SUM). dlogits has logits' shape and may be logits (in place).
 * NULL weight, ε = 0, index targets and class_dim -1 are gpucore_cross_entropy /
 * gpucore_cross_entropy_backward, bit for bit. */
#define GPUCORE_CE_CLASS_DIM_TORCH 1000
GPUCORE_API gpucore_status gpucore_cross_entropy_forward_ex(gpucore_tensor *loss, const gpucore_tensor *logits,
                                                            const gpucore_tensor *targets,
                                                            const gpucore_tensor *weight, int64_t ignore_index,
                                                            gpucore_loss_reduction reduction,
                                                            double label_smoothing, int class_dim,
                                                            gpucore_stream *stream);
GPUCORE_API gpucore_status gpucore_cross_entropy_backward_ex(gpucore_tensor *dlogits, const gpucore_tensor *dloss,
                                                             const gpucore_tensor *logits,
                                                             const gpucore_tensor *targets,
                                                             const gpucore_tensor *weight, int64_t ignore_index,
                                                             gpucore_loss_reduction reduction,
                                                             double label_smoothing, int class_dim,
                                                             gpucore_stream *stream);
/* Embedding lookup: out[i..., :] = weight[indices[i...], :]. weight [V, D] (f32, f16 or
 * bf16), indices i32/i64 of any shape, out indices' shape + [D], weight's dtype. An index
 * outside [0, V) gives a row of NaN (not checked on the host). */
GPUCORE_API gpucore_status gpucore_embedding(gpucore_tensor *out, const gpucore_tensor *weight,
                                             const gpucore_tensor *indices, gpucore_stream *stream);
/* dweight[v, :] = sum of dout[i..., :] over i with indices[i...] == v, every row of dweight
 * written (0 where no index hits). Deterministic without float atomics: each GPU thread
 * owns columns of a band of the table and adds in increasing i, in f32 (for f16/bf16
 * dweight through an f32 scratch of V x D, rounded once at the end). Out-of-range
 * indices contribute nothing. */
GPUCORE_API gpucore_status gpucore_embedding_backward(gpucore_tensor *dweight, const gpucore_tensor *dout,
                                                      const gpucore_tensor *indices, gpucore_stream *stream);
/* --- PyTorch's padding_idx ---
 * gpucore_embedding_backward, then row padding_idx of dweight set to 0 (the padding
 * entry is never trained; torch.nn.functional.embedding(..., padding_idx=p)). The
 * forward is gpucore_embedding unchanged. padding_idx in [-V, V) (negative counts
 * from the end), else GPUCORE_ERR_INVALID_ARGUMENT. */
GPUCORE_API gpucore_status gpucore_embedding_backward_padding(gpucore_tensor *dweight, const gpucore_tensor *dout,
                                                              const gpucore_tensor *indices, int64_t padding_idx,
                                                              gpucore_stream *stream);

/* ------------------------------------------------- memory: the caching allocator
 *
 * Every tensor, workspace and temporary of a context comes from its caching
 * allocator; pinned (page-locked) host memory from its pinned host pool. Both
 * keep freed memory cached for reuse instead of returning it to the backend.
 *
 * Rules
 *   - Requests are rounded up to a multiple of 512 bytes. Requests up to 1 MiB
 *     are carved from 2 MiB segments (the small pool), larger ones from 20 MiB
 *     segments, and from 10 MiB up each gets a segment of its own (rounded up to
 *     2 MiB) (the large pool).
 *   - Stream-ordered reuse: memory belongs to the stream it was allocated on
 *     (tensors: the stream current at creation). Once freed it is reused at once
 *     for later allocations on that stream, which is safe because that stream runs
 *     its work in order. If the memory is also used on another stream, say so with
 *     gpucore_tensor_record_stream(): its reuse then waits until that stream has
 *     passed the work queued before the free (an event, not a device-wide wait).
 *   - Out of memory: the allocator first releases cached memory nobody uses and
 *     retries, then waits for memory still in flight on other streams and retries,
 *     and only then fails with GPUCORE_ERR_OUT_OF_MEMORY. The message says what was
 *     asked, what the device has in total and free (and what other processes hold,
 *     where NVML can tell), what this library has allocated and holds cached, and
 *     what to try. The context stays usable.
 *
 * GPUCORE_ALLOC_CONF (read when a context is created; also gpucore_memory_configure):
 *   comma-separated key:value pairs, e.g. "max_split_size_mb:128,limit:0.8".
 *     max_split_size_mb:N   cached blocks of N MiB or more are never split, so a big
 *                           block is not eaten by small requests (fights
 *                           fragmentation). 0 (the default): no limit.
 *     caching:0|1           0 turns caching off: every free returns memory to the
 *                           backend (in stream order) and every request asks the
 *                           backend, so memory checkers see each buffer. Default 1.
 *     pinned_caching:0|1    the same for the pinned host pool. Default 1.
 *     limit:V               most device memory the context may reserve. V is bytes
 *                           with an optional unit (4096, 512MiB, 8GiB, 2G; units
 *                           k/K/KiB, M/MiB, G/GiB, T/TiB are powers of 1024, KB/MB/GB/TB
 *                           powers of 1000), or a fraction of the device's total
 *                           memory (0.8, 80%). 0: no limit (default).
 *   Unknown keys and malformed values are errors (GPUCORE_ERR_INVALID_ARGUMENT);
 *   gpucore_context_create reports them.
 */

typedef enum gpucore_memory_kind {
    GPUCORE_MEMORY_DEVICE = 0,      /* the context's device memory (host memory on the CPU backend) */
    GPUCORE_MEMORY_PINNED_HOST = 1  /* the pinned host pool (gpucore_host_alloc) */
} gpucore_memory_kind;

/* Allocator statistics. Bytes are rounded sizes (what the allocator hands out).
 *   allocated: blocks handed out and not yet freed.
 *   reserved:  segments obtained from the backend (allocated + cached).
 *   active:    allocated, plus freed blocks still waiting for other streams' work.
 *   inactive_split: free blocks inside partly used segments; cached memory that
 *              cannot be returned to the backend (a measure of fragmentation).
 *   requested: the sizes callers asked for, before rounding.
 * Each has a current value and a peak since creation or the last reset. Set
 * struct_size to sizeof(gpucore_memory_stats) before the call. */
typedef struct gpucore_memory_stats {
    int64_t struct_size;
    int64_t allocated_bytes, allocated_bytes_peak;
    int64_t allocated_blocks, allocated_blocks_peak;
    int64_t reserved_bytes, reserved_bytes_peak;
    int64_t reserved_segments, reserved_segments_peak;
    int64_t active_bytes, active_bytes_peak;
    int64_t active_blocks, active_blocks_peak;
    int64_t inactive_split_bytes, inactive_split_bytes_peak;
    int64_t inactive_split_blocks, inactive_split_blocks_peak;
    int64_t requested_bytes, requested_bytes_peak;
    int64_t num_raw_allocs;     /* segments obtained from the backend */
    int64_t num_raw_frees;      /* segments returned to the backend */
    int64_t num_ooms;           /* requests that failed with GPUCORE_ERR_OUT_OF_MEMORY */
    int64_t num_alloc_retries;  /* requests that had to release cache or wait for other streams */
    int64_t limit_bytes;        /* the memory limit in force, 0 if none */
} gpucore_memory_stats;

GPUCORE_API gpucore_status gpucore_memory_get_stats(gpucore_context *ctx, gpucore_memory_kind kind,
                                                    gpucore_memory_stats *stats);
/* Set every *_peak to its current value. */
GPUCORE_API gpucore_status gpucore_memory_reset_peak_stats(gpucore_context *ctx, gpucore_memory_kind kind);

typedef enum gpucore_snapshot_format {
    GPUCORE_SNAPSHOT_TEXT = 0,  /* a line of totals, a line of the allocated bytes by category, one line per
                                   segment, then one indented line per block (allocated ones end with
                                   "category <name>") */
    GPUCORE_SNAPSHOT_JSON = 1   /* {"kind":..,"device":..,"stats":{..},"categories":{"weights":..,..,"other":..},
                                    "segments":[{"address":"0x..",
                                    "size":..,"pool":"small"|"large","stream":"0x..","blocks":[{"address":"0x..",
                                    "size":..,"requested":..,"state":"allocated"|"free"|"pending",
                                    "stream":"0x..","category":..(allocated blocks)},..]},..]}; the categories
                                    are gpucore_memory_get_categories' */
} gpucore_snapshot_format;

/* A listing of every segment and block: address, size, requested size, state
 * (allocated, free, or pending: freed but waiting for another stream's work) and
 * stream. *needed (if not NULL) gets the bytes the listing takes, including the
 * terminating NUL. buf NULL with buf_len 0 only asks for the size. When buf_len is
 * smaller than needed, buf gets what fits (NUL-terminated) and the call returns
 * GPUCORE_ERR_INVALID_ARGUMENT; memory may change between calls, so leave room. */
GPUCORE_API gpucore_status gpucore_memory_snapshot(gpucore_context *ctx, gpucore_memory_kind kind,
                                                   gpucore_snapshot_format format, char *buf, int64_t buf_len,
                                                   int64_t *needed);

/* Return cached memory nobody uses to the backend (whole free segments; each
 * waits only for the stream it was last used on). Memory in use stays. */
GPUCORE_API gpucore_status gpucore_memory_empty_cache(gpucore_context *ctx, gpucore_memory_kind kind);
/* Most device memory the context may reserve, in bytes (0: no limit). A request
 * that would pass it fails with GPUCORE_ERR_OUT_OF_MEMORY after releasing cache. */
GPUCORE_API gpucore_status gpucore_memory_set_limit(gpucore_context *ctx, int64_t bytes);
/* The same as a fraction (0 < fraction <= 1) of the device's total memory; 0 removes the limit. */
GPUCORE_API gpucore_status gpucore_memory_set_limit_fraction(gpucore_context *ctx, double fraction);
/* enabled 0: no caching (see caching:0 above); 1: caching (the default). Turning
 * caching off also empties the cache. */
GPUCORE_API gpucore_status gpucore_memory_set_caching(gpucore_context *ctx, gpucore_memory_kind kind, int enabled);
/* Apply settings written as GPUCORE_ALLOC_CONF is (keys not named keep their value).
 * Malformed text: GPUCORE_ERR_INVALID_ARGUMENT and nothing changes. */
GPUCORE_API gpucore_status gpucore_memory_configure(gpucore_context *ctx, const char *conf);
/* Check text in GPUCORE_ALLOC_CONF syntax without a context: GPUCORE_OK if it is valid. */
GPUCORE_API gpucore_status gpucore_alloc_conf_validate(const char *conf);
/* The settings in force, in GPUCORE_ALLOC_CONF syntax ("max_split_size_mb:0,caching:1,..."; 0 = none). */
GPUCORE_API gpucore_status gpucore_memory_get_conf(gpucore_context *ctx, char *buf, size_t buf_len);

/* Declare that tensor t's memory is used on `stream` as well as on the stream it
 * was allocated on, so that when it is freed it is not reused before `stream` has
 * passed the work queued so far. Needed whenever a tensor made on one stream is
 * read or written on another. Wrapped (caller-owned) memory: no-op. */
GPUCORE_API gpucore_status gpucore_tensor_record_stream(gpucore_tensor *t, gpucore_stream *stream);

/* Device memory (host memory on the CPU backend) straight from the context's
 * caching allocator, for workspaces of your own kernels. Tied to `stream` (NULL:
 * current stream) as tensors are; bytes >= 0 (0 gives NULL). Free with
 * gpucore_device_free; use on other streams must be recorded with
 * gpucore_device_record_stream. */
GPUCORE_API gpucore_status gpucore_device_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream, void **ptr);
/* ptr from gpucore_device_alloc on this context (NULL: no-op). */
GPUCORE_API gpucore_status gpucore_device_free(gpucore_context *ctx, void *ptr);
GPUCORE_API gpucore_status gpucore_device_record_stream(gpucore_context *ctx, void *ptr, gpucore_stream *stream);

/* Pinned (page-locked) host memory from the context's pool, for fast asynchronous
 * copies (cudaHostAlloc on CUDA; aligned host memory on the CPU backend). The
 * block is tied to `stream` (NULL: current stream). Freeing records an event on
 * that stream, and on every stream named with gpucore_host_record_stream, and the
 * block is reused only once those have passed: so an async copy still reading it
 * is never overwritten. bytes >= 0 (0 gives NULL). Free with gpucore_host_free. */
GPUCORE_API gpucore_status gpucore_host_alloc(gpucore_context *ctx, int64_t bytes, gpucore_stream *stream, void **ptr);
/* ptr from gpucore_host_alloc on this context (NULL: no-op). */
GPUCORE_API gpucore_status gpucore_host_free(gpucore_context *ctx, void *ptr);
GPUCORE_API gpucore_status gpucore_host_record_stream(gpucore_context *ctx, void *ptr, gpucore_stream *stream);

/* TESTING ONLY: make raw (backend) allocations of this context fail as if the
 * device were out of memory. Counting device segments and pinned host segments
 * together, from this call on, attempts nth .. nth+count-1 fail (count < 0: every
 * attempt from nth on). nth 0 disarms. For fault-injection tests; never in production. */
GPUCORE_API gpucore_status gpucore_debug_fail_raw_alloc(gpucore_context *ctx, int64_t nth, int64_t count);
/* TESTING ONLY: queue on stream (not NULL) a task that fails with
 * `status` when it runs, as a faulting kernel would: the error is reported by the next
 * synchronize of that stream or its context, once. For testing how a program handles
 * asynchronous errors. status must be an error (not GPUCORE_OK). GPUCORE_ERR_NOT_SUPPORTED
 * on CUDA (a device fault there ends the context). */
GPUCORE_API gpucore_status gpucore_debug_fail_async(gpucore_stream *stream, gpucore_status status);

/* --------------------------------------------------------------- profiling
 *
 * A per-op summary on every backend: for each op name ("matmul", "conv_forward",
 * "add", "cross_entropy", "allreduce", ...) the number of calls, the device time
 * they took and the bytes they moved. Timing uses backend events recorded on the
 * op's stream around the work (CUDA events; the CPU backend's stream events carry
 * timestamps too), resolved only when a summary or the entries are asked for, so
 * profiling adds no host synchronisation per op (only the event records). Calls
 * and bytes are counted when the op is enqueued and are exact at once.
 *   - An op built from other ops counts once, under its own name (linear_backward
 *     is one call, not two GEMMs). Collectives count on the communicator's stream.
 *   - bytes: the sizes of the tensors the op reads and writes (its main operands:
 *     inputs once each, outputs once), not counting workspaces or re-reads.
 *   - Off by default; costs one branch per op when off. GPUCORE_PROFILE=1 turns it
 *     on for every new context.
 * NVTX: in CUDA builds, GPUCORE_NVTX=1 (read when a context is created) wraps every
 * op, checkpoint segment and collective in an NVTX range of the same name, so an
 * Nsight Systems timeline (nsys profile) shows the library's work by name. */

/* One op name's totals. Set struct_size to sizeof(gpucore_profile_entry). */
typedef struct gpucore_profile_entry {
    int64_t struct_size;
    char name[64];
    int64_t calls;
    int64_t bytes;          /* total over the calls */
    double total_ms;        /* device time, summed over the calls whose events resolved */
    double min_ms, max_ms;  /* per call */
    int64_t timed_calls;    /* calls whose time is in total_ms (calls still in flight are not) */
} gpucore_profile_entry;

/* enabled 1: record every op from now on; 0: stop recording (what was recorded stays). */
GPUCORE_API gpucore_status gpucore_profiler_enable(gpucore_context *ctx, int enabled);
/* Whether the profiler records (1/0); -1 for an invalid handle. */
GPUCORE_API int gpucore_profiler_enabled(const gpucore_context *ctx);
/* Forget every record (waits for the events of ops already recorded, to recycle them). */
GPUCORE_API gpucore_status gpucore_profiler_reset(gpucore_context *ctx);
/* The totals, one entry per op name in order of total time (largest first). Waits for
 * the ops recorded so far to finish (their events), which the caller should do only
 * when it wants the numbers. Up to max entries are copied; *count gets the number of
 * op names. entries NULL with max 0 only counts. */
GPUCORE_API gpucore_status gpucore_profiler_entries(gpucore_context *ctx, gpucore_profile_entry *entries, int max,
                                                    int *count);
/* The totals as text: json 0 gives a table ("op  calls  total ms  mean ms  bytes
 * GB/s" and a total line), json 1 one JSON object {"device":"cpu","ops":[{"name":..,
 * "calls":..,"total_ms":..,"mean_ms":..,"min_ms":..,"max_ms":..,"bytes":..},..]}.
 * *needed (if not NULL) gets the bytes the text takes, including the NUL; buf NULL with
 * buf_len 0 only asks for the size; a buffer too small gets what fits (NUL-terminated)
 * and GPUCORE_ERR_INVALID_ARGUMENT. */
GPUCORE_API gpucore_status gpucore_profiler_summary(gpucore_context *ctx, int json, char *buf, int64_t buf_len,
                                                    int64_t *needed);

/* ------------------------------------------------- streams: priorities and pool */

/* The priorities this device's streams take: least is the lowest priority (0),
 * greatest the most urgent (negative on CUDA, e.g. -5; 0 on the CPU backend,
 * whose streams have no priorities). gpucore_stream_create clamps to this range. */
GPUCORE_API gpucore_status gpucore_stream_priority_range(gpucore_context *ctx, int *least, int *greatest);
/* A stream from the context's pool, handed out round-robin (4 normal-priority
 * streams, 4 at the greatest priority if high_priority is 1), created on first
 * use and owned by the context: do not destroy them. Cheaper than creating
 * streams for short-lived work; two callers may get the same stream. */
GPUCORE_API gpucore_status gpucore_context_pool_stream(gpucore_context *ctx, int high_priority,
                                                       gpucore_stream **out);

/* ------------------------------------------------------- quantized weights
 *
 * A quantized weight is a GPUCORE_U8 tensor holding the bytes of one format below; its
 * logical shape [rows, cols] travels beside it. The bits are those of the reference
 * implementations: GGUF blocks as llama.cpp's ggml writes them (the gguf package reads
 * them), bitsandbytes' 4-bit and 8-bit row formats as bitsandbytes computes them. The
 * per-block layouts and arithmetic are written once in kernels/quant_formats.h.
 *
 *   NF4, FP4   bitsandbytes 4-bit: the [rows, cols] values flattened, in blocks of
 *              block_size values (a power of two, 32..4096; 0 means 64; the last block may
 *              be partial). Bytes: the packed indices (two per byte, the earlier value in the
 *              high nibble; ceil(n/2) bytes, then zeros to a multiple of 4), then the f32
 *              absmax of every block. With GPUCORE_QUANT_DOUBLE the absmax is itself
 *              quantized as bitsandbytes' compress_statistics does: its mean (the offset)
 *              subtracted, 8-bit dynamic code in blocks of 256; the bytes are then the packed
 *              indices, one u8 code per block (zeros to a multiple of 4), the f32 absmax of
 *              every 256 blocks, and the f32 offset.
 *   INT8_ROW   bitsandbytes' Int8Params: int8 values (rows*cols bytes, zeros to a multiple of
 *              4), then the f32 absmax of every row (SCB); x = q * SCB / 127.
 *   Q4_0 .. Q8_0   GGUF blocks of 32 values; Q4_K, Q5_K, Q6_K: blocks of 256. Each row is
 *              whole blocks (cols a multiple of the block); block_size must be 0.
 */
typedef enum gpucore_quant_format {
    GPUCORE_QUANT_NF4 = 0, GPUCORE_QUANT_FP4 = 1, GPUCORE_QUANT_INT8_ROW = 2,
    GPUCORE_QUANT_Q4_0 = 3, GPUCORE_QUANT_Q4_1 = 4, GPUCORE_QUANT_Q5_0 = 5, GPUCORE_QUANT_Q5_1 = 6,
    GPUCORE_QUANT_Q8_0 = 7, GPUCORE_QUANT_Q4_K = 8, GPUCORE_QUANT_Q5_K = 9, GPUCORE_QUANT_Q6_K = 10
} gpucore_quant_format;

/* flags of the calls below */
#define GPUCORE_QUANT_DOUBLE 1 /* NF4/FP4: double quantization of the absmax */

/* Bytes of a [rows, cols] matrix in format fmt (block_size and flags as above) into *bytes.
 * INVALID_ARGUMENT (with the rule in the message) for an unknown format, a negative size, a
 * block size the format does not take, cols not a multiple of a GGUF block, or a flag the
 * format does not take; OVERFLOW past int64. */
GPUCORE_API gpucore_status gpucore_quant_size(gpucore_quant_format fmt, int64_t rows, int64_t cols,
                                              int64_t block_size, int flags, int64_t *bytes);

/* Quantizes x (f32, f16 or bf16; cols its last dim, rows the product of the others) into out,
 * a contiguous u8 tensor of exactly gpucore_quant_size bytes, with the reference's rounding
 * (kernels/quant_formats.h). The call waits for its stream: it checks every value, and a NaN
 * or infinite one is INVALID_ARGUMENT naming its position (out is then partly written).
 * Q4_K, Q5_K and Q6_K are read (gpucore_dequantize) but not written: NOT_SUPPORTED. The
 * CPU backend runs it; others return NOT_SUPPORTED (quantize a CPU copy, copy the bytes). Also: NULL_POINTER, INVALID_HANDLE,
 * DTYPE_MISMATCH (x not a float type, out not u8), SHAPE_MISMATCH (out's size),
 * DEVICE_MISMATCH, INVALID_ARGUMENT (format, block size, flags, cols of a GGUF format). */
GPUCORE_API gpucore_status gpucore_quantize(const gpucore_tensor *x, gpucore_quant_format fmt, int64_t block_size,
                                            int flags, gpucore_tensor *out, gpucore_stream *stream);
/* out (f32, f16 or bf16, any strides; its shape gives rows and cols as above) = the values of
 * q (u8, contiguous, gpucore_quant_size bytes of fmt), computed in f32 as the reference does and
 * rounded to out's dtype, the same bits on every backend (CUDA: kernels/quant.cu). Asynchronous
 * on the stream; the same errors as gpucore_quantize. */
GPUCORE_API gpucore_status gpucore_dequantize(const gpucore_tensor *q, gpucore_quant_format fmt, int64_t block_size,
                                              int flags, gpucore_tensor *out, gpucore_stream *stream);

/* A quantized weight W [rows, cols] (a linear layer's [out, in]) as the calls below read it:
 * its bytes and how they were made. */
typedef struct gpucore_qweight {
    const gpucore_tensor *data;  /* u8, contiguous, exactly gpucore_quant_size bytes */
    gpucore_quant_format format;
    int64_t block_size;          /* as gpucore_quantize: NF4/FP4 0 (64) or a power of two; others 0 */
    int flags;                   /* as gpucore_quantize */
    int64_t rows, cols;          /* W's shape */
} gpucore_qweight;

/* A linear layer with a quantized weight: y = act(x·Wᵀ + bias), the arguments and epilogues of
 * gpucore_linear_forward (x [..., cols] with contiguous rows, bias [rows] or NULL, y and aux
 * [..., rows]; x, bias, y and aux one dtype: f32, f16 or bf16). W is never materialised whole:
 * each element is dequantized in f32 (gpucore_dequantize's value) and rounded to x's dtype, as
 * a dequantize-then-GEMM in that dtype would see it; products accumulate in f32 and the result
 * is rounded once. CPU: tiles of W dequantized into the GEMM's panels, and for 1-4 rows a
 * product that reads the blocks directly; CUDA: kernels that dequantize in the tile.
 * Errors: those of gpucore_linear_forward and gpucore_dequantize (w's bytes, format, sizes),
 * SHAPE_MISMATCH when x's last dim is not w->cols or y's is not w->rows. */
GPUCORE_API gpucore_status gpucore_qlinear_forward(const gpucore_tensor *x, const gpucore_qweight *w,
                                                   const gpucore_tensor *bias, gpucore_activation act,
                                                   gpucore_tensor *y, gpucore_tensor *aux, gpucore_stream *stream);
/* The input gradient of that layer: dx = dy·W + beta·dx, dy [..., rows], dx [..., cols], one
 * dtype, W read as above; beta 0 (overwrite) or 1 (accumulate). No weight gradient: a quantized
 * base is frozen. The same errors, and INVALID_ARGUMENT for another beta. */
GPUCORE_API gpucore_status gpucore_qlinear_backward_data(const gpucore_tensor *dy, const gpucore_qweight *w,
                                                         double beta, gpucore_tensor *dx, gpucore_stream *stream);

/* ------------------------------------------------------------------ matmul
 *
 *   d = epilogue(alpha · op(a) · op(b) + beta · c)
 *
 * Shapes (after op, i.e. after opts->trans_a / trans_b swap a matrix's last two dims):
 * op(a) is [M, K], op(b) is [K, N], d is [M, N]; or 3-d [batch, ., .] for strided
 * batches, where a 2-d a or b (or a batch of 1) is used for every batch.
 * Views are the way to express layouts: a transposed view (gpucore_tensor_transpose)
 * works as op(); each matrix needs stride 1 along one of its last two dims and the
 * other stride >= that dim's extent (a leading dimension); any batch stride.
 * d (and c, aux) must have stride 1 along their last dim (row-major, any row stride).
 * d must not overlap a, b, aux or bias; c may be d itself (in-place accumulation).
 *
 * Dtypes (accumulation is always fp32; alpha and beta are used as f32):
 *   a, b f32       -> d f32         (TF32 tensor cores only if allowed, see below)
 *   a, b f16       -> d f16 or f32
 *   a, b bf16      -> d bf16 or f32
 *   a, b fp8 (e4m3×e4m3, e4m3×e5m2, e5m2×e4m3) -> d f32, f16 or bf16: CUDA devices of
 *       compute capability 8.9+ only, in the "TN" layout their fp8 GEMM needs: a
 *       row-major [M,K] and op(b) the transpose of a row-major [N,K] (the linear-layer
 *       layout x·Wᵀ); pointers 16-byte aligned and leading dimensions multiples of 16.
 *       opts->scale_a / scale_b (f32 scalars, may be NULL for 1) dequantise a and b;
 *       opts->amax_d (f32 scalar) receives max|d|. The CPU backend refuses fp8
 *       (GPUCORE_ERR_NOT_SUPPORTED).
 * c, bias, aux and bias_grad have d's dtype. Every data pointer must be aligned
 * to its element size.
 *
 * CPU backend: OpenBLAS sgemm (f32), sbgemm (bf16); f16 operands are converted to
 * f32 exactly and multiplied with sgemm, so CPU f16 results are as accurate as
 * f32 ones (the GPU rounds nothing either: fp32 accumulation). Without OpenBLAS a
 * blocked C GEMM. Epilogues are applied after the GEMM with the same formulas
 * (kernels/gemm_desc.h). CUDA backend: cuBLASLt with fused epilogues; descriptors
 * and the chosen algorithm are cached per (shape, dtypes, layout, epilogue,
 * alignment); when cuBLASLt has no algorithm for a problem (odd shapes, an aux
 * leading dimension that is not a multiple of 8) a hand-written tiled kernel
 * computes it instead, with a note in the log (GPUCORE_LOG=info).
 */

typedef enum gpucore_epilogue {
    GPUCORE_EPILOGUE_NONE = 0,
    GPUCORE_EPILOGUE_BIAS = 1,        /* d = acc + bias[n]  (bias: 1-d, length N, added to every row) */
    GPUCORE_EPILOGUE_RELU = 2,        /* d = max(acc, 0) */
    GPUCORE_EPILOGUE_BIAS_RELU = 3,   /* d = max(acc + bias, 0) */
    GPUCORE_EPILOGUE_GELU = 4,        /* d = gelu_tanh(acc); aux, if given, receives acc */
    GPUCORE_EPILOGUE_BIAS_GELU = 5,   /* d = gelu_tanh(acc + bias); aux, if given, receives acc + bias */
    GPUCORE_EPILOGUE_DGELU = 6,       /* d = acc · gelu_tanh'(aux); aux (input) required */
    GPUCORE_EPILOGUE_DGELU_BGRAD = 7, /* as DGELU, and bias_grad[n] = Σ_m d[m,n] (length N) */
    GPUCORE_EPILOGUE_BGRAD_A = 8,     /* d = acc, and bias_grad[m] = Σ_k op(a)[m,k] (length M) */
    GPUCORE_EPILOGUE_BGRAD_B = 9      /* d = acc, and bias_grad[n] = Σ_k op(b)[k,n] (length N) */
} gpucore_epilogue;
/* acc = alpha·op(a)·op(b) + beta·c. gelu_tanh is 0.5x(1+tanh(√(2/π)(x+0.044715x³))),
 * the form cuBLASLt's epilogue computes. aux is [M, N] (or d's batch shape) with
 * d's dtype. Epilogues that read or write aux or bias_grad need batch == 1. */

/* Options of gpucore_matmul. Fill with gpucore_matmul_options_init, then set fields.
 * Tensors given here must be on d's context. */
typedef struct gpucore_matmul_options {
    int64_t struct_size;              /* sizeof(gpucore_matmul_options) */
    int32_t trans_a, trans_b;         /* 1: use the transpose of a / b (default 0) */
    double alpha, beta;               /* default 1 and 0 */
    const gpucore_tensor *c;          /* beta's addend (d's shape and dtype); NULL: d itself */
    int32_t epilogue;                 /* gpucore_epilogue (default NONE) */
    int32_t allow_tf32;               /* f32 operands: -1 the context's setting (default), 0 no, 1 yes */
    const gpucore_tensor *bias;       /* BIAS* epilogues: [N] */
    gpucore_tensor *aux;              /* GELU*: optional output; DGELU*: required input */
    gpucore_tensor *bias_grad;        /* BGRAD epilogues: output vector */
    const gpucore_tensor *scale_a;    /* fp8 only: f32 scalar tensors (NULL: 1) */
    const gpucore_tensor *scale_b;
    gpucore_tensor *amax_d;           /* fp8 only: f32 scalar output (NULL: not computed) */
} gpucore_matmul_options;

/* Set struct_size and the defaults. */
GPUCORE_API void gpucore_matmul_options_init(gpucore_matmul_options *opts);

/* d = epilogue(alpha·op(a)·op(b) + beta·c), asynchronous on `stream` (NULL: current
 * stream). opts NULL: the defaults (d = a·b). Errors: SHAPE_MISMATCH (inner
 * dimensions, d's shape, bias length, batch counts), DTYPE_MISMATCH (a dtype mix
 * listed above as unsupported), NOT_CONTIGUOUS (a matrix without a unit stride,
 * d not row-major), INVALID_ARGUMENT (misaligned pointers, overlapping outputs,
 * a missing aux/bias), NOT_SUPPORTED (fp8 where the device has none, fp8 outside
 * the TN layout, aux/bias_grad epilogues on batches). */
GPUCORE_API gpucore_status gpucore_matmul(const gpucore_tensor *a, const gpucore_tensor *b, gpucore_tensor *d,
                                          const gpucore_matmul_options *opts, gpucore_stream *stream);

/* --- torch.matmul's shape rules (1-d operands, broadcast batch dims) ---
 * d = a·b with PyTorch's rules: a 1-d a is a row [1, K] and a 1-d b a column
 * [K, 1], the added dim dropped from d (both 1-d: a dot product, d 0-d); the
 * batch dims (all but the last two) broadcast numpy-style, any number of them.
 * d's shape is batch + [M] (a not 1-d) + [N] (b not 1-d); d may have any
 * strides. Operands are used in place as strided views (one batched GEMM); an
 * operand whose broadcast batch dims do not merge into one stride, or a d that
 * is not row-major, goes through a dense copy. Dtypes as gpucore_matmul without
 * options (no epilogue, alpha 1, beta 0, the context's TF32 setting). */
GPUCORE_API gpucore_status gpucore_matmul_nd(const gpucore_tensor *a, const gpucore_tensor *b, gpucore_tensor *d,
                                             gpucore_stream *stream);

/* Whether matmuls on f32 operands may use TF32 tensor cores (10-bit mantissa
 * products, fp32 accumulation; error ~1e-3 relative) when the call's allow_tf32 is
 * -1. Default 0. The CPU backend always computes in full f32. */
GPUCORE_API gpucore_status gpucore_context_set_allow_tf32(gpucore_context *ctx, int allow);
GPUCORE_API gpucore_status gpucore_context_get_allow_tf32(gpucore_context *ctx, int *allow);
/* Scratch memory a CUDA matmul may use (taken from the caching allocator per call).
 * bytes 0 restores the default (32 MiB, what cuBLASLt wants on sm_90). */
GPUCORE_API gpucore_status gpucore_matmul_set_workspace_size(gpucore_context *ctx, int64_t bytes);

/* ---- matmul statistics: GEMMs on the fallback kernel ----
 * Where cuBLASLt cannot serve a GEMM the CUDA backend runs a tiled fallback kernel
 * instead (same results, about 100x slower), with one WARN log per shape naming the
 * reason. These counters say how many of a context's GEMMs (matmul, linear and
 * linear_backward each issue one or two) ran there and why; the profiler also
 * counts them under the name "matmul_fallback" (calls only, their time stays in
 * the op's own entry). The CPU backend never falls back. */
typedef enum gpucore_matmul_fallback_reason {
    GPUCORE_MATMUL_FALLBACK_NO_ALGORITHM = 0, /* cuBLASLt's heuristic offered no algorithm (shape, epilogue,
                                                 dtypes, alignment) */
    GPUCORE_MATMUL_FALLBACK_AUX_LD = 1,       /* an aux leading dimension cuBLASLt does not take (a multiple of
                                                 8, >= rows: cublasLt.h:1382) */
    GPUCORE_MATMUL_FALLBACK_WORKSPACE = 2,    /* every algorithm wants more workspace than set
                                                 (gpucore_matmul_set_workspace_size) */
    GPUCORE_MATMUL_FALLBACK_REFUSED = 3,      /* cublasLtMatmul refused every algorithm the heuristic offered */
    GPUCORE_MATMUL_FALLBACK_BATCH = 4,        /* more than INT32_MAX batches */
    GPUCORE_MATMUL_FALLBACK_REASONS = 5
} gpucore_matmul_fallback_reason;

/* Set struct_size to sizeof(gpucore_matmul_stats). Counted since the context was
 * created (or the last reset). */
typedef struct gpucore_matmul_stats {
    int64_t struct_size;
    int64_t gemms;                  /* GEMMs dispatched to the backend */
    int64_t fallback_gemms;         /* of them, run on the fallback kernel */
    int64_t fallback_by_reason[GPUCORE_MATMUL_FALLBACK_REASONS]; /* fallback_gemms by reason */
} gpucore_matmul_stats;

GPUCORE_API gpucore_status gpucore_matmul_get_stats(gpucore_context *ctx, gpucore_matmul_stats *stats);
GPUCORE_API gpucore_status gpucore_matmul_reset_stats(gpucore_context *ctx);
/* A reason's description ("cuBLASLt has no algorithm"); "unknown reason" for others. */
GPUCORE_API const char *gpucore_matmul_fallback_reason_text(int reason);

/* ------------------------------------------------------------------ linear
 *
 * A fully connected layer, y = act(x·Wᵀ + bias), with x [..., in] (leading dims
 * that merge into one row dimension: contiguous rows), W [out, in] (stride 1 along
 * one of its dims), bias [out] or NULL, y [..., out]. Each direction is one
 * call (one fused GEMM forward; two GEMMs backward, with fused epilogues).
 */

/* act: GPUCORE_ACT_NONE, GPUCORE_ACT_RELU or GPUCORE_ACT_GELU_TANH (the fused GELU
 * is the tanh form). aux: NULL, or for GELU a tensor of y's shape and dtype that
 * receives the pre-activation x·Wᵀ + bias, which gpucore_linear_backward needs. */
GPUCORE_API gpucore_status gpucore_linear_forward(const gpucore_tensor *x, const gpucore_tensor *w,
                                                  const gpucore_tensor *bias, gpucore_activation act,
                                                  gpucore_tensor *y, gpucore_tensor *aux, gpucore_stream *stream);

/* Backward of y = x·Wᵀ + bias, given dy = ∂L/∂y [..., out]:
 *   dx = dy·W [..., in], dw = dyᵀ·x [out, in], db = Σ_rows dy [out]
 * Any of dx, dw, db may be NULL (not computed); db is produced by dw's GEMM, so
 * it needs dw. Fusing the layer below: when x = gelu_tanh(x_gelu_aux) (x_gelu_aux
 * is the aux that layer's gpucore_linear_forward wrote), pass it, and dx receives
 * ∂L/∂x_gelu_aux = (dy·W) ⊙ gelu_tanh'(x_gelu_aux) instead — the input gradient
 * of that layer, in the same GEMM. For a GELU layer itself: call this on the layer
 * above with x_gelu_aux, then on the GELU layer with that result as its dy. */
GPUCORE_API gpucore_status gpucore_linear_backward(const gpucore_tensor *dy, const gpucore_tensor *x,
                                                   const gpucore_tensor *w, const gpucore_tensor *x_gelu_aux,
                                                   gpucore_tensor *dx, gpucore_tensor *dw, gpucore_tensor *db,
                                                   gpucore_stream *stream);

/* ---- LoRA linear (low-rank adapter on a frozen base weight) ----
 *
 *   y = x·Wᵀ + bias + scale · (drop(x)·Aᵀ)·Bᵀ
 *
 * x [..., in] (contiguous rows, as the linear layer), W [out, in] (frozen: no dW),
 * bias [out] or NULL (frozen), A [r, in], B [out, r], y [..., out]; one dtype for
 * all (f32, f16 or bf16), except that W may instead be fp8 (e4m3 or e5m2) with a
 * per-tensor scale, opts->w_scale (an f32 one-element tensor, as gpucore_matmul's
 * scale_b: W = decode(w)·w_scale; required for an fp8 W, refused for a float W).
 * An fp8 W is dequantised on every backend into a scratch copy in x's dtype,
 * dt(f32(decode(w)·w_scale)) (exact decode, one f32 product, one rounding), for
 * the base GEMM of each forward and for dx in the backward; the GEMMs then run
 * as for a float W (the one fp8 GEMM, CUDA sm_89+, needs both operands fp8 in
 * the TN layout, which neither x·Wᵀ with a float x nor dx = dy·W is). The
 * scratch copy costs out·in·4 bytes (plus out·in·2 for bf16/f16 x) of
 * allocator memory during the call. drop is inverted
 * dropout on the adapter input (gpucore_dropout over x's elements under (seed,
 * offset): the backward replays it; advance offset by
 * gpucore_random_offset_advance(numel(x), GPUCORE_UNIFORM) per call). Built on
 * gpucore_matmul / gpucore_linear_*, so every backend runs it: three GEMMs forward
 * (the base, x·Aᵀ, then ·Bᵀ accumulated into y), up to six backward (five with xa). */
typedef struct gpucore_lora_options {
    int64_t struct_size;   /* sizeof(gpucore_lora_options) */
    double scale;          /* the adapter's factor (alpha / r); default 1 */
    double dropout_p;      /* on the adapter input, in [0, 1); default 0 */
    uint64_t seed, offset; /* the dropout's Philox stream */
    const gpucore_tensor *w_scale; /* fp8 W only: f32 one-element tensor (required); NULL otherwise */
    /* A quantized base (QLoRA): W read from w_quant as gpucore_qlinear_forward does, never
     * materialised; the w argument must then be NULL. NULL: W is the w argument. */
    const gpucore_qweight *w_quant;
} gpucore_lora_options;

/* Set struct_size and the defaults. */
GPUCORE_API void gpucore_lora_options_init(gpucore_lora_options *opts);

/* y = x·Wᵀ + bias + scale·(drop(x)·Aᵀ)·Bᵀ. xa: NULL, or [..., r] (x's leading
 * dims, contiguous) receiving drop(x)·Aᵀ, which the backward reads (saves one
 * GEMM there). opts NULL: the defaults. y must not overlap an input.
 * Errors: SHAPE_MISMATCH (in, out or r disagree), DTYPE_MISMATCH (mixed dtypes),
 * NOT_CONTIGUOUS (x, y or xa rows not mergeable), INVALID_ARGUMENT (dropout_p,
 * scale not finite, struct_size, w_scale missing for an fp8 W or given for a
 * float one), DTYPE_MISMATCH (w_scale not f32), and those of gpucore_matmul. */
GPUCORE_API gpucore_status gpucore_lora_forward(gpucore_tensor *y, gpucore_tensor *xa, const gpucore_tensor *x,
                                                const gpucore_tensor *w, const gpucore_tensor *bias,
                                                const gpucore_tensor *a, const gpucore_tensor *b,
                                                const gpucore_lora_options *opts, gpucore_stream *stream);

/* Given dy = ∂L/∂y [..., out], with the forward's x, W, A, B and options:
 *   dB = scale·dyᵀ·(drop(x)·Aᵀ)  [out, r]
 *   dA = (scale·dy·B)ᵀ·drop(x)   [r, in]
 *   dx = dy·W + drop'(scale·dy·B·A) [..., in]  (drop' replays the forward's mask)
 * Each of dx, dA, dB may be NULL (not computed); they are overwritten. xa: the
 * forward's xa output, or NULL (recomputed). No gradient for the frozen W and bias. */
GPUCORE_API gpucore_status gpucore_lora_backward(gpucore_tensor *dx, gpucore_tensor *da, gpucore_tensor *db,
                                                 const gpucore_tensor *dy, const gpucore_tensor *x,
                                                 const gpucore_tensor *w, const gpucore_tensor *a,
                                                 const gpucore_tensor *b, const gpucore_tensor *xa,
                                                 const gpucore_lora_options *opts, gpucore_stream *stream);

/* Merge the adapter into the base weight, W += scale·B·A (after which a plain
 * linear layer computes the adapted y without dropout), or take it out again,
 * W -= scale·B·A. f32: unmerge(merge(W)) equals W to f32 rounding; bf16/f16 W
 * rounds at each call (keep an unmerged copy to get W back exactly). An fp8 W is
 * refused with NOT_SUPPORTED (it would have to be requantised, so unmerge could
 * not restore it): merge into a dequantised copy instead. */
GPUCORE_API gpucore_status gpucore_lora_merge(gpucore_tensor *w, const gpucore_tensor *a, const gpucore_tensor *b,
                                              double scale, gpucore_stream *stream);
GPUCORE_API gpucore_status gpucore_lora_unmerge(gpucore_tensor *w, const gpucore_tensor *a, const gpucore_tensor *b,
                                                double scale, gpucore_stream *stream);

/* ------------------------------------------------------------- convolution
 *
 * 2-D convolution (cross-correlation, as in PyTorch's conv2d) forward, backward
 * data and backward filter; 1-D convolution is the same calls with 3-d tensors
 * (H = 1). Symbols (per image n):
 *   x  [N, C, H, W]        input             (NHWC: [N, H, W, C])
 *   w  [K, C/groups, R, S] filter            (NHWC: [K, R, S, C/groups])
 *   y  [N, K, P, Q]        output            (NHWC: [N, P, Q, K])
 *   P = (H + 2·pad_h − dil_h·(R−1) − 1) / stride_h + 1, likewise Q (floor division).
 *   y[n,k,p,q] = Σ_{c in k's group, r, s} x[n, c, p·stride_h − pad_h + r·dil_h, q·stride_w − pad_w + s·dil_w]
 *                · w[k, c − group_start, r, s]   (+ bias[k], then ReLU if asked)
 * Groups split C and K into `groups` equal parts; groups = C = K·(1/multiplier) is
 * depthwise. 1-D tensors drop H, P and R: x [N, C, W] (NWC: [N, W, C]), w [K, C/g, S]
 * ([K, S, C/g]); only the _w entries of stride/pad/dilation are used.
 *
 * Tensors: one context; x, w, y (and dx, dw, dy) of one dtype — f32, f16 or bf16,
 * accumulated in fp32 (f32 may use TF32 tensor cores on CUDA when allowed); bias
 * [K] of the same dtype. Any strides are accepted (the layout names which dim is
 * which, the strides say where elements are); CUDA is fastest on dense tensors
 * with 16-byte-aligned pointers. Outputs must not overlap inputs. Asynchronous on
 * `stream` (NULL: current stream).
 *
 * CPU backend: im2col + GEMM (OpenBLAS sgemm; f16/bf16 widened to f32 exactly), a
 * direct loop for depthwise; the same results within the accuracy contract's tolerances (a float64 reference).
 * CUDA backend: cuDNN 9 through its graph (backend) API. Execution plans are
 * cached per (op, dtype, shapes, strides, layout, stride/pad/dilation/groups,
 * algorithm mode, TF32, bias/ReLU, pointer alignment) in a bounded LRU cache
 * shared by the device's contexts (thread-safe). Builds without cuDNN, and the
 * test-only cuda-emulated backend, return GPUCORE_ERR_NOT_SUPPORTED.
 */

typedef enum gpucore_conv_layout {
    GPUCORE_CONV_NCHW = 0,  /* channels before space (PyTorch's default) */
    GPUCORE_CONV_NHWC = 1   /* channels last (tensor cores' native layout) */
} gpucore_conv_layout;

typedef enum gpucore_conv_algo {
    GPUCORE_CONV_ALGO_HEURISTIC = 0,     /* cuDNN's heuristics pick the engine (default) */
    GPUCORE_CONV_ALGO_AUTOTUNE = 1,      /* time the candidate engines once per plan key and keep the
                                            fastest (cudnn.benchmark); the cost is in gpucore_conv_stats */
    GPUCORE_CONV_ALGO_DETERMINISTIC = 2  /* only engines that give identical bits on every run */
} gpucore_conv_algo;

/* Options of the convolution calls. Fill with gpucore_conv_options_init, then set fields. */
typedef struct gpucore_conv_options {
    int64_t struct_size;        /* sizeof(gpucore_conv_options) */
    int32_t layout;             /* gpucore_conv_layout (default NCHW) */
    int32_t algo;               /* gpucore_conv_algo (default HEURISTIC) */
    int64_t stride_h, stride_w; /* >= 1 (default 1) */
    int64_t pad_h, pad_w;       /* >= 0, both sides (default 0) */
    int64_t dil_h, dil_w;       /* >= 1 (default 1) */
    int64_t groups;             /* >= 1, divides C and K (default 1) */
    int32_t padding_same;       /* 1: pad so that P = ceil(H / stride) (PyTorch's padding='same' with
                                   stride 1); needs dil·(R−1) even; overrides pad_h/pad_w. Default 0 */
    int32_t allow_tf32;         /* f32: -1 the context's setting (gpucore_context_set_allow_tf32), 0, 1 */
    int32_t activation;         /* forward only: GPUCORE_ACT_NONE (default) or GPUCORE_ACT_RELU,
                                   applied after the bias (fused into cuDNN's graph where it can) */
    int32_t reserved;
    int64_t workspace_limit;    /* CUDA: most scratch bytes an engine may use; 0: no limit but free
                                   memory (an engine needing more than can be had is passed over for
                                   the best one that fits, with a note in the log) */
} gpucore_conv_options;

GPUCORE_API void gpucore_conv_options_init(gpucore_conv_options *opts);

/* The shape y must have for x and w under opts (NULL: defaults): *ndim gets
 * x's ndim, shape gets that many entries. Fails as the forward call would. */
GPUCORE_API gpucore_status gpucore_conv_output_shape(const gpucore_tensor *x, const gpucore_tensor *w,
                                                     const gpucore_conv_options *opts, int *ndim, int64_t *shape);

/* y = act(conv(x, w) + bias). bias NULL: none. Errors: SHAPE_MISMATCH (channels vs
 * weight and groups, y's shape, bias length, a kernel larger than the padded
 * input), DTYPE_MISMATCH (mixed or non-floating dtypes), INVALID_ARGUMENT (stride,
 * padding, dilation, groups, layout, activation out of range; overlapping outputs),
 * DEVICE_MISMATCH, NOT_SUPPORTED (no cuDNN in this build/backend). */
GPUCORE_API gpucore_status gpucore_conv_forward(const gpucore_tensor *x, const gpucore_tensor *w,
                                                const gpucore_tensor *bias, gpucore_tensor *y,
                                                const gpucore_conv_options *opts, gpucore_stream *stream);
/* dx = ∂L/∂x given dy = ∂L/∂y (dx is overwritten). opts->activation must be NONE
 * (apply gpucore_activation_backward to dy first). */
GPUCORE_API gpucore_status gpucore_conv_backward_data(const gpucore_tensor *dy, const gpucore_tensor *w,
                                                      gpucore_tensor *dx, const gpucore_conv_options *opts,
                                                      gpucore_stream *stream);
/* dw = ∂L/∂w given dy and the forward input x (dw is overwritten). The bias
 * gradient db[k] = Σ over N, P, Q of dy is a reduction: gpucore_bias_grad(db, dy)
 * for NHWC (dy is [..., K]); for NCHW reduce dy over its last dims and the batch. */
GPUCORE_API gpucore_status gpucore_conv_backward_filter(const gpucore_tensor *dy, const gpucore_tensor *x,
                                                        gpucore_tensor *dw, const gpucore_conv_options *opts,
                                                        gpucore_stream *stream);

/* Counters of a context's device's convolution plan cache (CUDA; zeros on the
 * CPU, which plans nothing). Set struct_size to sizeof(gpucore_conv_stats). */
typedef struct gpucore_conv_stats {
    int64_t struct_size;
    int64_t plans_cached;       /* execution plans in the cache now */
    int64_t plan_capacity;      /* most plans kept (least recently used are evicted) */
    int64_t cache_hits, cache_misses, evictions;
    int64_t autotune_runs;      /* plan keys autotuned */
    int64_t autotune_candidates;/* engines timed over those runs */
    double autotune_ms;         /* wall time spent autotuning (paid once per key) */
    int64_t workspace_fallbacks;/* times the preferred engine's workspace did not fit */
} gpucore_conv_stats;

GPUCORE_API gpucore_status gpucore_conv_get_stats(gpucore_context *ctx, gpucore_conv_stats *stats);

/* ------------------------------------------------------ training primitives
 *
 * Fused multi-tensor optimizers, dynamic loss scaling, gradient clipping and
 * safetensors checkpoints. A training step built from these needs no host
 * synchronisation: the learning rate, the step counter, the loss scale and the
 * found-inf flag live in device memory (0-d f32 tensors, i32 for the growth
 * tracker) that the ops read and write on the stream.
 *
 * Tensors given to these calls are contiguous, on one context, floating
 * (f32, f16, bf16); arrays of tensors are passed as pointer + count and are read
 * before the call returns. Asynchronous on `stream` (NULL: current stream). */

typedef struct gpucore_optimizer gpucore_optimizer;

typedef enum gpucore_optimizer_kind {
    GPUCORE_OPTIMIZER_SGD = 0,   /* momentum, dampening, Nesterov, L2 weight decay (torch.optim.SGD) */
    GPUCORE_OPTIMIZER_ADAMW = 1  /* bias correction, decoupled weight decay (torch.optim.AdamW) */
} gpucore_optimizer_kind;

/* Hyperparameters. Fill with gpucore_optimizer_config_default, then change fields.
 * lr is the initial value of the device-resident lr tensor (gpucore_optimizer_lr). */
typedef struct gpucore_optimizer_config {
    int64_t struct_size;   /* sizeof(gpucore_optimizer_config) */
    int32_t kind;          /* gpucore_optimizer_kind */
    int32_t nesterov;      /* SGD: 1 for Nesterov momentum (needs momentum > 0, dampening 0) */
    double lr;             /* default 1e-3 */
    double weight_decay;   /* default 0 (SGD) / 1e-2 (AdamW) */
    double momentum;       /* SGD, default 0 (no momentum buffer) */
    double dampening;      /* SGD, default 0 */
    double beta1, beta2;   /* AdamW, default 0.9, 0.999 */
    double eps;            /* AdamW, default 1e-8 */
} gpucore_optimizer_config;

GPUCORE_API gpucore_status gpucore_optimizer_config_default(gpucore_optimizer_kind kind, gpucore_optimizer_config *cfg);

/* An optimizer over `count` parameter tensors (f32, f16 or bf16, contiguous, one
 * context). It owns its state: f32 exp_avg/exp_avg_sq (AdamW) or momentum buffers
 * (SGD with momentum), zero-initialised, and for f16/bf16 parameters an f32 master
 * copy initialised from the parameter (the step updates the master and writes the
 * parameter rounded to nearest even). The parameter tensors must outlive the
 * optimizer. Creation waits for the parameters' pending work (it reads them). */
GPUCORE_API gpucore_status gpucore_optimizer_create(gpucore_context *ctx, const gpucore_optimizer_config *cfg,
                                                    gpucore_tensor *const *params, int64_t count,
                                                    gpucore_optimizer **out);
GPUCORE_API gpucore_status gpucore_optimizer_destroy(gpucore_optimizer *opt);

/* One fused step: grads[i] (same shape as params[i]; its dtype or f32) updates
 * params[i]. Reads lr and step from device memory; step is incremented first (the
 * first step is 1). found_inf: NULL, or a 0-d f32 tensor (a loss scaler's) — when it
 * holds a non-zero value at the time the step runs, the step does nothing (the
 * parameters, state and step counter are untouched). */
GPUCORE_API gpucore_status gpucore_optimizer_step(gpucore_optimizer *opt, gpucore_tensor *const *grads, int64_t count,
                                                  const gpucore_tensor *found_inf, gpucore_stream *stream);

/* The device-resident 0-d f32 learning rate and step counter (owned by the
 * optimizer; do not destroy). Write them with gpucore_fill or any op to schedule
 * the rate without a host sync. */
GPUCORE_API gpucore_status gpucore_optimizer_lr(gpucore_optimizer *opt, gpucore_tensor **lr);
GPUCORE_API gpucore_status gpucore_optimizer_step_count(gpucore_optimizer *opt, gpucore_tensor **step);
GPUCORE_API int64_t gpucore_optimizer_param_count(const gpucore_optimizer *opt); /* -1: invalid handle */
/* State tensor `name` of parameter `index` (owned by the optimizer): "exp_avg",
 * "exp_avg_sq" (AdamW), "momentum_buffer" (SGD with momentum), "master" (f16/bf16
 * parameters). GPUCORE_ERR_INVALID_ARGUMENT when that parameter has no such state. */
GPUCORE_API gpucore_status gpucore_optimizer_state(gpucore_optimizer *opt, int64_t index, const char *name,
                                                   gpucore_tensor **out);

/* Dynamic loss scaling (torch.amp.GradScaler's rule). Per step:
 *   loss * scale -> backward -> gpucore_loss_scaler_unscale(grads) ->
 *   gpucore_optimizer_step(..., found_inf = the scaler's) -> gpucore_loss_scaler_update.
 * unscale clears found_inf, multiplies every gradient by 1/scale and sets found_inf
 * to 1 if any gradient held Inf or NaN. update then halves the scale (backoff) and
 * resets the growth tracker on overflow, else counts a clean step and doubles the
 * scale (growth) after growth_interval clean steps in a row. */
typedef struct gpucore_loss_scaler gpucore_loss_scaler;

typedef struct gpucore_loss_scaler_config {
    int64_t struct_size;       /* sizeof(gpucore_loss_scaler_config) */
    double init_scale;         /* default 65536 (2^16) */
    double growth_factor;      /* default 2.0 (> 1) */
    double backoff_factor;     /* default 0.5 (in (0, 1)) */
    int64_t growth_interval;   /* default 2000 (>= 1) */
} gpucore_loss_scaler_config;

GPUCORE_API gpucore_status gpucore_loss_scaler_config_default(gpucore_loss_scaler_config *cfg);
/* cfg NULL: the defaults. */
GPUCORE_API gpucore_status gpucore_loss_scaler_create(gpucore_context *ctx, const gpucore_loss_scaler_config *cfg,
                                                      gpucore_loss_scaler **out);
GPUCORE_API gpucore_status gpucore_loss_scaler_destroy(gpucore_loss_scaler *scaler);
GPUCORE_API gpucore_status gpucore_loss_scaler_unscale(gpucore_loss_scaler *scaler, gpucore_tensor *const *grads,
                                                       int64_t count, gpucore_stream *stream);
GPUCORE_API gpucore_status gpucore_loss_scaler_update(gpucore_loss_scaler *scaler, gpucore_stream *stream);
/* The scaler's device tensors (owned by it): scale (0-d f32), found_inf (0-d f32,
 * 0 or 1), growth_tracker (0-d i32). */
GPUCORE_API gpucore_status gpucore_loss_scaler_scale(gpucore_loss_scaler *scaler, gpucore_tensor **scale);
GPUCORE_API gpucore_status gpucore_loss_scaler_found_inf(gpucore_loss_scaler *scaler, gpucore_tensor **found_inf);
GPUCORE_API gpucore_status gpucore_loss_scaler_growth_tracker(gpucore_loss_scaler *scaler, gpucore_tensor **tracker);

/* Gradient clipping by global L2 norm over `count` tensors, in one pass:
 * total = sqrt(sum of every element squared), coef = min(1, max_norm / (total + 1e-6)),
 * every gradient *= coef (torch.nn.utils.clip_grad_norm_). The sum is deterministic:
 * fixed 16384-element chunks summed in chunk order, independent of the grid or the
 * thread count. total_norm (required) and clip_coef (may be NULL) are 0-d f32
 * tensors that receive the results on the device. max_norm > 0 and finite. */
GPUCORE_API gpucore_status gpucore_clip_grad_norm(gpucore_tensor *const *grads, int64_t count, double max_norm,
                                                  gpucore_tensor *total_norm, gpucore_tensor *clip_coef,
                                                  gpucore_stream *stream);

/* ------------------------------------------------------------ safetensors
 *
 * The safetensors format (8-byte little-endian header length N, N bytes of JSON
 * header, then the tensor bytes), read and written by Python's `safetensors`,
 * PyTorch and Hugging Face. dtype strings: F32 F64 F16 BF16 I32 I64 U8 F8_E4M3 F8_E5M2.
 * A file may also hold I8 tensors (bitsandbytes' int8 weights, which gpucore_lm_create
 * reads): it opens, and info, read and load_tensor of such a tensor are NOT_SUPPORTED
 * (there is no int8 tensor type); other dtypes are NOT_SUPPORTED at open.
 *
 * Writing is atomic: the file is written to a temporary file in the same folder,
 * flushed to disk (fsync) and renamed over `path`, so a crash mid-save leaves the
 * old file or the new one, never a torn one. Reading checks the header length,
 * the JSON, every dtype, shape and offset against the file (in range, sizes agree
 * with dtype and shape, no overlaps, the data section exactly covered) before
 * allocating anything, and refuses a bad file with GPUCORE_ERR_CORRUPT_FILE and a
 * message naming the problem. Builds without the JSON library (cJSON) return
 * GPUCORE_ERR_NOT_SUPPORTED. */

/* Write tensors (any device; their pending work is waited for) under names (unique,
 * non-empty). metadata_keys/values: NULL or `metadata_count` strings for the
 * header's "__metadata__" map. */
GPUCORE_API gpucore_status gpucore_safetensors_save(const char *path, const char *const *names,
                                                    gpucore_tensor *const *tensors, int64_t count,
                                                    const char *const *metadata_keys,
                                                    const char *const *metadata_values, int64_t metadata_count);

/* An opened, validated safetensors file (header parsed; data read on demand). */
typedef struct gpucore_safetensors gpucore_safetensors;

GPUCORE_API gpucore_status gpucore_safetensors_open(const char *path, gpucore_safetensors **out);
GPUCORE_API gpucore_status gpucore_safetensors_close(gpucore_safetensors *file);
GPUCORE_API int64_t gpucore_safetensors_count(const gpucore_safetensors *file); /* -1 for NULL */
/* Name of tensor i in file order (valid until close); NULL if out of range. */
GPUCORE_API const char *gpucore_safetensors_name(const gpucore_safetensors *file, int64_t i);
/* dtype, ndim and shape (GPUCORE_MAX_DIMS entries room) of tensor `name`. */
GPUCORE_API gpucore_status gpucore_safetensors_info(const gpucore_safetensors *file, const char *name,
                                                    gpucore_dtype *dtype, int *ndim, int64_t *shape);
/* Value of metadata key (valid until close); NULL when absent. */
GPUCORE_API const char *gpucore_safetensors_metadata(const gpucore_safetensors *file, const char *key);
/* Read tensor `name` into dst, whose dtype and shape must match the file's. */
GPUCORE_API gpucore_status gpucore_safetensors_read(gpucore_safetensors *file, const char *name, gpucore_tensor *dst);
/* Read tensor `name` into a new tensor on ctx. */
GPUCORE_API gpucore_status gpucore_safetensors_load_tensor(gpucore_safetensors *file, gpucore_context *ctx,
                                                           const char *name, gpucore_tensor **out);

/* Checkpoints for resume: the model tensors under `names`, plus the optimizer's
 * state (NULL: none) as "optimizer.<i>.<state>", "optimizer.step", "optimizer.lr",
 * and the loss scaler's (NULL: none) as "loss_scaler.scale",
 * "loss_scaler.growth_tracker", with the hyperparameters in the metadata. Loading
 * reads every tensor back into the given (already created) objects and checks
 * that the optimizer kind and parameter count agree with the file. */
GPUCORE_API gpucore_status gpucore_checkpoint_save(const char *path, const char *const *names,
                                                   gpucore_tensor *const *tensors, int64_t count,
                                                   gpucore_optimizer *opt, gpucore_loss_scaler *scaler);
GPUCORE_API gpucore_status gpucore_checkpoint_load(const char *path, const char *const *names,
                                                   gpucore_tensor *const *tensors, int64_t count,
                                                   gpucore_optimizer *opt, gpucore_loss_scaler *scaler);

/* ------------------------------------------------------------ GGUF
 *
 * GGUF, the model file of llama.cpp and Ollama (versions 2 and 3, little-endian):
 * key/value metadata, tensor infos and an aligned data section. Opening reads and checks
 * the whole header before anything else: the magic and version, every count and length
 * against the bytes the file has, every value type and ggml tensor type known, no
 * duplicate key or tensor name, dims within 64 bits and whole blocks, general.alignment a
 * uint32 power of two, every tensor aligned, inside the data section and overlapping no
 * other. A bad file is GPUCORE_ERR_CORRUPT_FILE (NOT_SUPPORTED for version 1, big-endian
 * files and nested arrays) with a message naming the field, and no handle. Tensor data is
 * read on demand. Strings are returned NUL-terminated (their length given too, as GGUF
 * strings may hold NUL bytes); every returned pointer is valid until close. */
typedef struct gpucore_gguf gpucore_gguf;

/* GGUF's metadata value types (the numbers in the file). */
typedef enum gpucore_gguf_value_type {
    GPUCORE_GGUF_UINT8 = 0, GPUCORE_GGUF_INT8 = 1, GPUCORE_GGUF_UINT16 = 2, GPUCORE_GGUF_INT16 = 3,
    GPUCORE_GGUF_UINT32 = 4, GPUCORE_GGUF_INT32 = 5, GPUCORE_GGUF_FLOAT32 = 6, GPUCORE_GGUF_BOOL = 7,
    GPUCORE_GGUF_STRING = 8, GPUCORE_GGUF_ARRAY = 9, GPUCORE_GGUF_UINT64 = 10, GPUCORE_GGUF_INT64 = 11,
    GPUCORE_GGUF_FLOAT64 = 12
} gpucore_gguf_value_type;

GPUCORE_API gpucore_status gpucore_gguf_open(const char *path, gpucore_gguf **out);
GPUCORE_API gpucore_status gpucore_gguf_close(gpucore_gguf *file); /* NULL: no-op */
/* The file's version (2 or 3), its alignment and the data section's byte offset (any may be NULL). */
GPUCORE_API gpucore_status gpucore_gguf_file_info(const gpucore_gguf *file, int64_t *version, int64_t *alignment,
                                                  int64_t *data_offset);

/* Key/values, in file order: i in [0, kv_count). find: the index of key, -1 when absent. */
GPUCORE_API int64_t gpucore_gguf_kv_count(const gpucore_gguf *file); /* -1 for an invalid handle */
GPUCORE_API int64_t gpucore_gguf_kv_find(const gpucore_gguf *file, const char *key);
/* Key, value type (gpucore_gguf_value_type), element type (an array's; the type itself for a
 * scalar) and element count (1 for a scalar); any output may be NULL. */
GPUCORE_API gpucore_status gpucore_gguf_kv_info(const gpucore_gguf *file, int64_t i, const char **key, int *type,
                                                int *elem_type, int64_t *count);
/* Element j (0 for a scalar) of an integer or bool value (a uint64 past INT64_MAX is
 * INVALID_ARGUMENT), of a float32/float64 value, or of a string value; another type is
 * DTYPE_MISMATCH naming both. len may be NULL. */
GPUCORE_API gpucore_status gpucore_gguf_kv_int(const gpucore_gguf *file, int64_t i, int64_t j, int64_t *value);
GPUCORE_API gpucore_status gpucore_gguf_kv_float(const gpucore_gguf *file, int64_t i, int64_t j, double *value);
GPUCORE_API gpucore_status gpucore_gguf_kv_string(const gpucore_gguf *file, int64_t i, int64_t j, const char **s,
                                                  int64_t *len);
/* The elements of a numeric or bool value (scalar or array) as stored: count little-endian
 * values of the element type, aligned for it; *nbytes their size. Strings: DTYPE_MISMATCH. */
GPUCORE_API gpucore_status gpucore_gguf_kv_data(const gpucore_gguf *file, int64_t i, const void **data,
                                                int64_t *nbytes);

/* Tensors, in file order: i in [0, tensor_count). find: the index of name, -1 when absent. */
GPUCORE_API int64_t gpucore_gguf_tensor_count(const gpucore_gguf *file); /* -1 for an invalid handle */
GPUCORE_API int64_t gpucore_gguf_tensor_find(const gpucore_gguf *file, const char *name);
/* Name, ggml type id (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K, 30 BF16, ...),
 * ndim (1-4) and dims as in the file (dims[0] varies fastest: a [rows, cols] matrix has
 * dims {cols, rows}), the byte offset in the data section and the byte size. Any may be NULL. */
GPUCORE_API gpucore_status gpucore_gguf_tensor_info(const gpucore_gguf *file, int64_t i, const char **name,
                                                    int *type, int *ndim, int64_t *dims, int64_t *offset,
                                                    int64_t *nbytes);
/* "F32", "Q4_K", ...; NULL for an id ggml does not define. */
GPUCORE_API const char *gpucore_gguf_type_name(int type);
/* Tensor i decoded into dst: f32, bf16 or f16 (rounded to nearest even), contiguous, of
 * shape dims reversed (row-major). F32, F16, BF16, F64 and the block types Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K are decoded (to f32 first, the values llama.cpp's
 * dequantization gives, bit for bit); other types are NOT_SUPPORTED naming the type. */
GPUCORE_API gpucore_status gpucore_gguf_read(gpucore_gguf *file, int64_t i, gpucore_tensor *dst);
/* The same into a new tensor of that shape and dtype on ctx. */
GPUCORE_API gpucore_status gpucore_gguf_load_tensor(gpucore_gguf *file, gpucore_context *ctx, int64_t i,
                                                    gpucore_dtype dtype, gpucore_tensor **out);

/* ------------------------------------------------------------ token data
 *
 * Datasets of token files for language-model training: memory-mapped, cut into
 * windows of seq_len + 1 tokens, shuffled by a seeded permutation, sharded over the
 * ranks of a data-parallel job, and copied to the device one batch ahead so that a
 * training step never waits for its data.
 *
 * Files (each is checked when opened: GPUCORE_ERR_CORRUPT_FILE with a message naming
 * the file and the problem; GPUCORE_ERR_IO when it cannot be read):
 *   - llm.c's format: a header of 256 little-endian int32 (magic 20240520, version,
 *     token count, the rest unused), then the tokens: uint16 (version 1) or uint32
 *     (version 2). The file size must be exactly 1024 + count * token size.
 *   - NumPy .npy (format 1.0, 2.0 or 3.0) holding uint16 ('<u2'), int32 ('<i4') or
 *     uint32 ('<u4') in any shape, read as one flat stream; Fortran order only for
 *     shapes of at most one dimension larger than 1. Other dtypes, big-endian data
 *     and a size that disagrees with the shape are refused.
 *   A file is recognised by its content (the .npy magic "\x93NUMPY", else llm.c's).
 *
 * Windows: file f's tokens x[0..n) give (n - 1) / seq_len windows; window j holds
 * x[j*T .. j*T + T] (T + 1 tokens; consecutive windows share one token). Windows are
 * numbered file by file (all of file 0's, then file 1's, ...). A batch is batch_size
 * windows; with layout GPUCORE_TOKEN_LAYOUT_SHIFTED (the default) input_ids[b, t] =
 * window[t] and labels[b, t] = window[t + 1], both [B, T] (the targets are already
 * shifted: compare logits[b, t] with labels[b, t]); with GPUCORE_TOKEN_LAYOUT_WINDOW
 * input_ids and labels are both the whole window, [B, T + 1] (two views of one
 * memory), for losses that shift inside as Hugging Face's causal-LM loss does: the
 * same T predictions.
 *
 * Order: epoch e uses a permutation of all windows, a Fisher-Yates shuffle driven by
 * Philox (key seed, counter from e), the same on every machine and backend; shuffle 0
 * keeps the windows in order. Batch k of the job (k = 0, 1, ... over all epochs)
 * lies in epoch e = k / batches_per_epoch at step s = k % batches_per_epoch, and
 * rank r takes the positions (s * world_size + r) * batch_size ... + batch_size - 1
 * of epoch e's permutation. batches_per_epoch = windows / (batch_size * world_size)
 * (the remainder is left out of that epoch, so every rank runs the same number of
 * steps and no two ranks share a window within an epoch).
 *
 * Device copies: batches are gathered on the host into pinned memory (the context's
 * pinned host pool) and copied on a stream of the dataset's own; the consumer's
 * stream waits on an event, never the host. gpucore_token_data_next hands out the
 * batch staged by the previous call and stages the next one, so the copy of batch
 * k + 1 overlaps step k. The CPU backend runs the same code (its streams are
 * asynchronous too).
 *
 * Resume: gpucore_token_data_position gives the index of the batch the next call of
 * gpucore_token_data_next returns; gpucore_token_data_seek to that index in a new
 * dataset over the same files and options gives the same batches from there on. */

typedef struct gpucore_token_data gpucore_token_data;

typedef enum gpucore_token_layout {
    GPUCORE_TOKEN_LAYOUT_SHIFTED = 0, /* input_ids [B, T] = window[0..T), labels [B, T] = window[1..T] */
    GPUCORE_TOKEN_LAYOUT_WINDOW = 1   /* input_ids = labels = the windows, [B, T + 1] */
} gpucore_token_layout;

typedef struct gpucore_token_data_options {
    int64_t struct_size;   /* sizeof(gpucore_token_data_options) */
    int64_t batch_size;    /* windows per batch (B), >= 1; default 8 */
    int64_t seq_len;       /* tokens per row of input_ids (T), >= 1; default 1024 */
    uint64_t seed;         /* shuffle seed; default 0 */
    int32_t shuffle;       /* 1: a new permutation each epoch (default); 0: file order */
    int32_t dtype;         /* gpucore_dtype of input_ids and labels: GPUCORE_I32 (default) or GPUCORE_I64 */
    int32_t rank;          /* this process's rank, 0 <= rank < world_size; default 0 */
    int32_t world_size;    /* ranks sharing the data, >= 1; default 1 */
    int64_t vocab_size;    /* > 0: a token >= vocab_size fails the batch holding it; 0 (default): no check */
    int32_t layout;        /* gpucore_token_layout; default GPUCORE_TOKEN_LAYOUT_SHIFTED */
    int32_t reserved;      /* 0 */
} gpucore_token_data_options;

GPUCORE_API gpucore_status gpucore_token_data_options_default(gpucore_token_data_options *opts);

/* Open `count` token files (count >= 1) for batches on ctx. Every file is mapped and
 * checked before anything is returned; a dataset with no complete batch
 * (batches_per_epoch 0) is refused with GPUCORE_ERR_INVALID_ARGUMENT. The first batch
 * is staged at once. Close with gpucore_token_data_close. */
GPUCORE_API gpucore_status gpucore_token_data_open(gpucore_context *ctx, const char *const *paths, int64_t count,
                                                   const gpucore_token_data_options *opts, gpucore_token_data **out);
/* Waits for the dataset's copies, then frees its buffers and unmaps its files (NULL: no-op).
 * Tensors handed out by gpucore_token_data_next stay valid. */
GPUCORE_API gpucore_status gpucore_token_data_close(gpucore_token_data *data);

/* Sizes: tokens in all files, windows, and batches per epoch for this rank (each may be NULL). */
GPUCORE_API gpucore_status gpucore_token_data_sizes(const gpucore_token_data *data, int64_t *tokens, int64_t *windows,
                                                    int64_t *batches_per_epoch);

/* The next batch: new tensors input_ids and labels, [batch_size, seq_len] (or
 * [batch_size, seq_len + 1] in the window layout; owned by the
 * caller: destroy them), ready for work queued on `stream` (NULL: current stream) after
 * this call; use on another stream needs an event (or gpucore_tensor_record_stream and
 * a wait). Then stages the batch after it. A batch with a token past vocab_size fails
 * with GPUCORE_ERR_CORRUPT_FILE naming file and position; the position still advances
 * past it. epoch and step (each may be NULL) receive the batch's epoch and step. */
GPUCORE_API gpucore_status gpucore_token_data_next(gpucore_token_data *data, gpucore_stream *stream,
                                                   gpucore_tensor **input_ids, gpucore_tensor **labels,
                                                   int64_t *epoch, int64_t *step);

/* The index (over all epochs) of the batch the next gpucore_token_data_next returns. */
GPUCORE_API gpucore_status gpucore_token_data_position(const gpucore_token_data *data, int64_t *batch_index);
/* Make batch_index (>= 0) the next batch; the batch staged before is dropped. */
GPUCORE_API gpucore_status gpucore_token_data_seek(gpucore_token_data *data, int64_t batch_index);

/* The window numbers (batch_size of them, see "Windows" above) of this rank's batch
 * batch_index, in row order: what input_ids row b of that batch is taken from. */
GPUCORE_API gpucore_status gpucore_token_data_batch_windows(gpucore_token_data *data, int64_t batch_index,
                                                            int64_t *windows);

/* Write `count` tokens (each >= 0, count <= INT32_MAX) to `path` in llm.c's format above:
 * version 1 (uint16) when every token is below 65536, else version 2 (uint32). A file
 * that cannot be written fully is removed (GPUCORE_ERR_IO). */
GPUCORE_API gpucore_status gpucore_token_data_write(const char *path, const int32_t *tokens, int64_t count);

/* ------------------------------------------------- collective communication
 *
 * A communicator joins `size` ranks (processes, or devices of one process) for
 * collectives: NCCL on CUDA contexts, MPI on CPU contexts (where MPI carries the
 * data). Rules common to every collective below:
 *   - Tensors are contiguous, on the communicator's context, of dtype f32, f64,
 *     f16, bf16 or i32, and every rank passes the same dtype and counts. Counts
 *     are element counts (numel), never bytes.
 *   - Each call runs on the communicator's own stream (gpucore_comm_stream; on the
 *     CPU backend on `stream` itself, see there). It starts after the work already
 *     queued on `stream` (NULL: the current stream) and after earlier collectives,
 *     and work queued on `stream` afterwards waits for it (events, no host wait).
 *   - In place: allreduce with out == in; reduce-scatter with out the rank-th
 *     slice of in; all-gather with in the rank-th slice of out (NCCL's convention).
 *   - Each call gets the next sequence number (1, 2, ...), readable with
 *     gpucore_comm_last_sequence, and can be waited on with gpucore_comm_wait.
 *   - Host waits: no collective and no reducer call blocks the host until data has
 *     moved, except gpucore_comm_wait, gpucore_comm_destroy, gpucore_ddp_destroy and
 *     the set-up calls gpucore_ddp_create and gpucore_ddp_grad_view (each says so below). Completion is tracked with events on the communicator's
 *     stream, never a host callback per collective.
 *   - Failure: a call that has not completed `timeout` seconds after it started
 *     (gpucore_comm_set_timeout, env GPUCORE_COMM_TIMEOUT, default 600) fails the
 *     communicator: on CUDA a watchdog polls NCCL's asynchronous error and aborts
 *     the NCCL communicator on error or timeout; on MPI the non-blocking call is
 *     abandoned. Every later call and wait returns GPUCORE_ERR_COMM with a message
 *     naming the rank, operation, sequence number, count and dtype. After that the
 *     job cannot recover (a dead MPI peer is fatal to MPI): report, then exit the
 *     process (or MPI_Abort) and relaunch from a checkpoint.
 *   - Destroy communicators before their context. Collectives on one communicator
 *     must be issued in the same order on every rank.
 * NCCL_DEBUG and the other NCCL_* variables pass through to NCCL; GPUCORE_LOG=debug
 * logs every collective (rank, op, sequence number, count, dtype). */

typedef struct gpucore_comm gpucore_comm;

typedef enum gpucore_reduce_op {
    GPUCORE_REDUCE_SUM = 0,
    GPUCORE_REDUCE_AVG = 1, /* sum / size (integer division for i32) */
    GPUCORE_REDUCE_MAX = 2,
    GPUCORE_REDUCE_MIN = 3
} gpucore_reduce_op;

/* Bytes of a unique id (NCCL's ncclUniqueId). */
#define GPUCORE_COMM_ID_BYTES 128

/* Path 1 and 4, launched by mpirun or srun (MPI initialised with MPI_Init_thread
 * if the program has not; then finalized at exit by the library — a program that
 * initialised MPI itself finalizes it itself). Every process of MPI_COMM_WORLD
 * calls this with its context; rank and size are MPI's. CUDA: rank 0 makes the
 * NCCL unique id and MPI broadcasts it; two ranks naming the same GPU are
 * rejected on every rank (GPUCORE_ERR_INVALID_ARGUMENT) instead of hanging — map
 * local ranks to devices, e.g. "cuda:<OMPI_COMM_WORLD_LOCAL_RANK>". CPU: the
 * collectives run over a duplicate of MPI_COMM_WORLD. NOT_SUPPORTED without MPI. */
GPUCORE_API gpucore_status gpucore_comm_create_mpi(gpucore_context *ctx, gpucore_comm **out);
/* Path 2 (any launcher): one rank makes an id, ships it to the others however it
 * likes, and every rank calls gpucore_comm_create with it. CUDA only (the CPU
 * backend's transport is MPI: use gpucore_comm_create_mpi). id_len must be
 * GPUCORE_COMM_ID_BYTES. Gives up after the communicator timeout if peers never join. */
GPUCORE_API gpucore_status gpucore_comm_unique_id(gpucore_context *ctx, void *id, size_t id_len);
GPUCORE_API gpucore_status gpucore_comm_create(gpucore_context *ctx, const void *id, size_t id_len, int rank, int size,
                                               gpucore_comm **out);
/* Path 3: one process drives n devices; comms[i] is rank i on ctxs[i]. The contexts
 * must be on distinct CUDA devices (a repeated device is rejected). On the CPU
 * backend only n == 1 is possible: a 1-rank communicator that needs no MPI. When
 * one thread issues collectives on several of these communicators, wrap each
 * round in gpucore_comm_group_start/end (else NCCL can deadlock). */
GPUCORE_API gpucore_status gpucore_comm_create_local(gpucore_context *const *ctxs, int n, gpucore_comm **comms);
/* A comm group on the calling thread (groups nest; the outermost end counts; an end
 * without a start is GPUCORE_ERR_INVALID_ARGUMENT). NCCL starts a group's
 * collectives only at its end, so between start and end, on every backend alike:
 *   - collectives run on the communicator's group stream, after what was queued so
 *     far on the given stream and on the communicator's stream; what reads their
 *     results must be queued after gpucore_comm_group_end. The DDP reducer
 *     (mark_ready, finish) and the ZeRO trainer (zero_mark_ready) do this themselves:
 *     their casts back, copies back and shard updates are queued at the group's end.
 *     One DDP step or ZeRO round per group; gpucore_zero_step is refused inside one.
 *   - gpucore_comm_wait on a collective of the group, gpucore_comm_destroy of a
 *     communicator in it, and gpucore_ddp_destroy / gpucore_zero_destroy of a reducer
 *     or trainer with reductions in it are refused (GPUCORE_ERR_INVALID_ARGUMENT);
 *   - memory freed (tensor destroy, gpucore_device_free, gpucore_host_free) stays
 *     allocated until the group ends, then is freed in stream order.
 * CUDA: a stream that waits for a grouped collective (the stream passed to it, and any
 * stream that waits on an event recorded there afterwards) takes only event records,
 * waits and host callbacks until the group ends (they are issued after it); a kernel,
 * copy, matmul, conv, attention or synchronize on it is refused with
 * GPUCORE_ERR_INVALID_ARGUMENT, as it would run before the collective. The CPU backend
 * holds nothing back (MPI runs each collective in stream order), so such work runs
 * there; portable code queues it after the group's end. gpucore_comm_group_end waits
 * for NCCL to queue the group, for at most the longest timeout of its communicators. */
GPUCORE_API gpucore_status gpucore_comm_group_start(void);
GPUCORE_API gpucore_status gpucore_comm_group_end(void);
/* Waits for the communicator's stream (bounded by its timeout), then frees it. */
GPUCORE_API gpucore_status gpucore_comm_destroy(gpucore_comm *comm);

GPUCORE_API int gpucore_comm_rank(const gpucore_comm *comm);   /* -1 for an invalid handle */
GPUCORE_API int gpucore_comm_size(const gpucore_comm *comm);   /* -1 for an invalid handle */
GPUCORE_API gpucore_status gpucore_comm_context(const gpucore_comm *comm, gpucore_context **ctx);
/* The communicator's own stream (owned by it; do not destroy). CPU backend: a
 * collective given a caller's stream runs on that stream (a synchronizing caller
 * runs it on its own thread); the stream returned here is ordered after every
 * collective issued before this call, so ask for it again after issuing more. */
GPUCORE_API gpucore_status gpucore_comm_stream(gpucore_comm *comm, gpucore_stream **out);
/* Seconds a collective may run before the communicator is failed; > 0. */
GPUCORE_API gpucore_status gpucore_comm_set_timeout(gpucore_comm *comm, double seconds);

/* out = op over ranks of in (same numel). */
GPUCORE_API gpucore_status gpucore_comm_allreduce(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in,
                                                  gpucore_reduce_op op, gpucore_stream *stream);
/* in holds size * numel(out) elements; out = the rank-th slice of the reduction. */
GPUCORE_API gpucore_status gpucore_comm_reduce_scatter(gpucore_comm *comm, gpucore_tensor *out,
                                                       const gpucore_tensor *in, gpucore_reduce_op op,
                                                       gpucore_stream *stream);
/* out holds size * numel(in) elements: rank r's in at slice r. */
GPUCORE_API gpucore_status gpucore_comm_all_gather(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in,
                                                   gpucore_stream *stream);
/* out = root's in on every rank. in is read on root only (other ranks may pass NULL);
 * out == in is in place. */
GPUCORE_API gpucore_status gpucore_comm_broadcast(gpucore_comm *comm, gpucore_tensor *out, const gpucore_tensor *in,
                                                  int root, gpucore_stream *stream);
/* Work queued on `stream` after this waits until every rank reached it. */
GPUCORE_API gpucore_status gpucore_comm_barrier(gpucore_comm *comm, gpucore_stream *stream);
/* Sequence number of the last collective issued on comm (0: none yet). */
GPUCORE_API uint64_t gpucore_comm_last_sequence(const gpucore_comm *comm);
/* Block the host until collective `seq` (0: every one issued so far) completed
 * (the one host wait of the collectives API besides destroy).
 * GPUCORE_OK; GPUCORE_ERR_COMM if the communicator failed (message says how);
 * GPUCORE_ERR_TIMEOUT if timeout_s (< 0: no limit) passed first — the collective
 * is still in flight and may be waited on again. */
GPUCORE_API gpucore_status gpucore_comm_wait(gpucore_comm *comm, uint64_t seq, double timeout_s);

/* ------------------------------------------------ data-parallel gradient reducer
 *
 * DDP-style bucketed allreduce of gradients. Register the gradient tensors in
 * parameter order; buckets are filled in reverse order (the last parameter's
 * gradient, produced first by backward, goes into bucket 0): bucket 0 closes once
 * it holds >= first_bucket_bytes, the others at >= bucket_bytes. During backward,
 * call gpucore_ddp_mark_ready(i, stream) as soon as gradient i is produced on
 * `stream`: it copies (and pre-divides, when averaging) the gradient into its
 * bucket on that stream; when every gradient of a bucket is in, the bucket's
 * allreduce is queued on the communicator's stream at once, overlapping the rest of
 * backward. Buckets always launch in index order, on every rank. gpucore_ddp_finish
 * orders the copy of the results back into the gradients after all of them, on the
 * stream (events only; the host does not wait).
 * Gradients: contiguous, one dtype (f32, f16 or bf16), on the communicator's
 * context, distinct. Every rank registers the same shapes in the same order and
 * marks every gradient once per synchronised step.
 * ZeRO-1 slots in at the bucket level (reduce-scatter a bucket instead of
 * allreducing it, update the local shard, all-gather it back). */

typedef struct gpucore_ddp gpucore_ddp;

typedef struct gpucore_ddp_options {
    int64_t struct_size;        /* sizeof(gpucore_ddp_options) */
    int64_t first_bucket_bytes; /* default 1 MiB */
    int64_t bucket_bytes;       /* default 25 MiB */
    int32_t wire_dtype;         /* -1 (default): the gradients' dtype; GPUCORE_BF16 or GPUCORE_F16:
                                   buckets are cast to it for the allreduce (compression) and back */
    int32_t average;            /* 1 (default): gradients are divided by the world size before the sum */
    int32_t trace;              /* 1: record the event trace read by gpucore_ddp_trace (default 0) */
} gpucore_ddp_options;

/* Fill opts with the defaults (sets struct_size). */
GPUCORE_API void gpucore_ddp_options_default(gpucore_ddp_options *opts);
/* opts NULL: defaults. The reducer keeps pointers to the gradient handles: keep them alive.
 * Set-up: its buckets come from the current stream's pool, which it synchronizes once (a host
 * wait), so that the comm stream and whichever streams mark gradients may write them. */
GPUCORE_API gpucore_status gpucore_ddp_create(gpucore_comm *comm, gpucore_tensor *const *grads, int count,
                                              const gpucore_ddp_options *opts, gpucore_ddp **out);
/* Waits on the host for outstanding reductions (a host wait: bounded by the
 * communicator's timeout), then frees the buckets. */
GPUCORE_API gpucore_status gpucore_ddp_destroy(gpucore_ddp *ddp);
GPUCORE_API gpucore_status gpucore_ddp_bucket_count(const gpucore_ddp *ddp, int *count);
/* Bucket b holds gradients grad_begin .. grad_end-1 (bytes: their total size). */
GPUCORE_API gpucore_status gpucore_ddp_bucket_info(const gpucore_ddp *ddp, int bucket, int *grad_begin,
                                                   int *grad_end, int64_t *bytes);
/* 1: the following steps only accumulate locally (mark_ready and finish do nothing);
 * 0: synchronise again. Gradient accumulation: let backward add into the gradients
 * under no_sync, and turn it off for the last micro-batch. */
GPUCORE_API gpucore_status gpucore_ddp_set_no_sync(gpucore_ddp *ddp, int no_sync);
/* ---- gradients as views into their buckets (no copy in, no copy back) ----
 * A new view (the caller destroys it) of gradient `grad`'s place in its bucket,
 * with the gradient's shape, holding its current value (copied on the current
 * stream, which this set-up call then synchronizes: a host wait). From then on that view IS gradient `grad` for the reducer: produce (or
 * accumulate) the gradient into the view, mark_ready reduces it in place (dividing
 * it in place first when averaging: the same bits as the copying path) and finish
 * leaves the result there; the tensor registered at create is no longer read or
 * written. Like PyTorch DDP's gradient_as_bucket_view. Not between mark_ready and
 * finish (GPUCORE_ERR_INVALID_ARGUMENT). */
GPUCORE_API gpucore_status gpucore_ddp_grad_view(gpucore_ddp *ddp, int grad, gpucore_tensor **out);
/* Gradient `grad` is complete on `stream` (NULL: current stream). */
GPUCORE_API gpucore_status gpucore_ddp_mark_ready(gpucore_ddp *ddp, int grad, gpucore_stream *stream);
/* Queues, on `stream` (NULL: current), the copy of the reduced values back into
 * the gradients, ordered after every bucket's allreduce by an event: it returns
 * without waiting for the collectives (synchronize `stream`, or read the gradients
 * on it, to see the results). GPUCORE_ERR_COMM if the communicator already failed;
 * a failure still in flight is reported by the next reducer or communicator call,
 * gpucore_comm_wait, or gpucore_ddp_destroy's wait. Every gradient must have been
 * marked ready (else GPUCORE_ERR_INVALID_ARGUMENT names the first that was not).
 * Next step's mark_ready calls are ordered after this copy. */
GPUCORE_API gpucore_status gpucore_ddp_finish(gpucore_ddp *ddp, gpucore_stream *stream);

typedef enum gpucore_ddp_trace_kind {
    GPUCORE_DDP_TRACE_READY = 0,  /* index: gradient; mark_ready was called (host time) */
    GPUCORE_DDP_TRACE_LAUNCH = 1, /* index: bucket; its allreduce was queued (host time) */
    GPUCORE_DDP_TRACE_START = 2,  /* index: bucket; the communicator's stream began its reduction */
    GPUCORE_DDP_TRACE_DONE = 3,   /* index: bucket; its reduction completed on the stream */
    GPUCORE_DDP_TRACE_FINISH = 4  /* index: -1; finish returned */
} gpucore_ddp_trace_kind;

typedef struct gpucore_ddp_trace_event {
    int32_t kind;    /* gpucore_ddp_trace_kind */
    int32_t index;
    int64_t step;    /* synchronised steps finished before it */
    int64_t time_ns; /* CLOCK_MONOTONIC */
} gpucore_ddp_trace_event;

/* Events recorded since the last call (trace option on), in the order they
 * happened; up to max are copied, *count tells how many; the rest is dropped. */
GPUCORE_API gpucore_status gpucore_ddp_trace(gpucore_ddp *ddp, gpucore_ddp_trace_event *events, int max,
                                             int *count);

/* ---- ZeRO: sharded data-parallel training (src/train/zero*.c) ----
 *
 * A sharded trainer over a communicator of N ranks (ZeRO, Rajbhandari et al. 2020).
 * Parameters are grouped into buckets in reverse order (the last parameters, whose
 * gradients backward produces first, are bucket 0): a bucket closes at >=
 * bucket_bytes, where the dtype changes, or where options.units changes. Bucket b's
 * parameters are flattened (numel_b elements) and padded with zeros to N * shard_b,
 * shard_b = ceil(numel_b / N); rank r owns elements [r * shard_b, (r+1) * shard_b) of
 * every bucket (with one bucket: a contiguous 1/N slice of the flattened model).
 *   stage 0: plain data parallelism (every rank holds everything; buckets allreduced).
 *   stage 1: the f32 master weights and AdamW/SGD state exist only for the rank's
 *            shards; gradients are reduce-scattered per bucket as soon as the bucket
 *            is complete; each rank steps its shard with the fused optimizer and
 *            the parameters are all-gathered in their own (compute) dtype.
 *   stage 2: as 1, and the full gradient of a bucket lives only from its first
 *            gpucore_zero_grad to its reduce-scatter: afterwards only the f32 shard
 *            of the gradient survives.
 *   stage 3: as 2, and the parameters themselves are sharded: a bucket's full
 *            parameters exist only between gpucore_zero_gather and
 *            gpucore_zero_release (gathered on the communicator's stream, so a
 *            gather issued one bucket ahead overlaps the current bucket's compute;
 *            gpucore_zero_attach_ckpt does this around each executor segment).
 * Per step:  for each parameter: g = gpucore_zero_grad(i) (zero at the start of a
 * round), backward writes or adds the gradient into g, then gpucore_zero_mark_ready(i);
 * then gpucore_zero_step. The step averages the gradients over ranks (option average),
 * unscales them with the loss scaler when one is given (found-inf and the squared
 * gradient norm of the local shards are combined across ranks in one 2-element
 * allreduce), clips by the global norm when max_grad_norm > 0, runs the optimizer and
 * puts the new parameters in place. Afterwards call gpucore_loss_scaler_update as
 * without sharding. Gradient accumulation: stages 0/1 with no_sync on accumulate in
 * the full gradients without communication; stages 2/3 reduce-scatter every
 * micro-batch and accumulate in the f32 gradient shard (no_sync has no effect there).
 * Every rank creates the trainer with the same parameter shapes, dtypes, initial
 * values and options, and makes the same calls in the same order. */

typedef struct gpucore_zero gpucore_zero;

typedef struct gpucore_zero_options {
    int64_t struct_size;     /* sizeof(gpucore_zero_options) */
    int32_t stage;           /* 0, 1 (default), 2 or 3 */
    int32_t average;         /* 1 (default): gradients are the mean over ranks; 0: the sum */
    int64_t bucket_bytes;    /* default 25 MiB (of the parameters' dtype) */
    double max_grad_norm;    /* > 0: clip by the global L2 norm (torch's rule); 0 (default): no clipping */
    const int32_t *units;    /* NULL, or one entry per parameter: a bucket also closes wherever
                                units[i] != units[i-1] (e.g. the executor segment of each parameter,
                                so a stage-3 gather holds exactly one segment); read at create */
} gpucore_zero_options;

/* Fill opts with the defaults (sets struct_size). */
GPUCORE_API void gpucore_zero_options_default(gpucore_zero_options *opts);
/* params: `count` contiguous f32/f16/bf16 tensors on the communicator's context
 * (the model's parameters, in forward order). Stages 0-2 update them in place at
 * each step (keep them alive). Stage 3 copies the rank's shard out of them at
 * create and never touches them again (free them): read parameters through
 * gpucore_zero_param. cfg: the optimizer (AdamW or SGD), as for
 * gpucore_optimizer_create. Waits for the parameters' pending work. */
GPUCORE_API gpucore_status gpucore_zero_create(gpucore_comm *comm, gpucore_tensor *const *params, int count,
                                               const gpucore_optimizer_config *cfg, const gpucore_zero_options *opts,
                                               gpucore_zero **out);
/* Waits for outstanding collectives, then frees everything the trainer holds. */
GPUCORE_API gpucore_status gpucore_zero_destroy(gpucore_zero *zero);
GPUCORE_API gpucore_status gpucore_zero_bucket_count(const gpucore_zero *zero, int *count);
/* Bucket b holds parameters param_begin .. param_end-1: numel elements, shard of them
 * (padded) per rank. */
GPUCORE_API gpucore_status gpucore_zero_bucket_info(const gpucore_zero *zero, int bucket, int *param_begin,
                                                    int *param_end, int64_t *numel, int64_t *shard);
/* The bucket parameter `param` belongs to. */
GPUCORE_API gpucore_status gpucore_zero_bucket_of(const gpucore_zero *zero, int param, int *bucket);
/* The gradient tensor of parameter `param` (borrowed, the parameter's shape and
 * dtype) for backward to write or add into; all zeros at the start of a round.
 * Stages 2/3: valid until the bucket's reduce-scatter is launched by mark_ready. */
GPUCORE_API gpucore_status gpucore_zero_grad(gpucore_zero *zero, int param, gpucore_stream *stream,
                                             gpucore_tensor **grad);
/* Gradient `param` is complete on `stream` (NULL: current). When every gradient of
 * the next bucket in index order is in, its reduce-scatter (stage 0: allreduce) is
 * queued on the communicator's stream at once, overlapping the rest of backward. */
GPUCORE_API gpucore_status gpucore_zero_mark_ready(gpucore_zero *zero, int param, gpucore_stream *stream);
/* Stages 0/1: 1 makes mark_ready do nothing (local accumulation); 0 synchronises
 * again. Switch between rounds only. Accepted and ignored at stages 2/3. */
GPUCORE_API gpucore_status gpucore_zero_set_no_sync(gpucore_zero *zero, int no_sync);
/* The optimizer step described above, on `stream` (NULL: current). scaler: NULL or
 * the loss scaler whose scale the loss was multiplied by. Waits on the host for the
 * reductions (bounded by the communicator's timeout: GPUCORE_ERR_COMM on failure).
 * Every gradient must have been marked in every round since the last step. */
GPUCORE_API gpucore_status gpucore_zero_step(gpucore_zero *zero, gpucore_loss_scaler *scaler,
                                             gpucore_stream *stream);
/* The global gradient norm of the last step (0-d f32, before clipping; owned by the
 * trainer) — computed only when clipping is on (else GPUCORE_ERR_INVALID_ARGUMENT). */
GPUCORE_API gpucore_status gpucore_zero_grad_norm(gpucore_zero *zero, gpucore_tensor **norm);
/* The optimizer over the rank's shards (stage 0: over the parameters); owned by the
 * trainer: use it for gpucore_optimizer_lr / step_count, not for stepping. */
GPUCORE_API gpucore_status gpucore_zero_optimizer(gpucore_zero *zero, gpucore_optimizer **opt);
/* Stage 3: all-gather bucket b's parameters on the communicator's stream, after the
 * previous step's update (not after other work on any compute stream), so a gather
 * issued one bucket ahead overlaps the current bucket's compute. Gathering a
 * gathered bucket is a no-op. Stages 0-2: a no-op. */
GPUCORE_API gpucore_status gpucore_zero_gather(gpucore_zero *zero, int bucket);
/* Stage 3: free bucket b's gathered parameters after the work queued so far on
 * `stream` (NULL: current) and on the communicator's stream; the views from
 * gpucore_zero_param become invalid. Release every bucket before gpucore_zero_step.
 * Stages 0-2: a no-op. */
GPUCORE_API gpucore_status gpucore_zero_release(gpucore_zero *zero, int bucket, gpucore_stream *stream);
/* Parameter `param` (borrowed): the caller's tensor at stages 0-2; at stage 3 a view
 * into its gathered bucket, valid until gpucore_zero_release, and work queued on
 * `stream` (NULL: current) from now on waits for the gather (not gathered:
 * GPUCORE_ERR_INVALID_ARGUMENT). */
GPUCORE_API gpucore_status gpucore_zero_param(gpucore_zero *zero, int param, gpucore_stream *stream,
                                              gpucore_tensor **out);

/* Stage 3 with the checkpoint executor (declared below): installs the executor's segment
 * hook (replacing any) so that before each segment's forward, recompute and backward its
 * bucket bucket_of_segment[s] is gathered and (forward and backward) the bucket of the
 * segment that runs next (s+1 forward, s-1 backward) is prefetched, and after it the
 * bucket is released. -1: the segment has no parameters. Its segments read their parameters with
 * gpucore_zero_param and write gradients into gpucore_zero_grad (then mark_ready, e.g.
 * from the executor's grad-ready callback) — or are built-in segments bound with
 * gpucore_zero_bind_ckpt. nsegments must equal gpucore_ckpt_segment_count. The
 * trainer must outlive the executor's use (or call with ckpt's hook set to NULL to detach). */
typedef struct gpucore_ckpt gpucore_ckpt;
GPUCORE_API gpucore_status gpucore_zero_attach_ckpt(gpucore_zero *zero, gpucore_ckpt *ckpt,
                                                    const int32_t *bucket_of_segment, int64_t nsegments);
/* Built-in segments (linear, layer norm, attention and MLP blocks; not conv2d) under the
 * trainer, at any stage: params[i] / grads[i] (count entries each, as given to
 * gpucore_zero_create; a grads entry may be NULL) are the tensors bound to the
 * executor's segments as parameter i and its gradient when they were added. From now
 * on, in each segment call, a bound parameter is read through gpucore_zero_param
 * (stage 3: the gathered bucket, so combine with gpucore_zero_attach_ckpt) and, in
 * backward, a bound gradient is written into gpucore_zero_grad and marked ready when
 * the segment announces it (gpucore_ckpt_grad_ready; the executor's own grad-ready
 * callback is still called after). The bound tensors serve as keys only and are never
 * read again: at stage 3 destroy them after gpucore_zero_create, but add no segment
 * after that (a new tensor may reuse a destroyed handle). One executor per trainer;
 * destroying the trainer unbinds it. */
GPUCORE_API gpucore_status gpucore_zero_bind_ckpt(gpucore_zero *zero, gpucore_ckpt *ckpt, gpucore_tensor *const *params,
                                                  gpucore_tensor *const *grads);

/* Checkpoints of a trainer at stages 1-3 (stage 0: use gpucore_checkpoint_save), loadable
 * at any rank count, stage 1-3 and bucket layout with the same bucket sizes (the
 * same parameters, bucket_bytes and units: the layout does not depend on N).
 * Collective: every rank calls them, in the same order. A rank that fails returns
 * the error; the others may not see it (check every rank's status).
 * Sharded: rank r writes "<prefix>.rank<r>.safetensors" holding its shard of every
 * bucket's f32 master weights and optimizer state as "bucket.<b>.master",
 * "bucket.<b>.exp_avg", "bucket.<b>.exp_avg_sq" (SGD: "bucket.<b>.momentum_buffer"),
 * "optimizer.step", "optimizer.lr" and, on rank 0 with a scaler, "loss_scaler.scale",
 * "loss_scaler.growth_tracker"; metadata "zero.world_size", "zero.rank",
 * "zero.bucket_numel" (comma-separated). Rank 0 also writes "<prefix>.index.json":
 * the files, buckets and each parameter's bucket, offset, dtype and shape. Loading
 * reads the slices of the old ranks' files that make up this rank's new shards. */
GPUCORE_API gpucore_status gpucore_zero_save_sharded(gpucore_zero *zero, const char *prefix,
                                                     gpucore_loss_scaler *scaler);
GPUCORE_API gpucore_status gpucore_zero_load_sharded(gpucore_zero *zero, const char *prefix,
                                                     gpucore_loss_scaler *scaler);
/* Consolidated: the shards are all-gathered and rank 0 writes one file with the full
 * tensors: names[i] (parameter i in its dtype), "<names[i]>.master", "<names[i]>.exp_avg",
 * "<names[i]>.exp_avg_sq" (f32, the parameter's shape), "optimizer.step", "optimizer.lr"
 * and the scaler's as above. Loading (every rank reads the file) takes this rank's
 * slices of the f32 tensors and rebuilds the parameters from the master weights. */
GPUCORE_API gpucore_status gpucore_zero_save_consolidated(gpucore_zero *zero, const char *path,
                                                          const char *const *names, gpucore_loss_scaler *scaler);
GPUCORE_API gpucore_status gpucore_zero_load_consolidated(gpucore_zero *zero, const char *path,
                                                          const char *const *names, gpucore_loss_scaler *scaler);

/* What this rank holds, in bytes, counted from the tensors it allocated. With P the
 * parameter count, e their element size, S the rank's shard elements (sum of shard_b)
 * and k = 2 for AdamW (exp_avg, exp_avg_sq; SGD: 1 with momentum, else 0):
 *   stage 0: params P·e, grads P·e, state P·4·k (+ P·4 master for f16/bf16)
 *   stage 1: params P·e, grads N·S·e (the full, padded buckets) + S·4 (shard), state S·4·(k+1)
 *   stage 2: params P·e, grads S·4 (+ live_grad_bytes during backward), state S·4·(k+1)
 *   stage 3: params S·e (+ gathered_bytes while gathered), grads S·4, state S·4·(k+1) */
typedef struct gpucore_zero_stats {
    int64_t struct_size;      /* sizeof(gpucore_zero_stats) */
    int32_t stage, rank, size, buckets;
    int64_t numel;            /* P: parameter elements of the model */
    int64_t shard_numel;      /* S: this rank's shard elements (padded) */
    int64_t param_bytes;      /* parameters held persistently */
    int64_t grad_bytes;       /* gradient bytes held persistently (full and shards) */
    int64_t state_bytes;      /* optimizer state: f32 master + moments */
    int64_t live_grad_bytes;  /* stages 2/3: full bucket gradients alive right now */
    int64_t gathered_bytes;   /* stage 3: gathered parameter bytes alive right now */
} gpucore_zero_stats;

GPUCORE_API gpucore_status gpucore_zero_get_stats(const gpucore_zero *zero, gpucore_zero_stats *stats);

/* ------------------------------------------------- gradient checkpointing
 *
 * A segment executor: training code registered as an ordered chain of segments
 * (layers or blocks; each takes one tensor and returns one), run forward and then
 * backward by the executor, which decides per segment whether the tensors its
 * backward needs are kept from the forward or recomputed during backward
 * (activation checkpointing, Chen et al. 2016). There is no autograd tape: each
 * segment brings its own backward.
 *
 *   gpucore_ckpt_create -> gpucore_ckpt_add_* (in order) -> gpucore_ckpt_set_policy
 *   per step: gpucore_ckpt_forward(x) -> y;  loss and dy from y;  gpucore_ckpt_backward(dy)
 *
 * Segments. A forward callback reads x and creates y (a new tensor, or a view; the
 * executor takes ownership of *y). Whatever its backward will need it saves with
 * gpucore_ckpt_save(call, t) — never by keeping pointers — and its backward reads
 * them back by index with gpucore_ckpt_saved(call, i). The backward callback gets
 * dy (y's shape) and dx, a tensor of x's shape and dtype made by the executor that
 * it must overwrite (dx is NULL for the first segment when the caller did not ask
 * for the input gradient); it writes its parameters' gradients itself (the
 * built-in segments overwrite theirs) and may announce each one as soon as it is
 * complete with gpucore_ckpt_grad_ready (for gpucore_ddp_mark_ready). Random
 * numbers come from gpucore_ckpt_rng, which the executor replays on recompute and
 * in backward, so a recomputed dropout draws the same mask. Built-in segments
 * (linear, conv2d, layer norm, dropout, residual blocks) need no callbacks.
 *
 * Policies decide, per segment: KEPT (its saved tensors are held from the forward
 * to its backward), CHECKPOINT (only its input is held; in backward the segments
 * from it up to the next checkpoint or kept segment are run forward again, saving
 * this time, and then run backward) or RECOMPUTED (inside such a group). For n
 * equal segments of activation size s, keep-all holds about n·s, every-k about
 * (n/k + k)·s, and √n about 2·√n·s (plus parameters and workspace).
 *
 * Determinism: a recompute must produce the shape and dtype the forward produced,
 * save the same number of tensors with the same shapes and dtypes, and draw the
 * same number of random counters; any difference is an error naming the segment.
 * With deterministic ops (every op of this library is) the gradients under every
 * policy are bitwise identical to keep-all.
 *
 * Work runs on the context's current stream of the calling thread; callbacks get
 * it as `stream`. Memory accounting uses the executor's own watermark on the
 * allocator, restarted around each segment's forward and backward; the allocator's
 * peak statistics are never reset (they are the caller's: a step's peak shows in
 * gpucore_memory_get_stats as it would without the executor). A second thread
 * allocating on the same context at the same time blurs the executor's figures
 * (not the results).
 * Errors: a callback that returns a status other than GPUCORE_OK stops the step;
 * the executor returns that status with the message "checkpoint: segment 'name'
 * (index) forward|recompute|backward: <the callback's message>", releases
 * everything the step held (saved tensors, stored inputs, packed values, y), and
 * is ready for the next forward.
 */

typedef struct gpucore_ckpt gpucore_ckpt;
/* What the executor passes to callbacks for the call in progress; valid only
 * during that callback. */
typedef struct gpucore_ckpt_call gpucore_ckpt_call;

/* x: the segment input (do not destroy it). *y: set to the output, which the
 * executor owns from then on. */
typedef gpucore_status (*gpucore_ckpt_forward_fn)(gpucore_ckpt_call *call, const gpucore_tensor *x,
                                                  gpucore_tensor **y, gpucore_stream *stream, void *user);
/* dy: gradient of the output (read only). dx: overwrite with the input gradient; NULL when not wanted. */
typedef gpucore_status (*gpucore_ckpt_backward_fn)(gpucore_ckpt_call *call, const gpucore_tensor *dy,
                                                   gpucore_tensor *dx, gpucore_stream *stream, void *user);

/* Create an empty executor on ctx; name (may be NULL) appears in messages. */
GPUCORE_API gpucore_status gpucore_ckpt_create(gpucore_context *ctx, const char *name, gpucore_ckpt **out);
/* Release the executor and whatever a step in progress holds (after waiting for
 * the context's work). The tensors given to gpucore_ckpt_add_* stay the caller's. */
GPUCORE_API gpucore_status gpucore_ckpt_destroy(gpucore_ckpt *ckpt);
/* Number of top-level segments (a residual block counts as one); -1 for an invalid handle. */
GPUCORE_API int64_t gpucore_ckpt_segment_count(const gpucore_ckpt *ckpt);

/* A segment of your own. name: non-empty, used in messages (copied). */
GPUCORE_API gpucore_status gpucore_ckpt_add_custom(gpucore_ckpt *ckpt, const char *name, gpucore_ckpt_forward_fn forward,
                                                   gpucore_ckpt_backward_fn backward, void *user);
/* y = act(x·Wᵀ + bias) (gpucore_linear_forward). act: NONE, RELU or GELU_TANH.
 * bias, db may be NULL (db needs bias). dw [out, in], db [out] receive the
 * gradients (overwritten) and are announced as params 0 and 1. Saves x, plus the
 * pre-activation (GELU) or y (ReLU). The tensors must outlive the executor. */
GPUCORE_API gpucore_status gpucore_ckpt_add_linear(gpucore_ckpt *ckpt, const char *name, const gpucore_tensor *w,
                                                   const gpucore_tensor *bias, gpucore_activation act,
                                                   gpucore_tensor *dw, gpucore_tensor *db);
/* y = act(conv(x, w) + bias) (gpucore_conv_forward). opts: NULL for defaults (its
 * activation field is ignored: pass act, NONE or RELU). Saves x (and y for ReLU).
 * Gradients dw, db (params 0, 1; db NULL when bias is NULL) are overwritten. */
GPUCORE_API gpucore_status gpucore_ckpt_add_conv2d(gpucore_ckpt *ckpt, const char *name, const gpucore_tensor *w,
                                                   const gpucore_tensor *bias, const gpucore_conv_options *opts,
                                                   gpucore_activation act, gpucore_tensor *dw, gpucore_tensor *db);
/* LayerNorm over the last dim (gpucore_layer_norm); gamma/beta and dgamma/dbeta
 * both NULL or both given (params 0, 1). Saves x, mean, rstd. */
GPUCORE_API gpucore_status gpucore_ckpt_add_layer_norm(gpucore_ckpt *ckpt, const char *name, const gpucore_tensor *gamma,
                                                       const gpucore_tensor *beta, double eps, gpucore_tensor *dgamma,
                                                       gpucore_tensor *dbeta);
/* Inverted dropout with probability p (gpucore_dropout), its (seed, offset) drawn
 * with gpucore_ckpt_rng so recompute and backward replay the same mask. Saves nothing. */
GPUCORE_API gpucore_status gpucore_ckpt_add_dropout(gpucore_ckpt *ckpt, const char *name, double p);

/* ---- transformer blocks: a pre-norm transformer layer is two built-in segments ----
 *
 * Both take and return x [B, S, D] (contiguous, one float dtype for x and every
 * weight; norm weights may be any float dtype) and add their branch to it:
 *   attention block:  y = x + out_proj(attention(rope(split(qkv_proj(norm(x))))))
 *   MLP block:        y = x + fc2(act(fc1(norm(x))))
 * norm is RMSNorm or LayerNorm over D. Parameter gradients are overwritten (not
 * accumulated) and announced in the order of the fields; a NULL gradient is not
 * computed. Projections are gpucore_linear_* (or gpucore_lora_* with an adapter),
 * attention is gpucore_attention_* (O(S) memory), RoPE gpucore_rotary_embedding
 * in place on the q and k views, SwiGLU gpucore_glu. The tensors must outlive the
 * executor; the struct itself is copied. */
typedef struct gpucore_ckpt_attention_block {
    int64_t struct_size;        /* sizeof(gpucore_ckpt_attention_block) */
    int32_t layer_norm;         /* 1: LayerNorm, 0: RMSNorm (default) */
    int32_t heads, kv_heads;    /* kv_heads 0 (default): heads; fewer: grouped-query attention */
    int32_t is_causal;          /* default 1 */
    int32_t rope_interleaved;   /* RoPE pairs: 1 (2p, 2p+1), 0 (p, p+R/2) (default) */
    int32_t reserved;
    double eps;                 /* norm epsilon, default 1e-5 */
    const gpucore_tensor *norm_weight, *norm_bias; /* [D] or NULL; norm_bias LayerNorm only */
    const gpucore_tensor *w_qkv, *b_qkv;  /* [(heads + 2·kv_heads)·hd, D]: q rows, then k, then v; bias or NULL */
    const gpucore_tensor *w_out, *b_out;  /* [D, heads·hd]; bias [D] or NULL */
    const gpucore_tensor *rope_cos, *rope_sin; /* [S_max, R/2] (sliced to S), or NULL: no RoPE */
    gpucore_tensor *d_norm_weight, *d_norm_bias, *dw_qkv, *db_qkv, *dw_out, *db_out;
    /* LoRA adapters on the projections (both of a pair or neither): A [r, in], B [out, r].
     * With an adapter the projection's W and bias are frozen (their gradients must be NULL). */
    const gpucore_tensor *lora_qkv_a, *lora_qkv_b, *lora_out_a, *lora_out_b;
    gpucore_tensor *d_lora_qkv_a, *d_lora_qkv_b, *d_lora_out_a, *d_lora_out_b;
    double lora_scale;          /* default 1 */
    double lora_dropout;        /* on the adapters' inputs, [0, 1), default 0 (gpucore_ckpt_rng replays it) */
} gpucore_ckpt_attention_block;

typedef struct gpucore_ckpt_mlp_block {
    int64_t struct_size;        /* sizeof(gpucore_ckpt_mlp_block) */
    int32_t layer_norm;         /* 1: LayerNorm, 0: RMSNorm (default) */
    int32_t swiglu;             /* 0: fc2(gelu_tanh(fc1 x)) (default); 1: fc1 is [2F, D] giving gate
                                   (rows 0..F-1) and up (rows F..2F-1), fc2(silu(gate)·up) */
    double eps;                 /* default 1e-5 */
    const gpucore_tensor *norm_weight, *norm_bias; /* [D] or NULL */
    const gpucore_tensor *w_fc1, *b_fc1;  /* [F or 2F, D]; bias or NULL */
    const gpucore_tensor *w_fc2, *b_fc2;  /* [D, F]; bias [D] or NULL */
    gpucore_tensor *d_norm_weight, *d_norm_bias, *dw_fc1, *db_fc1, *dw_fc2, *db_fc2;
} gpucore_ckpt_mlp_block;

/* Set struct_size and the defaults (all tensors NULL). */
GPUCORE_API void gpucore_ckpt_attention_block_init(gpucore_ckpt_attention_block *blk);
GPUCORE_API void gpucore_ckpt_mlp_block_init(gpucore_ckpt_mlp_block *blk);
/* Add the block as one segment. Checks shapes and dtypes of the weights here
 * (SHAPE_MISMATCH, DTYPE_MISMATCH, INVALID_ARGUMENT naming the field); x's shape
 * is checked at each forward. The attention block saves x, the norm statistics,
 * norm(x), the qkv projection (rotated), the attention output and its lse (plus
 * each adapter's x·Aᵀ); the MLP block saves x, the statistics, norm(x), fc1's
 * output and the activation. */
GPUCORE_API gpucore_status gpucore_ckpt_add_attention_block(gpucore_ckpt *ckpt, const char *name,
                                                            const gpucore_ckpt_attention_block *blk);
GPUCORE_API gpucore_status gpucore_ckpt_add_mlp_block(gpucore_ckpt *ckpt, const char *name,
                                                      const gpucore_ckpt_mlp_block *blk);
/* A residual block y = x + f(x): the segments added between begin and end form f
 * (they may include residual blocks). The block is one segment to the policies. */
GPUCORE_API gpucore_status gpucore_ckpt_begin_residual(gpucore_ckpt *ckpt, const char *name);
GPUCORE_API gpucore_status gpucore_ckpt_end_residual(gpucore_ckpt *ckpt);

/* Inside a forward callback: keep t for this segment's backward. The executor
 * takes its own reference (t stays the caller's); saves are numbered 0, 1, ... in
 * call order. Under a recompute policy the reference is dropped at once and the
 * tensor is made again in backward. */
GPUCORE_API gpucore_status gpucore_ckpt_save(gpucore_ckpt_call *call, const gpucore_tensor *t);
/* Inside a backward callback: saved tensor `index` (borrowed; valid during the
 * callback). Reading an index the forward never saved is GPUCORE_ERR_INVALID_ARGUMENT. */
GPUCORE_API gpucore_status gpucore_ckpt_saved(gpucore_ckpt_call *call, int64_t index, gpucore_tensor **out);
/* Reserve `counters` Philox counters (gpucore_random_offset_advance of your draw):
 * *seed and *offset are what to pass to gpucore_random / gpucore_dropout. In a
 * forward the reservations advance the executor's offset; in the recompute and in
 * the backward of the same segment the same calls in the same order return the
 * same values. */
GPUCORE_API gpucore_status gpucore_ckpt_rng(gpucore_ckpt_call *call, uint64_t counters, uint64_t *seed,
                                            uint64_t *offset);
/* Inside a backward callback: gradient `param` of this segment is complete on
 * `stream`; calls the executor's grad-ready callback, if any. */
GPUCORE_API gpucore_status gpucore_ckpt_grad_ready(gpucore_ckpt_call *call, int32_t param, gpucore_tensor *grad);
/* The segment being called: its top-level index and name (valid during the call). */
GPUCORE_API gpucore_status gpucore_ckpt_call_segment(const gpucore_ckpt_call *call, int64_t *index, const char **name);

typedef enum gpucore_ckpt_policy {
    GPUCORE_CKPT_KEEP_ALL = 0,      /* every segment KEPT: no recompute (the reference) */
    GPUCORE_CKPT_RECOMPUTE_ALL = 1, /* every segment a CHECKPOINT: only segment inputs are held */
    GPUCORE_CKPT_EVERY_K = 2,       /* segments 0, k, 2k, ... are CHECKPOINTs, the rest RECOMPUTED (param = k >= 1) */
    GPUCORE_CKPT_SQRT_N = 3,        /* EVERY_K with k = ceil(sqrt(n)) (Chen et al. 2016) */
    GPUCORE_CKPT_BUDGET = 4         /* the least recompute whose estimated peak allocated bytes stays
                                       within param bytes; see gpucore_ckpt_set_policy */
} gpucore_ckpt_policy;

/* Choose the policy (default KEEP_ALL). param: k for EVERY_K; the budget in bytes
 * for BUDGET; ignored otherwise.
 * BUDGET counts everything allocated on the context during the step (parameters,
 * gradients and inputs already allocated when the forward starts, plus what the
 * step adds). It estimates from measurements: the first forward (and any forward
 * whose input shape or dtype changed) is preceded by a dry run — the forward with
 * nothing kept — recording, per segment, its output bytes, the bytes it saves, and
 * its transient peak (the allocator's peak during the segment minus what was
 * allocated before: its output and its scratch, such as a CUDA matmul's workspace,
 * which is counted while that segment runs and never as held); each backward also
 * records every segment's backward peak, which later steps on that input use (until
 * then: the forward's plus the input gradient). From these it simulates the step's
 * peak, each storage counted once, for every group size
 * k = 1..n, then keeps whole groups (last first) while the estimate stays within
 * the budget, and takes the plan with the fewest recomputed segments. When even
 * the leanest plan exceeds the budget, the forward fails with
 * GPUCORE_ERR_OUT_OF_MEMORY and a message with the numbers (budget, bytes at the
 * start, leanest estimate, largest segment), before running anything. */
GPUCORE_API gpucore_status gpucore_ckpt_set_policy(gpucore_ckpt *ckpt, gpucore_ckpt_policy policy, int64_t param);

typedef enum gpucore_ckpt_mode {
    GPUCORE_CKPT_KEPT = 0, GPUCORE_CKPT_CHECKPOINT = 1, GPUCORE_CKPT_RECOMPUTED = 2
} gpucore_ckpt_mode;
/* The plan of the last forward (or of the policy for the registered segments when
 * none ran yet; BUDGET before its first forward: all CHECKPOINT): modes[i] for
 * each of `count` top-level segments (count >= gpucore_ckpt_segment_count). */
GPUCORE_API gpucore_status gpucore_ckpt_get_plan(gpucore_ckpt *ckpt, int32_t *modes, int64_t count);

/* Base Philox key and offset of the next forward (default seed 0, offset 0). Each
 * forward continues from where the previous one's reservations ended. */
GPUCORE_API gpucore_status gpucore_ckpt_set_seed(gpucore_ckpt *ckpt, uint64_t seed, uint64_t offset);

/* Run every segment forward on x. *y: the output (owned by the executor; valid
 * until the backward or the next forward). A forward while the previous step's
 * backward has not run discards that step. x must stay unchanged until backward. */
GPUCORE_API gpucore_status gpucore_ckpt_forward(gpucore_ckpt *ckpt, const gpucore_tensor *x, gpucore_tensor **y);
/* Backpropagate dy (y's shape and dtype) through every segment, recomputing as
 * the plan says. dx: NULL, or a tensor of x's shape and dtype receiving the input
 * gradient. Afterwards nothing of the step is held. */
GPUCORE_API gpucore_status gpucore_ckpt_backward(gpucore_ckpt *ckpt, const gpucore_tensor *dy, gpucore_tensor *dx);
/* Drop a step in progress (after a forward without backward). */
GPUCORE_API gpucore_status gpucore_ckpt_reset(gpucore_ckpt *ckpt);

/* ---- hooks ---- */

/* Saved-tensor hooks: pack replaces how a tensor saved in a forward for a KEPT
 * segment is held until its backward (compress, quantise, move off the device):
 * it gets the tensor (borrowed; the executor drops its reference after pack
 * returns) and sets *packed to anything. unpack gets it back in backward — one
 * segment ahead of that segment's backward — and must return a new tensor of the
 * same shape and dtype (the executor owns it); it releases `packed` whether it
 * succeeds or not. discard (may be NULL) releases a packed value never unpacked
 * (a failed or abandoned step). Each saved tensor is packed once and unpacked once.
 * Tensors saved during a recompute are used at once and not packed. NULL pack:
 * no hooks. */
typedef gpucore_status (*gpucore_ckpt_pack_fn)(void *user, gpucore_tensor *t, gpucore_stream *stream, void **packed);
typedef gpucore_status (*gpucore_ckpt_unpack_fn)(void *user, void *packed, gpucore_stream *stream, gpucore_tensor **out);
typedef void (*gpucore_ckpt_discard_fn)(void *user, void *packed);
GPUCORE_API gpucore_status gpucore_ckpt_set_saved_tensor_hooks(gpucore_ckpt *ckpt, gpucore_ckpt_pack_fn pack,
                                                               gpucore_ckpt_unpack_fn unpack,
                                                               gpucore_ckpt_discard_fn discard, void *user);
/* The built-in pack/unpack pair that offloads saved tensors of at least min_bytes
 * to pinned host memory (gpucore_host_alloc): the device-to-host copy runs on a
 * side stream after an event on the compute stream, so it overlaps the following
 * segments' forward, and the device memory is reused once the copy has passed
 * (gpucore_tensor_record_stream); in backward the host-to-device copy of segment
 * i-1's tensors is queued on the side stream before segment i's backward and
 * waited for (an event) only when segment i-1's backward starts. Exact (a copy).
 * enable 0 turns it off. Replaces custom hooks and vice versa. */
GPUCORE_API gpucore_status gpucore_ckpt_set_offload(gpucore_ckpt *ckpt, int enable, int64_t min_bytes);

typedef enum gpucore_ckpt_phase {
    GPUCORE_CKPT_PHASE_FORWARD = 0, GPUCORE_CKPT_PHASE_RECOMPUTE = 1, GPUCORE_CKPT_PHASE_BACKWARD = 2
} gpucore_ckpt_phase;
/* Called before (is_post 0) and after (is_post 1) the forward, recompute and
 * backward of each top-level segment, on the host thread, for instrumentation
 * (record events, push NVTX ranges). A status other than GPUCORE_OK stops the
 * step like a failing segment. NULL removes the hook. */
typedef gpucore_status (*gpucore_ckpt_segment_hook_fn)(void *user, int64_t segment, const char *name, int32_t phase,
                                                       int32_t is_post);
GPUCORE_API gpucore_status gpucore_ckpt_set_segment_hook(gpucore_ckpt *ckpt, gpucore_ckpt_segment_hook_fn hook,
                                                         void *user);
/* Called by gpucore_ckpt_grad_ready (the built-in segments call it for each
 * parameter gradient) as soon as a gradient is complete on `stream`: pass it on to
 * gpucore_ddp_mark_ready so the allreduce overlaps the rest of backward. segment:
 * top-level index; name: the (inner) segment's name; param: its parameter slot. */
typedef gpucore_status (*gpucore_ckpt_grad_ready_fn)(void *user, int64_t segment, const char *name, int32_t param,
                                                     gpucore_tensor *grad, gpucore_stream *stream);
GPUCORE_API gpucore_status gpucore_ckpt_set_grad_ready_callback(gpucore_ckpt *ckpt, gpucore_ckpt_grad_ready_fn fn,
                                                                void *user);

/* Per-step memory accounting (after a backward; forward-only figures after a
 * forward). Set struct_size to sizeof(gpucore_ckpt_stats). */
typedef struct gpucore_ckpt_stats {
    int64_t struct_size;
    int64_t baseline_bytes;       /* allocated on the context when the forward began */
    int64_t peak_allocated_bytes; /* the allocator's allocated peak during the step (absolute) */
    int64_t held_bytes;           /* device bytes the plan held when the forward ended (kept saved
                                     tensors and stored inputs, unique storages; packed ones excluded) */
    int64_t keep_all_bytes;       /* the same under keep-all, from each segment's measured saves */
    int64_t bytes_saved;          /* keep_all_bytes - held_bytes */
    int64_t estimated_peak_bytes; /* BUDGET: the planner's estimate for the plan chosen; else 0 */
    int64_t segments, kept, checkpoints, recomputed; /* the plan's counts */
    int64_t recompute_runs;       /* segment forwards run again in the last backward */
    int64_t packed_tensors, unpacked_tensors;       /* saved-tensor hook calls in the last step */
    int64_t offloaded_bytes;      /* bytes the built-in offload moved to the host in the last step */
} gpucore_ckpt_stats;
GPUCORE_API gpucore_status gpucore_ckpt_get_stats(gpucore_ckpt *ckpt, gpucore_ckpt_stats *stats);

/* ---- layers on several devices: a GPipe pipeline over checkpoint executors ----
 *
 * Consecutive layers placed on different contexts (cuda:0, cuda:1, ...; several CPU
 * contexts on the CPU backend): each stage is a checkpoint executor created on its
 * own context with its segments (and their weights) there; stage s's output is
 * stage s+1's input. One step splits x [B, ...] along dim 0 into micro-batches
 * (sizes differ by at most one, the first B mod M one larger) and runs them
 * GPipe-style: all forwards (fill), then all backwards (drain), every call queued
 * without host waits, so stage s works on micro-batch m+1 while stage s+1 works on
 * m. Activations and gradients move between contexts on a transfer stream of the
 * receiving context, ordered by events (the sender's stream waits only for the
 * copy before its memory is reused). Memory follows GPipe's re-materialisation:
 * between its forward and its backward a stage holds only each micro-batch's
 * input; the backward of a micro-batch runs the stage's forward again (the
 * executor's own policy applies inside, dropout replays the same mask) and then
 * its backward, so each stage costs two forwards and one backward per micro-batch.
 * Gradients: every parameter gradient announced with gpucore_ckpt_grad_ready (the
 * built-in segments announce theirs) is summed over micro-batches in micro-batch
 * order (one fixed order, so placements over 1, 2 or 4 contexts give bitwise equal
 * gradients) and left in the segment's gradient tensor; the executor's own
 * grad-ready callback, if set, is called once per gradient after the last
 * micro-batch (with M = 1: as without the pipeline). A custom segment that does not
 * announce a gradient gets only the last micro-batch's in it. Stages must all be on
 * one backend (CPU or CUDA); two stages may share a context. An executor bound to a
 * ZeRO trainer (gpucore_zero_bind_ckpt) cannot be a stage yet (NOT_SUPPORTED). */
typedef struct gpucore_pipeline gpucore_pipeline;
/* Called once per micro-batch, right after its last-stage forward, on the host
 * thread: y is the micro-batch's output (borrowed) on the last stage's context;
 * write dL/dy (y's shape and dtype) into dy on `stream`. Scale as the loss needs
 * (e.g. a mean over the whole batch divides by B, not by the micro-batch size). */
typedef gpucore_status (*gpucore_pipeline_loss_fn)(void *user, int64_t micro_batch, const gpucore_tensor *y,
                                                   gpucore_tensor *dy, gpucore_stream *stream);
/* stages: `count` distinct executors in order (borrowed; they must outlive the
 * pipeline). Installs its own grad-ready callback on each (keeping the one set
 * before as the one it calls) and restores them at destroy. */
GPUCORE_API gpucore_status gpucore_pipeline_create(gpucore_ckpt *const *stages, int count, gpucore_pipeline **out);
GPUCORE_API gpucore_status gpucore_pipeline_destroy(gpucore_pipeline *pipe);
/* One training step: forward and backward of every micro-batch as described above.
 * x: on stage 0's context, dim 0 >= micro_batches >= 1. dx: NULL or x's shape and
 * dtype on stage 0's context, receiving the input gradient. Work is queued on each
 * context's current stream of the calling thread; returns without waiting for it.
 * Errors name the stage and micro-batch; the step is then dropped (every executor
 * reset) and the pipeline is ready for the next one. */
GPUCORE_API gpucore_status gpucore_pipeline_step(gpucore_pipeline *pipe, const gpucore_tensor *x,
                                                 int64_t micro_batches, gpucore_pipeline_loss_fn loss, void *user,
                                                 gpucore_tensor *dx);

/* ---------------------------------------------------- attention and transformer ops
 *
 * Scaled dot-product attention over [batch, heads, seq, head_dim] tensors given
 * with any strides (a [B, S, H, D] projection output permuted to [B, H, S, D] is
 * used without a copy), f32/f16/bf16 with f32 accumulation, head_dim up to 256:
 *
 *   S = scale · q·kᵀ + bias;  P = softmax(S) along the keys;  out = dropout(P)·v
 *
 * q [B, H, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv], out [B, H, Sq, Dv];
 * grouped-query attention when Hkv < H (H a multiple of Hkv; query head h reads
 * kv head h / (H/Hkv)). bias masks out keys j >= kv_lengths[b] (key padding),
 * j > i when causal (top-left aligned, PyTorch's is_causal), and adds attn_mask:
 * f32 or q's dtype (additive; -inf masks out) or u8 (boolean: nonzero = attend),
 * any shape that broadcasts to [B, H, Sq, Sk] (numpy rules, any strides). A row
 * that admits no key gets out = 0 and lse = -inf (PyTorch's math path gives NaN).
 * Dropout drops probabilities like gpucore_dropout over a [B, H, Sq, Sk] tensor
 * under (seed, offset): the same mask on every backend and in the backward
 * (advance offset by gpucore_random_offset_advance(B·H·Sq·Sk, GPUCORE_UNIFORM)).
 *
 * Memory: O(seq), never an Sq×Sk buffer. The forward saves only out and lse, the
 * per-row log-sum-exp (f32, before dropout); the backward recomputes the
 * probabilities from them. CPU: tiled over query blocks, OpenMP-parallel over
 * (batch, head, query block) with an online softmax; the backward's dk/dv pass
 * is parallel over (batch, kv head, key block), so results do not depend on the
 * thread count. CUDA / cuda-emulated: flash-attention-style kernels (tiles in
 * shared memory, online softmax, causal and padded tiles skipped) with plain
 * FMA inner loops (tensor cores are not used yet); the backward is deterministic
 * (no atomics). */
typedef struct gpucore_attention_options {
    int64_t struct_size; /* sizeof(gpucore_attention_options) */
    double scale;        /* 0 (default): 1/sqrt(D) */
    int32_t is_causal;   /* default 0 */
    int32_t algo;        /* gpucore_attention_algo (default HEURISTIC) */
    double dropout_p;    /* in [0, 1); default 0 */
    uint64_t seed, offset; /* dropout's Philox stream */
} gpucore_attention_options;

/* How the CUDA backend picks the engine of a forward or backward: cuDNN's SDPA (operation
 * graphs of matmul, pointwise, reduction and reshape nodes through the graph API) chosen by cuDNN's
 * heuristics, timed once per shape (AUTOTUNE), or among deterministic engines only,
 * as gpucore_conv_algo does; or only the hand-written kernel. Where cuDNN is absent,
 * declines the graph (f32, head_dim not a multiple of 8, a boolean mask, i64
 * kv_lengths, dropout, a head_dim with a stride other than 1) or fails, the
 * kernel runs instead: counted by reason (gpucore_attention_get_stats) and logged
 * once per shape at WARN. The CPU and cuda-emulated backends have only their
 * kernels (nothing is counted there). */
typedef enum gpucore_attention_algo {
    GPUCORE_ATTN_ALGO_HEURISTIC = 0,
    GPUCORE_ATTN_ALGO_AUTOTUNE = 1,
    GPUCORE_ATTN_ALGO_DETERMINISTIC = 2,
    GPUCORE_ATTN_ALGO_KERNEL = 3 /* the hand-written kernel only (not counted as a fallback) */
} gpucore_attention_algo;
typedef enum gpucore_attention_fallback_reason {
    GPUCORE_ATTN_FALLBACK_NO_CUDNN = 0,  /* cuDNN could not be loaded */
    GPUCORE_ATTN_FALLBACK_DTYPE = 1,     /* f32 operands (cuDNN's SDPA takes f16/bf16) */
    GPUCORE_ATTN_FALLBACK_HEAD_DIM = 2,  /* head_dim or value head_dim not a multiple of 8 */
    GPUCORE_ATTN_FALLBACK_LAYOUT = 3,    /* a head_dim stride other than 1 */
    GPUCORE_ATTN_FALLBACK_MASK = 4,      /* a boolean (u8) mask or i64 kv_lengths */
    GPUCORE_ATTN_FALLBACK_DROPOUT = 5,   /* dropout (cuDNN's random numbers differ from ours) */
    GPUCORE_ATTN_FALLBACK_GQA = 6,       /* key/value heads not dividing the query heads (GQA/MQA run on cuDNN) */
    GPUCORE_ATTN_FALLBACK_NO_ENGINE = 7, /* cuDNN refused the graph or offered no usable engine */
    GPUCORE_ATTN_FALLBACK_FAILED = 8,    /* building or running the plan failed */
    GPUCORE_ATTN_FALLBACK_CACHE_FULL = 9,/* the plan cache is full */
    GPUCORE_ATTN_FALLBACK_REASONS = 10
} gpucore_attention_fallback_reason;
typedef struct gpucore_attention_stats {
    int64_t struct_size;        /* sizeof(gpucore_attention_stats), set by the caller */
    int64_t cudnn_calls;        /* forwards and backwards run by cuDNN's SDPA engines */
    int64_t fallback_calls;     /* calls that wanted cuDNN and ran the kernel */
    int64_t fallback_by_reason[GPUCORE_ATTN_FALLBACK_REASONS];
} gpucore_attention_stats;
/* Counts of ctx since it was created or last reset. */
GPUCORE_API gpucore_status gpucore_attention_get_stats(gpucore_context *ctx, gpucore_attention_stats *stats);
GPUCORE_API gpucore_status gpucore_attention_reset_stats(gpucore_context *ctx);
/* A fallback reason in words (NULL past the end). */
GPUCORE_API const char *gpucore_attention_fallback_reason_text(int reason);

GPUCORE_API void gpucore_attention_options_init(gpucore_attention_options *opts);

/* out = attention(q, k, v); lse (contiguous f32 of B·H·Sq elements, NULL: not
 * saved) = the log-sum-exp of each score row. attn_mask and kv_lengths (i32/i64
 * [B]) may be NULL; opts NULL: defaults. out must not overlap any input.
 * Errors: SHAPE_MISMATCH (batch, heads, seq or head dims disagree, head_dim > 256,
 * H not a multiple of Hkv, a mask that does not broadcast), DTYPE_MISMATCH,
 * INVALID_ARGUMENT (scale, dropout_p, overlapping outputs), DEVICE_MISMATCH. */
GPUCORE_API gpucore_status gpucore_attention_forward(gpucore_tensor *out, gpucore_tensor *lse, const gpucore_tensor *q,
                                                     const gpucore_tensor *k, const gpucore_tensor *v,
                                                     const gpucore_tensor *attn_mask, const gpucore_tensor *kv_lengths,
                                                     const gpucore_attention_options *opts, gpucore_stream *stream);
/* dq, dk, dv (each may be NULL when not wanted; any strides) from dout and the
 * forward's q, k, v, out and lse, with the forward's mask, lengths and options
 * (the same seed and offset replay the dropout mask). With GQA, dk and dv sum
 * over the query heads of each group. Overwrites the gradients (no accumulation). */
GPUCORE_API gpucore_status gpucore_attention_backward(gpucore_tensor *dq, gpucore_tensor *dk, gpucore_tensor *dv,
                                                      const gpucore_tensor *dout, const gpucore_tensor *q,
                                                      const gpucore_tensor *k, const gpucore_tensor *v,
                                                      const gpucore_tensor *out, const gpucore_tensor *lse,
                                                      const gpucore_tensor *attn_mask, const gpucore_tensor *kv_lengths,
                                                      const gpucore_attention_options *opts, gpucore_stream *stream);

/* Rotary position embedding of x [B, H, S, D] (any strides: a q/k view) with cos
 * and sin [S, R/2] (contiguous, f32 or x's dtype; R = the rotary dims, even, <= D):
 * pair p is dims (2p, 2p+1) when interleaved (GPT-J), else (p, p+R/2) (half-split,
 * GPT-NeoX / LLaMA); y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin; dims >= R are
 * copied. out may be x (in place). Positions are x's seq index: slice cos/sin for
 * an offset. The backward is the inverse rotation: gpucore_rotary_embedding_backward. */
GPUCORE_API gpucore_status gpucore_rotary_embedding(gpucore_tensor *out, const gpucore_tensor *x,
                                                    const gpucore_tensor *cos, const gpucore_tensor *sin,
                                                    int interleaved, gpucore_stream *stream);
/* dx = the rotation of dy by −θ (dx may be dy, in place). */
GPUCORE_API gpucore_status gpucore_rotary_embedding_backward(gpucore_tensor *dx, const gpucore_tensor *dy,
                                                             const gpucore_tensor *cos, const gpucore_tensor *sin,
                                                             int interleaved, gpucore_stream *stream);

/* Gated linear units: out = act(gate) · up. */
typedef enum gpucore_glu_kind {
    GPUCORE_GLU_SWIGLU = 0,     /* act = SiLU (LLaMA's SwiGLU) */
    GPUCORE_GLU_GEGLU_TANH = 1, /* act = GELU, tanh form */
    GPUCORE_GLU_GEGLU_ERF = 2   /* act = GELU, erf form */
} gpucore_glu_kind;
/* gate, up, out: one shape and dtype (f32/f16/bf16), any strides; out may be gate or up (in place). */
GPUCORE_API gpucore_status gpucore_glu(gpucore_tensor *out, const gpucore_tensor *gate, const gpucore_tensor *up,
                                       gpucore_glu_kind kind, gpucore_stream *stream);
/* dgate = dout·up·act'(gate), dup = dout·act(gate); either may be NULL (not wanted). */
GPUCORE_API gpucore_status gpucore_glu_backward(gpucore_tensor *dgate, gpucore_tensor *dup, const gpucore_tensor *dout,
                                                const gpucore_tensor *gate, const gpucore_tensor *up,
                                                gpucore_glu_kind kind, gpucore_stream *stream);

/* Fused residual add + norm over the last dim, one pass: h = x + residual (the new
 * residual stream, rounded to the dtype), y = LayerNorm(h) (layer_norm != 0; gamma,
 * beta both or neither) or RMSNorm(h) (beta must be NULL), statistics from the
 * stored h in f32 (f64 on the CPU). mean (LayerNorm) and rstd: f32 with one element
 * per row, or NULL. h may be residual (in place); y must not overlap the inputs. */
GPUCORE_API gpucore_status gpucore_residual_norm(gpucore_tensor *y, gpucore_tensor *h, gpucore_tensor *mean,
                                                 gpucore_tensor *rstd, const gpucore_tensor *x,
                                                 const gpucore_tensor *residual, const gpucore_tensor *gamma,
                                                 const gpucore_tensor *beta, int layer_norm, double eps,
                                                 gpucore_stream *stream);
/* The gradient of x and of residual (one tensor, they are equal): dx = ∂y/∂h·dy + dh,
 * dh the gradient arriving at the h output (NULL: none); dgamma, dbeta as the
 * norm's backward (each may be NULL). h, mean, rstd: what the forward wrote. */
GPUCORE_API gpucore_status gpucore_residual_norm_backward(gpucore_tensor *dx, gpucore_tensor *dgamma,
                                                          gpucore_tensor *dbeta, const gpucore_tensor *dy,
                                                          const gpucore_tensor *dh, const gpucore_tensor *h,
                                                          const gpucore_tensor *mean, const gpucore_tensor *rstd,
                                                          const gpucore_tensor *gamma, int layer_norm,
                                                          gpucore_stream *stream);

/* ------------------------------------------------- language models (src/models)
 *
 * Decoder-only language models read from a Hugging Face folder and run with the
 * ops above: gpt2, llama, mistral and qwen2. A model is a handle owning its
 * weights (on one context, in one float dtype), optional LoRA adapters, gradient
 * buffers and a checkpoint executor for training.
 *
 * Folder: config.json, plus model.safetensors or model.safetensors.index.json and
 * the shards its "weight_map" names. Every tensor the config implies must be
 * present with the shape the config gives, and no other (HF's non-persistent
 * buffers such as GPT-2's attn.bias and rotary_emb.inv_freq are skipped); else
 * GPUCORE_ERR_CORRUPT_FILE / SHAPE_MISMATCH naming the tensor and file. A missing
 * file is GPUCORE_ERR_IO naming it. Nothing is left allocated on failure.
 * A folder transformers saved with bitsandbytes' 4-bit weights (config.json's
 * quantization_config: quant_method "bitsandbytes", load_in_4bit, bnb_4bit_quant_type
 * nf4 or fp4) loads as it is: each quantized linear's <m>.weight (u8 [ceil(n/2), 1], the
 * packed indices), .weight.absmax (f32), .weight.quant_map (f32 [16], which must be the
 * format's code book) and .weight.quant_state.bitsandbytes__nf4|fp4 (u8 JSON whose
 * quant_type, blocksize and shape must agree) become a GPUCORE_QUANT_NF4/FP4 weight of that
 * block size; modules in llm_int8_skip_modules stay dense; dtype -1 is
 * bnb_4bit_compute_dtype (float32 when absent). With bnb_4bit_use_double_quant the absmax
 * (u8 codes, .weight.nested_absmax f32 per nested_blocksize codes, .weight.nested_quant_map
 * f32 [256], nested_offset in the JSON) is rebuilt in f32 as bitsandbytes' dequantize_4bit
 * does and held plain (the model's config then says bnb_4bit_use_double_quant false).
 * A load_in_8bit folder (<m>.weight I8 [out, in], <m>.SCB f32 [out], <m>.weight_format 0)
 * becomes GPUCORE_QUANT_INT8_ROW weights holding those bytes (W = q * SCB / 127).
 * llm_int8_has_fp16_weight, another quant_method or bnb_4bit_quant_storage, a nested_dtype
 * other than float32, a weight_format other than 0 are NOT_SUPPORTED naming it.
 *
 * Math, per architecture (what transformers 4.44 computes):
 *   gpt2: wte + wpe (learned positions), pre-LayerNorm blocks with biases,
 *         Conv1D weights (stored [in, out] in the file; held transposed as [out, in]
 *         here), gelu_tanh ("gelu_new"), the head tied to wte.
 *   llama, mistral, qwen2: token embedding, pre-RMSNorm blocks (rms_norm_eps), RoPE
 *         (half-split pairs, rope_theta, and rope_scaling {"rope_type": "llama3",
 *         factor, low_freq_factor, high_freq_factor, original_max_position_embeddings}),
 *         grouped-query attention (num_key_value_heads), SwiGLU MLP (hidden_act "silu"),
 *         tie_word_embeddings; q/k/v biases for qwen2, attention_bias / mlp_bias for
 *         llama when the config sets them.
 * A config field that would change the math and is not implemented is refused
 * with GPUCORE_ERR_NOT_SUPPORTED and a message naming it: an unknown model_type,
 * another rope_scaling type, a hidden_act / activation_function other than the
 * above, attention_bias on mistral or qwen2, GPT-2's scale_attn_by_inverse_layer_idx
 * or add_cross_attention, ... A sliding_window (mistral; qwen2 with
 * use_sliding_window) is accepted but any sequence longer than it is refused at run
 * time (NOT_SUPPORTED naming sliding_window); a position past max_position_embeddings
 * is INVALID_ARGUMENT. The base model's dropout probabilities (attn_pdrop, resid_pdrop,
 * embd_pdrop, attention_dropout) are not applied: training runs the base as in eval
 * mode (only LoRA dropout is drawn). A tied checkpoint's lm_head.weight is skipped.
 *
 * Activations and logits are in the model's dtype; attention, norms and
 * cross-entropy accumulate in f32 (see the ops). Calls run on the context's current
 * stream; those returning host values (loss, generated ids) synchronize it. A model
 * is used by one thread at a time. */
typedef struct gpucore_lm gpucore_lm;
/* A KV cache: per layer keys and values [batch, kv_heads, max_len, head_dim] in the
 * model's dtype, taken from the caching allocator. */
typedef struct gpucore_lm_cache gpucore_lm_cache;

typedef enum gpucore_lm_arch {
    GPUCORE_LM_GPT2 = 0, GPUCORE_LM_LLAMA = 1, GPUCORE_LM_MISTRAL = 2, GPUCORE_LM_QWEN2 = 3
} gpucore_lm_arch;

/* Load the model in `folder` onto ctx. dtype: -1 keeps the checkpoint's dtype (the
 * dtype of its floating tensors; a mix is converted to the first one's), or
 * GPUCORE_F32, GPUCORE_BF16, GPUCORE_F16 to convert on load (round to nearest
 * even). The weights are frozen until gpucore_lm_add_lora / load_adapter /
 * set_full_finetune.
 *
 * `folder` may instead be a GGUF file (any regular file is read as one; see "GGUF")
 * of general.architecture llama, qwen2 or gpt2, as llama.cpp's converter writes them:
 * the config comes from its metadata (<arch>.block_count, embedding_length,
 * feed_forward_length, attention.head_count(_kv), context_length, rope.freq_base,
 * attention.layer_norm_rms_epsilon / layer_norm_epsilon; the vocabulary from
 * tokenizer.ggml.tokens; bos/eos/pad from tokenizer.ggml.*_token_id; a tied head when
 * output.weight is absent; Llama biases when blk.0.attn_q.bias / ffn_up.bias exist),
 * the weights from llama.cpp's tensor names (token_embd, blk.N.attn_q/k/v/output,
 * ffn_gate/up/down, attn_norm, ffn_norm, output_norm, output; GPT-2's attn_qkv and
 * position_embd), Llama's q/k rows put back from llama.cpp's interleaved rotary order,
 * the linear layers' weights in a block type (Q4_0 .. Q6_K) kept as those blocks (computed
 * with gpucore_qlinear_*, see gpucore_lm_create_ex), every other weight decoded to the model's
 * dtype while loading, one tensor at a time (dtype -1: the embedding's f16/bf16/f32, f32 when
 * it is quantized). Another
 * architecture, RoPE scaling, rope_freqs.weight, partial rotary, experts, a tensor the
 * model does not have or a block type the library does not decode is NOT_SUPPORTED
 * naming it; a missing tensor CORRUPT_FILE, a wrong shape SHAPE_MISMATCH. The model
 * then behaves as one loaded from a folder (save_pretrained writes a Hugging Face
 * folder with the config made from the metadata). */
GPUCORE_API gpucore_status gpucore_lm_create(gpucore_context *ctx, const char *folder, int dtype, gpucore_lm **out);

/* How gpucore_lm_create_ex loads a model. */
typedef struct gpucore_lm_load_options {
    int64_t struct_size;  /* sizeof(gpucore_lm_load_options) */
    int dtype;            /* as gpucore_lm_create's dtype; with quantize, the compute dtype (-1: bf16) */
    /* -1: dense weights. GPUCORE_QUANT_NF4, GPUCORE_QUANT_FP4 or GPUCORE_QUANT_INT8_ROW: every
     * linear layer's weight of a Hugging Face folder is quantized while loading, one tensor at a
     * time from the file's values (host memory never holds the model in 16 or 32 bits); the
     * embeddings, norms and a separate head stay dense in dtype (as bitsandbytes leaves them). */
    int quantize;
    int64_t block_size;   /* NF4/FP4 block (0: 64), as gpucore_quantize */
} gpucore_lm_load_options;
GPUCORE_API void gpucore_lm_load_options_init(gpucore_lm_load_options *opts);
/* gpucore_lm_create with options (NULL: the defaults, which make it gpucore_lm_create(.., -1, ..)).
 * A GGUF file keeps its linear layers' quantized blocks (Q4_0 .. Q6_K) as they are, whatever
 * quantize says (another quantize is INVALID_ARGUMENT: the file is already quantized); its float
 * tensors load as gpucore_lm_create does. A model with quantized linear layers computes them with
 * gpucore_qlinear_* / gpucore_lora_* (opts.w_quant); it trains LoRA adapters (QLoRA), not its
 * frozen base (gpucore_lm_set_full_finetune refuses); gpucore_lm_parameter gives a quantized
 * weight as its u8 bytes; gpucore_lm_merge_adapter dequantizes the layers it merges into.
 * A bitsandbytes folder (see gpucore_lm_create) keeps its NF4/FP4 weights; quantize is then
 * INVALID_ARGUMENT as for a GGUF file.
 * Errors: those of gpucore_lm_create, INVALID_ARGUMENT (struct_size, quantize not one of the three,
 * block_size), and a quantization failure naming the tensor (a NaN or infinite weight). */
GPUCORE_API gpucore_status gpucore_lm_create_ex(gpucore_context *ctx, const char *path,
                                                const gpucore_lm_load_options *opts, gpucore_lm **out);
/* The quantized formats of the linear weights ("nf4", "fp4", "int8", a GGUF file's "Q4_1+Q8_0",
 * most bytes first), "" for a dense model; NULL for an invalid handle. Valid while lm lives. */
GPUCORE_API const char *gpucore_lm_quantization(const gpucore_lm *lm);
/* Bytes the base weights take on the device (quantized ones as stored, adapters not counted; a
 * GGUF file's quantized head, kept beside its dense copy for decode steps, counts too). */
GPUCORE_API gpucore_status gpucore_lm_weight_bytes(const gpucore_lm *lm, int64_t *bytes);
/* Bytes of base weights one decode step (up to 4 rows) reads: every layer's and norm's, the head
 * once (a GGUF file's quantized head where its tensor is quantized, else the dense head or tied
 * embedding table), the tables it reads a row of (embeddings, learned positions) not counted. */
GPUCORE_API gpucore_status gpucore_lm_decode_bytes(const gpucore_lm *lm, int64_t *bytes);
/* Frees weights, adapters, gradients and the executor (caches stay valid handles
 * to destroy). NULL is a no-op. */
GPUCORE_API gpucore_status gpucore_lm_destroy(gpucore_lm *lm);
/* The model's context (borrowed). */
GPUCORE_API gpucore_status gpucore_lm_context(const gpucore_lm *lm, gpucore_context **ctx);

/* Integer configuration values by their Hugging Face names: "arch"
 * (gpucore_lm_arch), "dtype" (gpucore_dtype of the weights), "vocab_size",
 * "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
 * "head_dim", "intermediate_size", "max_position_embeddings", "sliding_window"
 * (-1 none), "tie_word_embeddings" (0/1), "bos_token_id", "eos_token_id",
 * "pad_token_id" (-1 when the config has none; the first of a list). GPT-2's
 * n_embd, n_layer, n_head, n_positions, n_inner answer under the same names.
 * Unknown key: INVALID_ARGUMENT. */
GPUCORE_API gpucore_status gpucore_lm_config_int(const gpucore_lm *lm, const char *key, int64_t *value);
/* Floating values: "rope_theta", "rms_norm_eps" (GPT-2: layer_norm_epsilon under
 * "norm_eps" too), "rope_scaling_factor" (1 without scaling). */
GPUCORE_API gpucore_status gpucore_lm_config_double(const gpucore_lm *lm, const char *key, double *value);
/* "gpt2", "llama", "mistral", "qwen2"; NULL for an invalid handle. */
GPUCORE_API const char *gpucore_lm_arch_name(const gpucore_lm *lm);
/* PEFT's default LoRA target modules of an architecture by its model_type ("gpt2": "c_attn";
 * "llama", "mistral", "qwen2": "q_proj,v_proj"), comma-separated, static; NULL (with the error set)
 * for a model_type that is not implemented. */
GPUCORE_API const char *gpucore_lm_default_lora_targets(const char *model_type);
/* The configuration as JSON text: a folder's config.json as it was read, or the config a GGUF
 * file's metadata was written as. *json is borrowed, valid until the model is destroyed. */
GPUCORE_API gpucore_status gpucore_lm_config_json(const gpucore_lm *lm, const char **json);

/* Every base weight by its state-dict name ("model.layers.0.self_attn.q_proj.weight",
 * "transformer.h.0.attn.c_attn.weight"), i in [0, gpucore_lm_parameter_count).
 * *name and *param are borrowed (valid until the model is destroyed or merged).
 * GPT-2 Conv1D weights are [out, in] here (the transpose of the file's). A tied
 * head is listed once, under the embedding's name. */
GPUCORE_API int64_t gpucore_lm_parameter_count(const gpucore_lm *lm); /* -1: invalid handle */
GPUCORE_API gpucore_status gpucore_lm_parameter(gpucore_lm *lm, int64_t i, const char **name, gpucore_tensor **param);

/* ---- inference ----
 * input_ids: i32 or i64 [B, T] on the model's context (T >= 1, ids in
 * [0, vocab_size); out-of-range ids give NaN rows). *logits: a new tensor
 * [B, T, vocab_size] in the model's dtype (destroy it). Positions 0..T-1; no dropout. */
GPUCORE_API gpucore_status gpucore_lm_forward(gpucore_lm *lm, const gpucore_tensor *input_ids, gpucore_tensor **logits);
/* The same from a host array of B·T int64 ids (row-major), checked on the host. */
GPUCORE_API gpucore_status gpucore_lm_forward_host(gpucore_lm *lm, const int64_t *input_ids, int64_t batch,
                                                   int64_t seq, gpucore_tensor **logits);

/* An empty cache for `batch` sequences of up to max_len positions
 * (<= max_position_embeddings). */
GPUCORE_API gpucore_status gpucore_lm_cache_create(gpucore_lm *lm, int64_t batch, int64_t max_len,
                                                   gpucore_lm_cache **out);
GPUCORE_API gpucore_status gpucore_lm_cache_destroy(gpucore_lm_cache *cache);
/* Positions already held (the next token's position). */
GPUCORE_API int64_t gpucore_lm_cache_length(const gpucore_lm_cache *cache); /* -1: invalid handle */
/* Forget the held positions (the memory is kept). */
GPUCORE_API gpucore_status gpucore_lm_cache_reset(gpucore_lm_cache *cache);
/* Run input_ids [B, T] (B the cache's) at positions L..L+T-1, L the cache's length,
 * attending to the cached keys/values plus their own (causally), appending theirs.
 * L + T must fit in max_len. *logits: new [B, T, vocab_size]; logits NULL: not
 * computed (the cache is still filled). last_only != 0: *logits is [B, 1, vocab_size]
 * for the last position only. */
GPUCORE_API gpucore_status gpucore_lm_forward_cached(gpucore_lm *lm, gpucore_lm_cache *cache,
                                                     const gpucore_tensor *input_ids, int last_only,
                                                     gpucore_tensor **logits);

/* Generation with a KV cache: one prefill over the prompt, then one token per step
 * (no recomputation of the prefix). input_ids: host int64 [batch, prompt_len].
 * Greedy (do_sample 0: argmax, the first index of the maximum, as torch.argmax) or
 * sampling: logits / temperature (> 0), then the top_k largest (0: all), then the
 * smallest set whose probability reaches top_p (1: all; the most probable token is
 * always kept) — transformers' TemperatureLogitsWarper, TopKLogitsWarper and
 * TopPLogitsWarper — and a draw by inverse CDF from the Philox uniform
 * gpucore_philox_uniform(seed, 0, step·batch + b), computed on the host in f64 from
 * the f32 logits, so every backend draws the same. eos_token_id >= 0: a sequence that
 * produced it gets pad_token_id (eos_token_id when pad_token_id < 0) from then on,
 * and generation stops early when every sequence has finished (transformers'
 * rule). output_ids: host int64 with room for batch·(prompt_len + max_new_tokens);
 * receives [batch, *out_len] row-major (the prompt, then the new tokens), *out_len <=
 * prompt_len + max_new_tokens. prompt_len + max_new_tokens <= max_position_embeddings. */
GPUCORE_API gpucore_status gpucore_lm_generate(gpucore_lm *lm, const int64_t *input_ids, int64_t batch,
                                               int64_t prompt_len, int64_t max_new_tokens, int do_sample,
                                               double temperature, int64_t top_k, double top_p, uint64_t seed,
                                               int64_t eos_token_id, int64_t pad_token_id, int64_t *output_ids,
                                               int64_t *out_len);
/* The next token from one row of `vocab` host f32 logits, chosen as gpucore_lm_generate chooses
 * it (the same greedy rule, warpers and inverse-CDF draw) with the Philox uniform
 * gpucore_philox_uniform(seed, 0, counter): a caller running its own loop over
 * gpucore_lm_forward_cached (an interactive chat) draws what generate would, given the counter.
 * NULL logits or token is NULL_POINTER; vocab < 1 or bad sampling parameters (as generate's)
 * INVALID_ARGUMENT; host memory for two vocab-long f64 rows is OUT_OF_MEMORY. */
GPUCORE_API gpucore_status gpucore_lm_sample_token(const float *logits, int64_t vocab, int do_sample,
                                                   double temperature, int64_t top_k, double top_p, uint64_t seed,
                                                   uint64_t counter, int64_t *token);

/* ---- training ----
 * Trainable parameters: the LoRA adapters when any exist (the base frozen), else
 * every base weight after gpucore_lm_set_full_finetune(lm, 1), else none. Each has a
 * gradient tensor of its shape and dtype, owned by the model, overwritten by every
 * gpucore_lm_forward_backward (or added to: gpucore_lm_forward_backward_ex). Names: PEFT's adapter keys without ".default"
 * ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") for LoRA, the
 * state-dict names for full fine-tuning (as gpucore_lm_parameter; a tied head's
 * gradient is the sum of both uses). Both tensors are borrowed: pass them to
 * gpucore_optimizer_create / gpucore_optimizer_step. */
GPUCORE_API int64_t gpucore_lm_trainable_count(const gpucore_lm *lm); /* -1: invalid handle */
GPUCORE_API gpucore_status gpucore_lm_trainable(gpucore_lm *lm, int64_t i, const char **name, gpucore_tensor **param,
                                                gpucore_tensor **grad);
/* enable 1: every base weight trainable (allocates the gradients; refused while
 * adapters exist: INVALID_ARGUMENT); 0: frozen again (frees them). */
GPUCORE_API gpucore_status gpucore_lm_set_full_finetune(gpucore_lm *lm, int enable);

/* Hugging Face's causal-LM loss: logits[:, :-1] against labels[:, 1:] (shifted
 * inside), rows whose label is -100 ignored, the mean over the rest (NaN when none
 * is counted), computed from the model-dtype logits in f32. input_ids and labels:
 * i32/i64 [B, T] on the model's context, T >= 2 (labels NULL: input_ids). */
GPUCORE_API gpucore_status gpucore_lm_loss(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                           const gpucore_tensor *labels, double *loss);
/* The loss (as gpucore_lm_loss, with LoRA dropout active) and its backward: every
 * trainable parameter's gradient is overwritten with d loss / d param. Runs the
 * layers as checkpoint-executor segments under the policy set below. Refused
 * (INVALID_ARGUMENT) when nothing is trainable. */
GPUCORE_API gpucore_status gpucore_lm_forward_backward(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                                       const gpucore_tensor *labels, double *loss);
/* Host-array forms: B·T int64 ids and labels (labels NULL: the ids). */
GPUCORE_API gpucore_status gpucore_lm_loss_host(gpucore_lm *lm, const int64_t *input_ids, const int64_t *labels,
                                                int64_t batch, int64_t seq, double *loss);
GPUCORE_API gpucore_status gpucore_lm_forward_backward_host(gpucore_lm *lm, const int64_t *input_ids,
                                                            const int64_t *labels, int64_t batch, int64_t seq,
                                                            double *loss);

/* Gradient accumulation: one batch of N label tokens run as K micro-batches (of any
 * sizes and token counts) gives the update of the whole batch run at once when each
 * micro-batch's loss is normalised by N, not by its own count (a mean of per-micro-batch
 * means weighs a token of a short micro-batch more). So the caller first counts the
 * batch's label tokens, then runs its micro-batches:
 *
 *     int64_t n = 0, c;
 *     for (k = 0; k < K; k++) { gpucore_lm_count_label_tokens(lm, ids[k], labels[k], &c); n += c; }
 *     gpucore_lm_backward_options o;
 *     gpucore_lm_backward_options_init(&o);
 *     o.total_label_tokens = n;
 *     for (k = 0; k < K; k++) {
 *         o.accumulate = k > 0;               (the first micro-batch overwrites the gradients)
 *         gpucore_lm_forward_backward_ex(lm, ids[k], labels[k], &o, &loss_k);   (sum loss_k: the batch's loss)
 *     }
 *     then the optimizer step (and, under data parallelism, the gradients' reduction) once.
 *
 * In f32 the gradients and the summed losses equal those of one gpucore_lm_forward_backward
 * over the K micro-batches' rows to rounding (the sums run in another order). */
typedef struct gpucore_lm_backward_options {
    int64_t struct_size;        /* sizeof(gpucore_lm_backward_options), set by _init */
    int accumulate;             /* 0 (default): the gradients are overwritten; 1: d loss / d param is
                                   added into them */
    int64_t total_label_tokens; /* > 0: the loss is the sum of this batch's token losses divided by
                                   it (the label tokens of the whole accumulated batch), and so are the
                                   gradients; 0 (default): the mean over this batch's own label tokens,
                                   as gpucore_lm_forward_backward */
} gpucore_lm_backward_options;
/* Set struct_size and the defaults (NULL: no-op). */
GPUCORE_API void gpucore_lm_backward_options_init(gpucore_lm_backward_options *opts);
/* gpucore_lm_forward_backward under opts (NULL: the defaults, the same call). *loss as
 * described at total_label_tokens. A micro-batch without label tokens adds nothing (loss 0)
 * when total_label_tokens > 0. Errors: INVALID_ARGUMENT for a struct_size not from _init,
 * accumulate other than 0/1, a negative total_label_tokens; the rest as forward_backward. */
GPUCORE_API gpucore_status gpucore_lm_forward_backward_ex(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                                          const gpucore_tensor *labels,
                                                          const gpucore_lm_backward_options *opts, double *loss);
/* The label tokens the loss counts in a batch: positions 1..T-1 of labels (input_ids when
 * labels is NULL) that are not -100, over every row (the labels are shifted inside, so
 * position 0 never counts). Synchronizes the stream (the labels are read on the host). */
GPUCORE_API gpucore_status gpucore_lm_count_label_tokens(gpucore_lm *lm, const gpucore_tensor *input_ids,
                                                         const gpucore_tensor *labels, int64_t *count);
/* Recompute policy of the training executor (gpucore_ckpt_set_policy; each layer is
 * an attention and an MLP segment). Default KEEP_ALL. */
GPUCORE_API gpucore_status gpucore_lm_set_checkpoint_policy(gpucore_lm *lm, gpucore_ckpt_policy policy, int64_t param);
/* Philox seed for LoRA dropout in forward_backward (default 0); the offset restarts at 0. */
GPUCORE_API gpucore_status gpucore_lm_set_seed(gpucore_lm *lm, uint64_t seed);
/* The head and the loss of gpucore_lm_loss and the forward_backward calls run over chunks of
 * `rows` rows of the [B·T, hidden] final hidden states: each chunk's logits, its cross-entropy
 * and (training) their gradient, written over those logits, then the hidden states' and the
 * head weight's gradients, so the [B, T, vocab] logits never exist (gpucore_lm_forward still
 * returns them). rows 0 (the default): chunks of about 32 MiB of logits, at least 256 rows.
 * Results equal those of whole logits to rounding (the loss's chunk sums add in f64, dW adds
 * chunk by chunk in the model's dtype). rows < 0: INVALID_ARGUMENT. */
GPUCORE_API gpucore_status gpucore_lm_set_head_chunk_rows(gpucore_lm *lm, int64_t rows);

/* ---- memory plan ----
 * What a training step (gpucore_lm_forward_backward, then an optimizer step) holds on one
 * device, computed from the config alone, before anything is loaded: the allocations of the
 * model layer, the checkpoint executor, the head and loss and the optimizer replayed in the
 * order the step makes and frees them, each rounded as the caching allocator rounds, so the
 * peak is the allocator's allocated peak (gpucore_memory_stats.allocated_bytes_peak) of that
 * step, the caller's ids and labels included. The budget policy's plan is chosen by the
 * executor's own planner from the segments' planned records. Categories of the bytes: */
typedef enum gpucore_mem_category {
    GPUCORE_MEM_WEIGHTS = 0,     /* base weights (quantized linears at their format's size), LoRA adapters, RoPE tables */
    GPUCORE_MEM_GRADIENTS = 1,   /* the trainable parameters' gradients */
    GPUCORE_MEM_OPTIMIZER = 2,   /* AdamW moments / SGD momentum, f32 masters of f16/bf16 parameters */
    GPUCORE_MEM_ACTIVATIONS = 3, /* ids, labels, embeddings, what the executor holds for the backward */
    GPUCORE_MEM_TRANSIENT = 4,   /* a segment's scratch while it runs (forward, recompute, backward) */
    GPUCORE_MEM_HEAD_LOSS = 5,   /* the head and loss: one chunk's logits, the hidden states' gradient */
    GPUCORE_MEM_WORKSPACE = 6,   /* a CUDA matmul's cuBLASLt workspace */
    GPUCORE_MEM_CATEGORIES = 7
} gpucore_mem_category;
/* "weights", "gradients", "optimizer", "activations", "transient", "head_loss", "workspace";
 * NULL outside the enum. */
GPUCORE_API const char *gpucore_mem_category_name(int category);
/* The allocated bytes of ctx's device memory by category. The model layer, the optimizer and the
 * checkpoint executor tag every allocation they make with its category (what the executor keeps
 * for the backward is retagged from transient to activations); anything else, the caller's own
 * tensors included, is "other". Entry c < GPUCORE_MEM_CATEGORIES is that category's, entry
 * GPUCORE_MEM_CATEGORIES the other bytes; they sum to gpucore_memory_stats.allocated_bytes.
 * at_oom: the same when the allocator last refused a request (zeros before the first). The
 * JSON and text snapshots give them too, and each allocated block's category. */
typedef struct gpucore_memory_categories {
    int64_t struct_size;                        /* sizeof(gpucore_memory_categories) */
    int64_t live[GPUCORE_MEM_CATEGORIES + 1];
    int64_t at_oom[GPUCORE_MEM_CATEGORIES + 1];
} gpucore_memory_categories;
GPUCORE_API gpucore_status gpucore_memory_get_categories(gpucore_context *ctx, gpucore_memory_categories *out);

typedef struct gpucore_lm_plan_options {
    int64_t struct_size;     /* sizeof(gpucore_lm_plan_options), set by _init */
    int32_t dtype;           /* -1 (default): the model's, or the config's torch_dtype (f32 when absent) */
    int32_t device_type;     /* gpucore_device_type; -1 (default): the model's context, else the CPU */
    int64_t batch, seq;      /* the micro-batch: rows and tokens per row (seq >= 2) */
    int32_t full_finetune;   /* 1: every base weight trainable (then lora_r must be 0) */
    int64_t lora_r;          /* > 0: LoRA adapters of rank r on the modules lora_targets names (PEFT's rule) */
    const char *const *lora_targets;
    int64_t n_lora_targets;
    double lora_dropout;     /* > 0: the adapters' dropout scratch is counted */
    int32_t ckpt_policy;     /* gpucore_ckpt_policy (default KEEP_ALL) */
    int64_t ckpt_param;      /* k of EVERY_K, bytes of BUDGET */
    int32_t optimizer;       /* -1: none, GPUCORE_OPTIMIZER_SGD, GPUCORE_OPTIMIZER_ADAMW (default) */
    double momentum;         /* SGD: > 0 counts a momentum buffer */
    int32_t zero_stage;      /* 0 (default); 1-3: NOT_SUPPORTED (the model layer trains on one device;
                                ZeRO trains models of the executor's built-in blocks, gpucore_zero_bind_ckpt) */
    int32_t world_size;      /* 1 (default); more: NOT_SUPPORTED, as zero_stage */
    int64_t grad_accum;      /* micro-batches per step (default 1); > 1 counts the accumulation scratch */
    int32_t quant_format;    /* -1 (default): dense (a model loaded quantized: its format); else the
                                gpucore_quant_format of the decoder's linears */
    int64_t quant_block_size;
    int32_t quant_flags;
    int64_t head_chunk_rows; /* 0 (default): the model's setting (gpucore_lm_set_head_chunk_rows) or by size */
    int64_t workspace_bytes; /* CUDA matmul workspace; 0 (default): the context's, else 32 MiB */
    int64_t memory_limit;    /* > 0: the step replayed under this limit as gpucore_memory_set_limit caps the
                                allocator (its reserved segments, cached ones released when it is reached):
                                OUT_OF_MEMORY, naming where, when it would not fit. The allocated peak alone
                                does not decide it: the blocks' places in the segments can need more. */
} gpucore_lm_plan_options;
GPUCORE_API void gpucore_lm_plan_options_init(gpucore_lm_plan_options *opts);

typedef struct gpucore_lm_memory_plan {
    int64_t struct_size;                    /* sizeof(gpucore_lm_memory_plan) */
    int64_t peak_bytes;                     /* the step's allocated peak */
    int64_t bytes[GPUCORE_MEM_CATEGORIES];  /* live at the peak, per category (they sum to peak_bytes) */
    int64_t persistent_bytes;               /* held between steps: weights, gradients, optimizer state */
    int32_t phase;                          /* at the peak: gpucore_ckpt_phase, or -1 in the head and loss */
    int64_t layer;                          /* the decoder layer at the peak, -1 for none */
    char where[64];                         /* "layer 3 mlp backward", "head and loss", "final norm forward" */
    int64_t recomputed_segments;            /* the checkpoint plan's segments run twice */
    int64_t segments;
} gpucore_lm_memory_plan;
/* Plan one training step of lm (loaded; its dtype, context and head chunk rows are the
 * defaults) or, with lm NULL, of the model whose config.json is in `folder` (no weights are
 * read; a GGUF file: NOT_SUPPORTED, load it and pass the model). Set plan->struct_size first.
 * INVALID_ARGUMENT names a bad option (LoRA targets matching no module, LoRA with full
 * fine-tuning, batch or seq out of range, an unknown policy, quant format or optimizer);
 * NOT_SUPPORTED for ZeRO stages above 0.
 * A gpucore_lm_forward_backward(_ex/_host) that runs out of memory says so with the allocator's
 * message followed by this plan's account of the step: the bytes allocated when it began, the bytes
 * planned above them at the peak and where, the planned bytes by category, and under the context's
 * memory limit (gpucore_memory_set_limit) the largest micro-batch and the cheapest checkpoint policy
 * that fit ("fits under it: micro-batch 4 (gradient accumulation over 2) with checkpoint policy
 * sqrt_n (planned peak ...)"). The model stays usable: the next call may run that setting. */
GPUCORE_API gpucore_status gpucore_lm_plan(const gpucore_lm *lm, const char *folder, const gpucore_lm_plan_options *opts,
                                           gpucore_lm_memory_plan *plan);

/* ---- LoRA in PEFT's format ----
 * Adapters on the linear layers named in target_modules (count names; each matched
 * against the last component of the module name, as PEFT does for a list):
 * q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (llama, mistral,
 * qwen2); c_attn, c_proj (both attn.c_proj and mlp.c_proj), c_fc (gpt2). A name that
 * matches no module of this architecture is INVALID_ARGUMENT. y = W x + b +
 * (lora_alpha / r) · B A dropout(x); A [r, in] drawn as PEFT's default
 * (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in)), from Philox under
 * seed), B [out, r] zero, in the model's dtype. Replaces adapters already present.
 * The base weights become frozen (full fine-tuning off). */
GPUCORE_API gpucore_status gpucore_lm_add_lora(gpucore_lm *lm, int64_t r, double lora_alpha, double lora_dropout,
                                               const char *const *target_modules, int64_t count, uint64_t seed);
/* Load a PEFT adapter folder: adapter_config.json (peft_type "LORA", r, lora_alpha,
 * lora_dropout, target_modules as a list or one regex string is refused,
 * use_rslora / use_dora / fan_in_fan_out / rank_pattern / alpha_pattern / bias other
 * than "none" / modules_to_save refused by name when set) + adapter_model.safetensors
 * with keys "base_model.model.<module>.lora_A.weight" / ".lora_B.weight" (".default"
 * tolerated before ".weight"). Every targeted module's pair must be present with
 * shapes [r, in] / [out, r]; an unknown key is CORRUPT_FILE naming it. Converted to
 * the model's dtype. Replaces adapters already present; on failure the model keeps
 * the ones it had. */
GPUCORE_API gpucore_status gpucore_lm_load_adapter(gpucore_lm *lm, const char *folder);
/* Write the adapters as PEFT does: folder (created if absent) gets
 * adapter_config.json (base_model_name_or_path = the loaded folder, peft_type LORA,
 * task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules, bias "none",
 * fan_in_fan_out true for gpt2) and adapter_model.safetensors (the trainable names,
 * in the model's dtype). INVALID_ARGUMENT without adapters. */
GPUCORE_API gpucore_status gpucore_lm_save_adapter(gpucore_lm *lm, const char *folder);
/* W += (alpha / r) B A for every adapter, then drop the adapters (PEFT's
 * merge_and_unload). INVALID_ARGUMENT without adapters. */
GPUCORE_API gpucore_status gpucore_lm_merge_adapter(gpucore_lm *lm);
/* Number of modules carrying an adapter (0: none). */
GPUCORE_API int64_t gpucore_lm_lora_count(const gpucore_lm *lm);

/* Write the base model as a Hugging Face folder (created if absent): config.json
 * (the loaded one with torch_dtype set to the weights' dtype) and model.safetensors
 * (state-dict names, file layout: GPT-2 Conv1D weights back to [in, out]; a tied
 * head saved once), which transformers' from_pretrained loads. Adapters are not
 * included (merge them first); refused with INVALID_ARGUMENT while they exist.
 * NF4/FP4 linear layers are written as transformers + bitsandbytes save a model loaded
 * in 4 bits (the four tensors gpucore_lm_create reads, their [out, in] order for GPT-2
 * too; quant_state's dtype the model's dtype) with transformers' quantization_config
 * (bnb_4bit_compute_dtype the model's dtype, no double quantization) added to config.json,
 * or the one read kept; a model with no quantized layer left drops a quantization_config
 * it was read with. INT8_ROW layers are written as Linear8bitLt saves them (<m>.weight
 * I8, <m>.SCB, <m>.weight_format 0) with load_in_8bit's quantization_config. GGUF blocks,
 * mixed formats, or dense linear layers beside quantized ones (after merge_adapter) that
 * llm_int8_skip_modules does not name are NOT_SUPPORTED. */
GPUCORE_API gpucore_status gpucore_lm_save_pretrained(gpucore_lm *lm, const char *folder);

/* ------------------------------------------------- text: tokenizer and chat prompts (src/text)
 * A byte-level BPE tokenizer as Hugging Face's `tokenizers` runs it, id for id: the added tokens
 * (matched whole in the text first, longest first, with their lstrip / rstrip / single_word), then
 * NFC where the file's normalizer is NFC, then the pre-tokenizer (the split patterns of GPT-2,
 * Llama-3, Qwen2 and SmolLM: ByteLevel with its regex, a Split of one of those exact patterns,
 * Digits), then the merges by rank. What a file asks
 * for and this code does not do (another model type — SentencePiece Unigram, WordPiece, WordLevel —,
 * BPE with byte_fallback / dropout / subword affixes, another normalizer, pre-tokenizer, Split
 * pattern, decoder or post-processor) is refused with NOT_SUPPORTED naming it. Unicode classes come
 * from a table compiled in (src/text/unicode_table.h). Text is UTF-8; invalid UTF-8 is
 * INVALID_ARGUMENT naming the byte offset. A tokenizer is immutable once made: one may be used by
 * several threads at once. */
typedef struct gpucore_tokenizer gpucore_tokenizer;

/* From a Hugging Face tokenizer.json (model BPE). A tokenizer_config.json beside it, when present,
 * gives bos_token / eos_token (else the post-processor's first token is BOS and there is no EOS)
 * and chat_template. A missing file is IO, one that is not JSON or whose vocabulary or merges do
 * not hold together is CORRUPT_FILE. */
GPUCORE_API gpucore_status gpucore_tokenizer_create_from_file(const char *path, gpucore_tokenizer **out);

/* The same tokenizer from arrays, as a GGUF file's tokenizer.ggml.* metadata holds them. */
typedef struct gpucore_tokenizer_arrays {
    int64_t n_tokens;
    const char *const *tokens;   /* the vocabulary, id = index, byte-level characters (GPT-2's mapping) */
    const int32_t *token_types;  /* NULL, or per token GGUF's types: 3 (control) and 4 (user defined)
                                    are added tokens, control ones special (skipped by decode) */
    int64_t n_merges;
    const char *const *merges;   /* "left right", rank = index */
    const char *pre;             /* the pre-tokenizer (tokenizer.ggml.pre): "gpt2", "llama-bpe" or
                                    "llama3", "qwen2", "smollm" */
    int32_t bos_id, eos_id;      /* -1: none */
    int add_bos, add_eos;        /* put BOS / EOS around a sequence when encode's add_special is set */
} gpucore_tokenizer_arrays;
GPUCORE_API gpucore_status gpucore_tokenizer_create_from_arrays(const gpucore_tokenizer_arrays *arrays,
                                                                gpucore_tokenizer **out);
/* From a GGUF file's metadata (llama.cpp's tokenizer.ggml.model "gpt2": tokens, token_type,
 * merges, pre, bos/eos_token_id, add_bos/add_eos_token) and its tokenizer.chat_template. Another
 * tokenizer model ("llama" is SentencePiece) is NOT_SUPPORTED naming it. */
GPUCORE_API gpucore_status gpucore_tokenizer_create_from_gguf(const char *path, gpucore_tokenizer **out);
GPUCORE_API void gpucore_tokenizer_destroy(gpucore_tokenizer *tok); /* NULL: no-op */

/* text[0..len) (len -1: NUL-terminated) to ids. add_special: the file's post-processor ids around
 * the sequence (Llama-3's <|begin_of_text|>; nothing for GPT-2 / SmolLM2). Writes at most cap ids
 * (ids may be NULL when cap is 0) and sets *n_ids to the count the whole text takes: call again with
 * a larger buffer when *n_ids > cap. */
GPUCORE_API gpucore_status gpucore_tokenizer_encode(const gpucore_tokenizer *tok, const char *text, int64_t len,
                                                    int add_special, int32_t *ids, int64_t cap, int64_t *n_ids);
/* ids to text: the tokens' bytes (byte-level characters mapped back; an added token whose
 * characters are not all byte-level characters is its own UTF-8), special tokens left out when
 * skip_special. Bytes as they come: a UTF-8 sequence split across calls is not replaced, so the
 * pieces of a streamed generation concatenate to the whole. Writes at most cap bytes and a NUL
 * when there is room; *len: the byte count of the whole text (call again when *len >= cap). An id
 * outside the vocabulary is INVALID_ARGUMENT naming it. */
GPUCORE_API gpucore_status gpucore_tokenizer_decode(const gpucore_tokenizer *tok, const int32_t *ids, int64_t n_ids,
                                                    int skip_special, char *text, int64_t cap, int64_t *len);
GPUCORE_API int64_t gpucore_tokenizer_vocab_size(const gpucore_tokenizer *tok); /* -1: NULL */
/* The id of a token string (an added token's content or a vocabulary entry); -1 when absent. */
GPUCORE_API int32_t gpucore_tokenizer_token_to_id(const gpucore_tokenizer *tok, const char *token);
/* The token string of an id as the file holds it (byte-level characters), owned by the tokenizer;
 * NULL for an id outside the vocabulary. */
GPUCORE_API const char *gpucore_tokenizer_id_to_token(const gpucore_tokenizer *tok, int32_t id);
GPUCORE_API int32_t gpucore_tokenizer_bos_id(const gpucore_tokenizer *tok); /* -1: none */
GPUCORE_API int32_t gpucore_tokenizer_eos_id(const gpucore_tokenizer *tok); /* -1: none */
/* tokenizer_config.json's chat_template, owned by the tokenizer; NULL when there is none. */
GPUCORE_API const char *gpucore_tokenizer_chat_template(const gpucore_tokenizer *tok);

/* ---- chat prompts ----
 * A conversation rendered as a model's chat template does, for the template families recognised
 * from its text: ChatML (<|im_start|>role\ncontent<|im_end|>\n, as SmolLM2 and Qwen2 use, with the
 * default system message the template holds), Llama-3 (<|start_header_id|>role<|end_header_id|>,
 * content trimmed, <|eot_id|>, bos_token first), Mistral ([INST] user [/INST] assistant eos_token,
 * bos_token first, user and assistant alternating, no system message) and Zephyr (<|role|>\n content
 * eos_token). Another template is NOT_SUPPORTED with its first line. add_generation_prompt: end
 * with the assistant's header. Writes at most cap bytes and a NUL when there is room; *len: the
 * byte count of the whole prompt (call again when *len >= cap). */
typedef struct gpucore_chat_message { const char *role; const char *content; } gpucore_chat_message;
GPUCORE_API gpucore_status gpucore_chat_render(const char *chat_template, const char *bos_token,
                                               const char *eos_token, const gpucore_chat_message *messages,
                                               int64_t n_messages, int add_generation_prompt, char *out,
                                               int64_t cap, int64_t *len);

#ifdef __cplusplus
}
#endif
#endif /* GPUCORE_H */
