/*
 * json_file.h — reading a JSON object file (src/io/json_file.c).
 */
#ifndef GPUCORE_IO_JSON_FILE_H
#define GPUCORE_IO_JSON_FILE_H
#include "core/internal.h"

/* Reads and parses a JSON object file: *text (free) and *json (a cJSON*, cJSON_Delete). IO when it
 * cannot be read, CORRUPT_FILE when it is not a JSON object, NOT_SUPPORTED without cJSON. op
 * prefixes messages. */
GPUCORE_HIDDEN gpucore_status gpucore_io_read_json(const char *path, char **text, void **json, const char *op);

#endif
