/*
 * io_file.h — opening and reading the files the io readers take (safetensors, GGUF, token
 * data): one place for the read-only open, the regular-file check and the size, with the same
 * messages, and the positioned read that retries short reads.
 */
#ifndef GPUCORE_IO_FILE_H
#define GPUCORE_IO_FILE_H
#include <stddef.h>
#include <stdint.h>
#include "core/internal.h"

/* Opens path read-only (close-on-exec); refuses what is not a regular file. On success *fd and
 * *size are set and the caller closes *fd; on failure nothing is left open. op prefixes messages. */
GPUCORE_HIDDEN gpucore_status gpucore_io_open_regular(const char *path, const char *op, int *fd, uint64_t *size);

/* pread all of [off, off+n) from fd: 0, -2 when the file ends first, -1 on an error (errno). */
GPUCORE_HIDDEN int gpucore_io_read_at(int fd, void *buf, size_t n, uint64_t off);

#endif
