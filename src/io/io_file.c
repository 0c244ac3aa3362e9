/*
 * io_file.c — the read-only open shared by the safetensors and token-data readers.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/io_file.h"

gpucore_status gpucore_io_open_regular(const char *path, const char *op, int *fd_out, uint64_t *size)
{
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gpucore_set_error(GPUCORE_ERR_IO, "%s: cannot open \"%s\": %s", op, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return gpucore_set_error(GPUCORE_ERR_IO, "%s: \"%s\" is not a regular file", op, path);
    }
    *fd_out = fd;
    *size = (uint64_t)sb.st_size;
    return GPUCORE_OK;
}
