/*
 * json_file.c — reading a JSON object file: the model layer's configs (config.json,
 * adapter_config.json, the weights index) and the tokenizer's tokenizer.json.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io/json_file.h"
#include "gpucore_config.h"

#if GPUCORE_HAVE_CJSON
#include <cjson/cJSON.h>

/* The whole file as a NUL-terminated string. */
static gpucore_status read_text(const char *path, char **out, const char *op)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return gpucore_set_error(GPUCORE_ERR_IO, "%s: cannot open '%s': %s", op, path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, ncap);
            if (!nb) { free(buf); fclose(f); return gpucore_set_error(GPUCORE_ERR_OUT_OF_MEMORY, "%s: out of host memory reading '%s'", op, path); }
            buf = nb; cap = ncap;
        }
        size_t n = fread(buf + len, 1, 4096, f);
        len += n;
        if (n < 4096) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return gpucore_set_error(GPUCORE_ERR_IO, "%s: reading '%s' failed", op, path); }
    buf[len] = 0;
    *out = buf;
    return GPUCORE_OK;
}

gpucore_status gpucore_io_read_json(const char *path, char **text, void **json, const char *op)
{
    *json = NULL;
    gpucore_status st = read_text(path, text, op);
    if (st) return st;
    cJSON *j = cJSON_Parse(*text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        free(*text); *text = NULL;
        return gpucore_set_error(GPUCORE_ERR_CORRUPT_FILE, "%s: '%s' is not a JSON object (garbled or truncated)", op, path);
    }
    *json = j;
    return GPUCORE_OK;
}

#else /* no cJSON */

gpucore_status gpucore_io_read_json(const char *path, char **text, void **json, const char *op)
{
    (void)path; *text = NULL; *json = NULL;
    return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: this build has no JSON library (cJSON)", op);
}
#endif
