/*
 * fuzz_safetensors.c — libFuzzer target: the safetensors parser over an
 * in-memory file (8-byte header length, JSON header, data). Every input must be
 * accepted with consistent entries or refused with a status — never a crash,
 * an out-of-bounds read, or an allocation sized by an unchecked field. Accepted
 * headers are checked for the invariants the loader relies on.
 */
#include <stdint.h>
#include <stdlib.h>
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gpucore_st_header *h = NULL;
    if (gpucore_st_parse_buffer(data, size, &h) != GPUCORE_OK) return 0;
    uint64_t data_size = 0;
    if (size >= 8) {
        uint64_t header_len = 0;
        for (int i = 7; i >= 0; i--) header_len = (header_len << 8) | data[i];
        data_size = size - 8 - header_len;
    }
    for (int64_t i = 0; i < h->count; i++) {
        const gpucore_st_entry *e = &h->entries[i];
        if (e->begin > e->end || e->end > data_size || e->ndim < 0 || e->ndim > GPUCORE_MAX_DIMS || !e->name)
            abort(); /* the parser accepted an entry the loader would misuse */
    }
    gpucore_st_header_free(h);
    return 0;
}
