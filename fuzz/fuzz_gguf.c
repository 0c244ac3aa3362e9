/*
 * fuzz_gguf.c — libFuzzer target: the GGUF header parser over an in-memory file, whole
 * (as gpucore_gguf_open reads it) and cut at a random length with the rest still to come
 * (the "read more" path). Every input must be accepted with consistent entries or refused
 * with a status — never a crash, an out-of-bounds read, or an allocation sized by an
 * unchecked field. Accepted headers are checked for the invariants the reader relies on.
 */
#include <stdint.h>
#include <stdlib.h>
#include "io/gguf.h"

static void check_header(const gguf_header *h, size_t size)
{
    if (h->alignment == 0 || (h->alignment & (h->alignment - 1))) abort();
    for (int64_t i = 0; i < h->n_kv; i++) {
        const gguf_kv *kv = &h->kvs[i];
        if (!kv->key || kv->count < 0 || (kv->elem_type == 8 ? !kv->strs : !kv->values)) abort();
    }
    for (int64_t i = 0; i < h->n_tensors; i++) {
        const gguf_tensor *t = &h->tensors[i];
        if (!t->name || t->ndim < 1 || t->ndim > GGUF_MAX_DIMS || t->offset % h->alignment) abort();
        if (h->data_start > size || t->offset + t->nbytes > size - h->data_start) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_header *h = NULL;
    int more = 0;
    if (gguf_parse(data, size, size, &more, &h) == GPUCORE_OK) {
        check_header(h, size);
        gguf_header_free(h);
    } else if (more) {
        abort(); /* the whole file was given: nothing more to read */
    }
    if (size > 1) { /* the first part of the file only: accepted (then the same), refused, or "read more" */
        size_t cut = data[0] % size;
        if (gguf_parse(data, cut, size, &more, &h) == GPUCORE_OK) {
            check_header(h, size);
            gguf_header_free(h);
        }
    }
    return 0;
}
