/*
 * safetensors.h — the safetensors header parser as functions over memory, kept
 * apart from file I/O so a fuzzer can drive it with arbitrary bytes.
 *
 * Format: u64 little-endian N, N bytes of UTF-8 JSON, then the data section.
 * The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets relative to the data section) and may hold "__metadata__": {str: str}.
 */
#ifndef GPUCORE_SAFETENSORS_H
#define GPUCORE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "core/internal.h"

/* Headers longer than this are refused (the reference implementation's limit). */
#define GPUCORE_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct gpucore_st_entry {
    char *name;
    int32_t dtype;                     /* gpucore_dtype */
    int32_t ndim;
    int32_t signed8;                   /* dtype I8, held as GPUCORE_U8 bytes: only gpucore_st_read_i8 reads it */
    int64_t shape[GPUCORE_MAX_DIMS];
    uint64_t begin, end;               /* byte offsets in the data section, checked */
} gpucore_st_entry;

typedef struct gpucore_st_header {
    gpucore_st_entry *entries;         /* file (JSON) order */
    int64_t count;
    char **meta_keys, **meta_values;
    int64_t meta_count;
} gpucore_st_header;

/* Parse and check a header of json_len bytes (not NUL-terminated) against a data
 * section of data_size bytes. On success *out owns everything; on failure
 * GPUCORE_ERR_CORRUPT_FILE (or NOT_SUPPORTED / OUT_OF_MEMORY) with a message. */
GPUCORE_HIDDEN gpucore_status gpucore_st_parse_header(const char *json, size_t json_len, uint64_t data_size,
                                                      gpucore_st_header **out);
/* Parse a whole file held in memory: the 8-byte length, the header, the data. */
GPUCORE_HIDDEN gpucore_status gpucore_st_parse_buffer(const uint8_t *buf, size_t size, gpucore_st_header **out);
GPUCORE_HIDDEN void gpucore_st_header_free(gpucore_st_header *h);

/* Whether the file holds a tensor of that name, whatever its dtype (I8 included). */
GPUCORE_HIDDEN int gpucore_st_has(const struct gpucore_safetensors *f, const char *name);
/* An I8 tensor (bitsandbytes' int8 weights; libgpucore has no int8 tensor type, so the public
 * calls refuse it): its ndim and shape, and with dst (cap bytes) its bytes read into host memory.
 * INVALID_ARGUMENT when the file has no such tensor, DTYPE_MISMATCH when it is not I8. */
struct gpucore_safetensors;
GPUCORE_HIDDEN gpucore_status gpucore_st_read_i8(struct gpucore_safetensors *f, const char *name, int *ndim,
                                                 int64_t *shape, void *dst, int64_t cap);

/* gpucore_safetensors_save, with the u8 tensors whose i8[i] is non-NULL written as dtype I8 (their
 * bytes as they are: bitsandbytes' int8 weights); i8 NULL: none. */
GPUCORE_HIDDEN gpucore_status gpucore_st_save_i8(const char *path, const char *const *names,
                                                 gpucore_tensor *const *ts, const char *const *i8, int64_t count,
                                                 const char *const *mk, const char *const *mv, int64_t mcount);

/* "F32" for GPUCORE_F32, ...; NULL for an unknown dtype. */
GPUCORE_HIDDEN const char *gpucore_st_dtype_string(int dtype);

#endif
