/*
 * io_file.c — the read-only open and the positioned read shared by the io readers.
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

int gpucore_io_read_at(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r == 0 ? -2 : -1;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}
