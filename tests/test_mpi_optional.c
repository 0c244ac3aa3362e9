/*
 * test_mpi_optional.c — MPI is opened on demand: libgpucore.so works without
 * its MPI module (libgpucore_mpi.so) or without Open MPI, and says what to
 * install. One scenario per process (the module is looked for once):
 *   test_mpi_optional missing             GPUCORE_MPI_MODULE names no file
 *   test_mpi_optional nolibmpi MODULE     a copy of MODULE whose libmpi.so.40 is
 *                                         renamed libmpx.so.40 (libmpi "not installed")
 *   test_mpi_optional notmodule FILE      a shared object that is no MPI module
 *   test_mpi_optional found               the built module loads (no MPI start-up)
 * In the failing scenarios gpucore_comm_create_mpi and the "mpi" component return
 * GPUCORE_ERR_NOT_SUPPORTED with a message naming the packages to install, the
 * variable to set and the loader's own error; nothing is printed; and the library
 * keeps working (a 1-rank communicator's allreduce, tensors, copies).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"

/* What the library writes to stdout/stderr between quiet_begin and quiet_end. */
static int saved_fd[2] = {-1, -1};
static char quiet_path[64];

static void quiet_begin(void)
{
    fflush(stdout);
    fflush(stderr);
    snprintf(quiet_path, sizeof quiet_path, "/tmp/gpucore-mpi-quiet-XXXXXX");
    int fd = mkstemp(quiet_path);
    if (fd < 0) return;
    for (int i = 0; i < 2; i++) {
        saved_fd[i] = dup(i + 1);
        dup2(fd, i + 1);
    }
    close(fd);
}

/* Restores stdout/stderr; returns how many bytes were written meanwhile. */
static long quiet_end(void)
{
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; i++)
        if (saved_fd[i] >= 0) {
            dup2(saved_fd[i], i + 1);
            close(saved_fd[i]);
            saved_fd[i] = -1;
        }
    FILE *f = fopen(quiet_path, "rb");
    long n = -1;
    if (f) {
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fclose(f);
    }
    unlink(quiet_path);
    return n;
}

/* A copy of the module at dst whose NEEDED libmpi.so.40 reads libmpx.so.40 (same length). */
static int copy_without_libmpi(const char *src, const char *dst)
{
    FILE *f = fopen(src, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    int ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    static const char name[] = "libmpi.so.40"; /* with its NUL: the whole soname string */
    int renamed = 0;
    for (long i = 0; ok && i + (long)sizeof name <= n; i++)
        if (!memcmp(buf + i, name, sizeof name)) {
            buf[i + 5] = 'x';
            renamed++;
        }
    FILE *g = ok && renamed ? fopen(dst, "wb") : NULL;
    ok = g && fwrite(buf, 1, (size_t)n, g) == (size_t)n;
    if (g) fclose(g);
    free(buf);
    return ok;
}

/* Everything a program without MPI still does: one rank's allreduce, tensors, copies. */
static void library_still_works(void)
{
    gpucore_context *ctx = NULL;
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    if (!ctx) return;
    gpucore_comm *comm = NULL;
    CHECK_OK(gpucore_comm_create_local(&ctx, 1, &comm));
    int64_t shape[1] = {5};
    gpucore_tensor *t = NULL;
    CHECK_OK(gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &t));
    float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    CHECK_OK(gpucore_copy_from_host(t, in, sizeof in));
    if (comm) {
        CHECK_OK(gpucore_comm_allreduce(comm, t, t, GPUCORE_REDUCE_SUM, NULL));
        CHECK_OK(gpucore_comm_wait(comm, 0, 30));
    }
    CHECK_OK(gpucore_copy_to_host(out, sizeof out, t));
    CHECK(!memcmp(in, out, sizeof in)); /* one rank: the sum is its own data */
    CHECK_OK(gpucore_fill(t, 2.5, NULL));
    CHECK_OK(gpucore_copy_to_host(out, sizeof out, t));
    CHECK(out[0] == 2.5f && out[4] == 2.5f);
    CHECK_OK(gpucore_tensor_destroy(t));
    if (comm) CHECK_OK(gpucore_comm_destroy(comm));
    CHECK_OK(gpucore_context_destroy(ctx));
}

/* MPI must be unavailable, with a message that holds `cause` (the loader's own words). */
static void expect_unavailable(const char *cause)
{
    quiet_begin();
    gpucore_context *ctx = NULL;
    gpucore_status created = gpucore_context_create("cpu", &ctx);
    static int sentinel;
    gpucore_comm *comm = (gpucore_comm *)&sentinel; /* not NULL: the call must clear it */
    gpucore_clear_error();
    gpucore_status st = gpucore_comm_create_mpi(ctx, &comm);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", gpucore_last_error());
    /* asked again: the same answer (the search is not repeated) */
    gpucore_comm *again = NULL;
    gpucore_status st2 = gpucore_comm_create_mpi(ctx, &again);
    int same = !strcmp(msg, gpucore_last_error());
    char ver[256];
    gpucore_clear_error();
    gpucore_status vst = gpucore_component_version("mpi", ver, sizeof ver);
    char vmsg[2048];
    snprintf(vmsg, sizeof vmsg, "%s", gpucore_last_error());
    gpucore_status pst = gpucore_component_version("mpi_module", ver, sizeof ver);
    gpucore_context_destroy(ctx);
    library_still_works();
    long printed = quiet_end();

    printf("comm_create_mpi: %s: %s\n", gpucore_status_string(st), msg);
    CHECK(created == GPUCORE_OK);
    CHECK(st == GPUCORE_ERR_NOT_SUPPORTED && comm == NULL);
    CHECK(st2 == GPUCORE_ERR_NOT_SUPPORTED && again == NULL && same);
    CHECK(strstr(msg, "comm_create_mpi") != NULL);
    CHECK(strstr(msg, "libgpucore_mpi.so") != NULL);
    CHECK(strstr(msg, "openmpi-bin") != NULL && strstr(msg, "libopenmpi3") != NULL);
    CHECK(strstr(msg, "GPUCORE_MPI_MODULE") != NULL);
    CHECK(cause[0] && strstr(msg, cause) != NULL);
    if (!strstr(msg, cause)) fprintf(stderr, "  the message lacks the loader's error \"%s\"\n", cause);
    CHECK(vst == GPUCORE_ERR_NOT_SUPPORTED && strstr(vmsg, "MPI is not available") && strstr(vmsg, cause));
    CHECK(pst == GPUCORE_ERR_NOT_SUPPORTED);
    CHECK(printed == 0); /* the library printed nothing */
    if (printed) fprintf(stderr, "  the library wrote %ld bytes to stdout/stderr\n", printed);
}

/* dlerror's text for path, as the library should quote it. */
static void loader_error(const char *path, char *buf, size_t len)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *e = h ? NULL : dlerror();
    snprintf(buf, len, "%s", e ? e : "");
    if (h) dlclose(h);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const char *env = getenv("GPUCORE_MPI_MODULE");
    char cause[1024] = "";
    if (!strcmp(mode, "missing")) {
        CHECK(env && *env && access(env, F_OK) != 0); /* the module must be unfindable */
        if (env) loader_error(env, cause, sizeof cause);
        expect_unavailable(cause);
    } else if (!strcmp(mode, "nolibmpi") && argc > 2) {
        char dir[] = "/tmp/gpucore-nolibmpi-XXXXXX", path[128];
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof path, "%s/libgpucore_mpi.so", dir);
        CHECK(copy_without_libmpi(argv[2], path));
        setenv("GPUCORE_MPI_MODULE", path, 1); /* read at the first MPI call, below */
        loader_error(path, cause, sizeof cause);
        CHECK(strstr(cause, "libmpx.so.40") != NULL);
        expect_unavailable(cause);
        unlink(path);
        rmdir(dir);
    } else if (!strcmp(mode, "notmodule") && argc > 2) {
        setenv("GPUCORE_MPI_MODULE", argv[2], 1);
        snprintf(cause, sizeof cause, "%s: exports no gpucore_mpi_module_entry", argv[2]);
        expect_unavailable(cause);
    } else if (!strcmp(mode, "found")) {
        char ver[512] = "", path[512] = "";
        CHECK_OK(gpucore_component_version("mpi", ver, sizeof ver));
        CHECK_OK(gpucore_component_version("mpi_module", path, sizeof path));
        size_t n = strlen(path), m = strlen("/libgpucore_mpi.so");
        CHECK(n > m && !strcmp(path + n - m, "/libgpucore_mpi.so") && access(path, R_OK) == 0);
        CHECK(ver[0] != '\0');
        printf("mpi: %s (module %s)\n", ver, path);
        library_still_works();
    } else {
        fprintf(stderr, "usage: test_mpi_optional missing | nolibmpi MODULE | notmodule FILE | found\n");
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "test_mpi_optional %s", mode);
    return check_finish(name);
}
