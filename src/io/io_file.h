/*
 * io_file.h — opening the files the io readers take (safetensors, token data): one place
 * for the read-only open, the regular-file check and the size, with the same messages.
 */
#ifndef GPUCORE_IO_FILE_H
#define GPUCORE_IO_FILE_H
#include <stdint.h>
#include "core/internal.h"

/* Opens path read-only (close-on-exec); refuses what is not a regular file. On success *fd and
 * *size are set and the caller closes *fd; on failure nothing is left open. op prefixes messages. */
GPUCORE_HIDDEN gpucore_status gpucore_io_open_regular(const char *path, const char *op, int *fd, uint64_t *size);

#endif
