/*
 * test_core.c — the core API: version, status names, last-error, logging, device
 * enumeration, backend availability (with the reason when CUDA is absent),
 * context creation from every kind of device string, component versions.
 */
#include "check.h"

static int log_calls;
static void count_log(int level, const char *msg, void *user)
{
    (void)level; (void)user;
    if (msg && strstr(msg, "gpucore")) log_calls++;
}

int main(void)
{
    CHECK(gpucore_version() == GPUCORE_VERSION);
    CHECK(!strcmp(gpucore_version_string(), "0.1.0"));
    CHECK(!strcmp(gpucore_status_string(GPUCORE_OK), "GPUCORE_OK"));
    CHECK(!strcmp(gpucore_status_string(GPUCORE_ERR_SHAPE_MISMATCH), "GPUCORE_ERR_SHAPE_MISMATCH"));
    CHECK(!strcmp(gpucore_status_string((gpucore_status)9999), "GPUCORE_ERR_UNKNOWN_STATUS"));
    for (int s = 0; s <= GPUCORE_ERR_INTERNAL; s++) CHECK(strncmp(gpucore_status_string((gpucore_status)s), "GPUCORE_", 8) == 0);

    /* last error is per thread and clearable */
    gpucore_context *ctx = NULL;
    CHECK_STATUS(gpucore_context_create("tpu", &ctx), GPUCORE_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpucore_last_error(), "tpu") != NULL);
    gpucore_clear_error();
    CHECK(gpucore_last_error()[0] == '\0');

    /* logging: off by default unless GPUCORE_LOG; a callback receives lines at the chosen level */
    gpucore_log_level old = gpucore_get_log_level();
    CHECK_STATUS(gpucore_set_log_level((gpucore_log_level)7), GPUCORE_ERR_INVALID_ARGUMENT);
    gpucore_set_log_callback(count_log, NULL);
    CHECK_OK(gpucore_set_log_level(GPUCORE_LOG_DEBUG));
    CHECK_OK(gpucore_context_create("cpu", &ctx));
    CHECK(log_calls > 0);
    CHECK_OK(gpucore_context_destroy(ctx));
    CHECK_OK(gpucore_set_log_level(old));
    gpucore_set_log_callback(NULL, NULL);

    /* devices */
    int n = -1;
    CHECK_OK(gpucore_device_count(GPUCORE_DEVICE_CPU, &n));
    CHECK(n == 1);
    gpucore_device_properties p;
    memset(&p, 0, sizeof p);
    CHECK_STATUS(gpucore_device_get_properties(GPUCORE_DEVICE_CPU, 0, &p), GPUCORE_ERR_INVALID_ARGUMENT); /* struct_size unset */
    p.struct_size = sizeof p;
    CHECK_OK(gpucore_device_get_properties(GPUCORE_DEVICE_CPU, 0, &p));
    CHECK(p.multiprocessors >= 1 && p.total_memory > 0 && p.name[0]);
    CHECK_STATUS(gpucore_device_get_properties(GPUCORE_DEVICE_CPU, 1, &p), GPUCORE_ERR_INVALID_ARGUMENT);

    char why[768];
    gpucore_status cuda = gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why);
    int ncuda = -1;
    CHECK_OK(gpucore_device_count(GPUCORE_DEVICE_CUDA, &ncuda));
    if (cuda == GPUCORE_OK) {
        printf("CUDA is usable here: %d device(s)\n", ncuda);
        CHECK(ncuda >= 1);
        CHECK_OK(gpucore_context_create("cuda", &ctx));
        CHECK(!strcmp(gpucore_context_device_name(ctx), "cuda:0"));
        CHECK_OK(gpucore_context_destroy(ctx));
        CHECK_STATUS(gpucore_context_create("cuda:999", &ctx), GPUCORE_ERR_INVALID_ARGUMENT);
    } else {
        /* No GPU: the reason is specific, an explicit request fails with it, auto falls back to CPU. */
        printf("CUDA unavailable here (expected without a GPU): %s\n", why);
        CHECK(cuda == GPUCORE_ERR_BACKEND_UNAVAILABLE);
        CHECK(ncuda == 0);
        CHECK(strlen(why) > 20);
        CHECK(strstr(why, "driver") || strstr(why, "device") || strstr(why, "module"));
        CHECK_STATUS(gpucore_context_create("cuda", &ctx), GPUCORE_ERR_BACKEND_UNAVAILABLE);
        CHECK(ctx == NULL);
        CHECK(strstr(gpucore_last_error(), "cuda") != NULL);
        CHECK_STATUS(gpucore_context_create("cuda:1", &ctx), GPUCORE_ERR_BACKEND_UNAVAILABLE);
        CHECK_OK(gpucore_context_create("auto", &ctx));
        CHECK(!strcmp(gpucore_context_device_name(ctx), "cpu"));
        CHECK_OK(gpucore_context_destroy(ctx));
    }

    /* device strings */
    const char *bad[] = {"", "cuda:", "cuda:-1", "cuda:x", "cpu:0x", "gpu", "cuda:99999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ctx = NULL;
        gpucore_status st = gpucore_context_create(bad[i], &ctx);
        if (!strcmp(bad[i], "")) { CHECK(st == GPUCORE_OK); gpucore_context_destroy(ctx); } /* "" = auto */
        else CHECK(st == GPUCORE_ERR_INVALID_ARGUMENT || st == GPUCORE_ERR_BACKEND_UNAVAILABLE);
    }
    setenv("GPUCORE_DEVICE", "cpu", 1);
    CHECK_OK(gpucore_context_create(NULL, &ctx));
    gpucore_device_type type;
    int index = -1;
    CHECK_OK(gpucore_context_device(ctx, &type, &index));
    CHECK(type == GPUCORE_DEVICE_CPU && index == 0);
    CHECK_OK(gpucore_context_synchronize(ctx));
    CHECK_OK(gpucore_context_destroy(ctx));
    unsetenv("GPUCORE_DEVICE");

    /* component versions: build always; unknown names fail with a message */
    char buf[512];
    CHECK_OK(gpucore_component_version("build", buf, sizeof buf));
    CHECK(strstr(buf, "libgpucore 0.1.0") != NULL);
    CHECK(gpucore_component_version("no-such-thing", buf, sizeof buf) != GPUCORE_OK);
    CHECK(gpucore_last_error()[0] != '\0');
    CHECK_STATUS(gpucore_component_version(NULL, buf, sizeof buf), GPUCORE_ERR_NULL_POINTER);
    CHECK_STATUS(gpucore_component_version("build", buf, 0), GPUCORE_ERR_INVALID_ARGUMENT);
    return check_finish("test_core");
}
