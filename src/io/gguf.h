/*
 * gguf.h — the GGUF header parser (llama.cpp's model file) as functions over memory, kept
 * apart from file I/O so a fuzzer can drive it with arbitrary bytes, and the file handle
 * the public gpucore_gguf_* calls and the model loader use.
 *
 * Format (little-endian): "GGUF", u32 version (2 or 3), u64 tensor count, u64 key/value
 * count; the key/values (u64-length string key, u32 value type, value; arrays are u32
 * element type, u64 count, elements; strings u64 length + bytes); the tensor infos (name,
 * u32 n_dims <= 4, u64 dims with dims[0] the fastest-varying, u32 ggml type, u64 offset
 * relative to the data section); padding to `general.alignment` (default 32); the data.
 */
#ifndef GPUCORE_GGUF_H
#define GPUCORE_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include "core/internal.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_kv {
    char *key;                         /* NUL-terminated copy */
    int32_t type;                      /* gpucore_gguf_value_type */
    int32_t elem_type;                 /* the element type of an array; == type for a scalar */
    int64_t count;                     /* elements (1 for a scalar) */
    void *values;                      /* numbers and bools: count little-endian elements, copied */
    char **strs;                       /* strings: count NUL-terminated copies in one block (strs[0]) */
    int64_t *lens;                     /* strings: their byte lengths */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    int32_t type;                      /* ggml type id */
    int32_t ndim;
    int64_t dims[GGUF_MAX_DIMS];       /* dims[0] fastest, as in the file */
    uint64_t offset, nbytes;           /* in the data section, checked against it */
} gguf_tensor;

typedef struct gguf_header {
    uint32_t version;
    uint64_t alignment, data_start;    /* data_start: the data section's file offset */
    gguf_kv *kvs;
    int64_t n_kv;
    gguf_tensor *tensors;
    int64_t n_tensors;
} gguf_header;

/* Parse the first `avail` bytes of a file of file_size bytes. On success *out owns everything.
 * When the header runs past `avail` but not past file_size, returns GPUCORE_ERR_CORRUPT_FILE
 * with *need_more set (no message worth keeping: read more and call again). Otherwise errors are
 * GPUCORE_ERR_CORRUPT_FILE / NOT_SUPPORTED / OUT_OF_MEMORY with a message naming the problem. */
GPUCORE_HIDDEN gpucore_status gguf_parse(const uint8_t *buf, size_t avail, uint64_t file_size, int *need_more,
                                         gguf_header **out);
GPUCORE_HIDDEN void gguf_header_free(gguf_header *h);

/* ggml type facts: elements per block and bytes per block (0 for an unknown id), its name. */
GPUCORE_HIDDEN int64_t gguf_type_block(int type);
GPUCORE_HIDDEN int64_t gguf_type_block_bytes(int type);
GPUCORE_HIDDEN const char *gguf_type_name(int type);

/* n elements of a tensor of ggml type `type` held at `raw` as f32 (F32, F16, BF16, F64 and the
 * quantized block formats the library decodes); NOT_SUPPORTED naming the type otherwise. */
GPUCORE_HIDDEN gpucore_status gguf_dequantize(int type, const void *raw, int64_t n, float *out, const char *op,
                                              const char *name);

/* The opened file (the handle behind gpucore_gguf). */
struct gpucore_gguf {
    uint32_t magic;
    int fd;
    char *path;
    uint64_t file_size;
    gguf_header *h;
};

/* The gpucore_quant_format of a ggml block type (Q4_0 .. Q6_K), -1 for any other type. */
GPUCORE_HIDDEN int gguf_quant_format(int type);
/* Tensor i's bytes as stored, in a new host buffer of *nbytes bytes (free it). */
GPUCORE_HIDDEN gpucore_status gguf_read_raw(gpucore_gguf *f, int64_t i, void **out, int64_t *nbytes, const char *op);
/* Tensor i (checked by the caller) as f32 in a new host buffer of its element count (free it). */
GPUCORE_HIDDEN gpucore_status gguf_read_f32(gpucore_gguf *f, int64_t i, float **out, const char *op);
/* n f32 values rewritten in place as dtype (f32: unchanged; bf16, f16: rounded to nearest even into
 * the first 2n bytes). */
GPUCORE_HIDDEN void gguf_f32_to_dtype(float *v, int64_t n, int dtype);
/* The public handle check. */
GPUCORE_HIDDEN gpucore_status gguf_check(const gpucore_gguf *f, const char *op);

#endif
