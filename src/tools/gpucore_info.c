/*
 * gpucore_info.c — `gpucore-info`, the doctor: walks the layers users get stuck
 * in (driver, runtime compatibility, devices, libraries, visibility, peer access,
 * NVML telemetry and processes), then runs a smoke test (allocate, copy, run a
 * kernel, compare with the CPU) on every device, and says what to do next at
 * each failed layer.
 *
 * Usage: gpucore-info [--json] [--device SPEC]
 * Exit codes: 0 the selected device (SPEC, else GPUCORE_DEVICE, else auto) works;
 *             1 its smoke test failed; 2 bad usage; 3 it cannot be used at all.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpucore.h"

#define MAX_ITEMS 256

/* Output is collected as (section, key, value) rows, then printed as text or JSON. */
typedef struct row { char section[32]; char key[64]; char value[768]; } row;
static row rows[MAX_ITEMS];
static int nrows;

static void put(const char *section, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(const char *section, const char *key, const char *fmt, ...)
{
    if (nrows >= MAX_ITEMS) return;
    row *r = &rows[nrows++];
    snprintf(r->section, sizeof r->section, "%s", section);
    snprintf(r->key, sizeof r->key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->value, sizeof r->value, fmt, ap);
    va_end(ap);
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_json(void)
{
    printf("{");
    const char *open = NULL;
    for (int i = 0; i < nrows; i++) {
        if (!open || strcmp(open, rows[i].section)) {
            if (open) printf("},");
            json_string(rows[i].section);
            printf(":{");
            open = rows[i].section;
        } else {
            printf(",");
        }
        json_string(rows[i].key);
        printf(":");
        json_string(rows[i].value);
    }
    if (open) printf("}");
    printf("}\n");
}

static void print_text(void)
{
    const char *open = NULL;
    for (int i = 0; i < nrows; i++) {
        if (!open || strcmp(open, rows[i].section)) {
            printf("%s== %s\n", open ? "\n" : "", rows[i].section);
            open = rows[i].section;
        }
        printf("  %-22s %s\n", rows[i].key, rows[i].value);
    }
}

static void component(const char *section, const char *name)
{
    char buf[512];
    if (gpucore_component_version(name, buf, sizeof buf) == GPUCORE_OK) put(section, name, "%s", buf);
    else put(section, name, "not available: %s", gpucore_last_error());
}

/* Allocate, fill, random-fill, copy back; compare with the CPU backend's bits. */
static int smoke_test(const char *device, char *detail, size_t len)
{
    enum { N = 4099 };
    gpucore_context *ctx = NULL, *cpu = NULL;
    gpucore_tensor *t = NULL, *r = NULL;
    float *host = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N);
    int64_t shape[1] = {N};
    int ok = 0;
    if (!host || !ref) { snprintf(detail, len, "out of host memory"); goto done; }
    if (gpucore_context_create(device, &ctx) || gpucore_context_create("cpu", &cpu)) {
        snprintf(detail, len, "context: %s", gpucore_last_error());
        goto done;
    }
    if (gpucore_tensor_create(ctx, GPUCORE_F32, 1, shape, &t) || gpucore_fill(t, 3.5, NULL) ||
        gpucore_copy_to_host(host, N * 4, t)) {
        snprintf(detail, len, "fill: %s", gpucore_last_error());
        goto done;
    }
    for (int i = 0; i < N; i++)
        if (host[i] != 3.5f) { snprintf(detail, len, "fill wrote %g at %d instead of 3.5", host[i], i); goto done; }
    if (gpucore_random(t, GPUCORE_NORMAL, 0, 1, 1234, 0, NULL) || gpucore_copy_to_host(host, N * 4, t) ||
        gpucore_tensor_create(cpu, GPUCORE_F32, 1, shape, &r) || gpucore_random(r, GPUCORE_NORMAL, 0, 1, 1234, 0, NULL) ||
        gpucore_copy_to_host(ref, N * 4, r)) {
        snprintf(detail, len, "random: %s", gpucore_last_error());
        goto done;
    }
    if (memcmp(host, ref, sizeof(float) * N)) {
        snprintf(detail, len, "random numbers differ from the CPU backend's for the same seed");
        goto done;
    }
    snprintf(detail, len, "ok (allocate, fill, Philox normal fill of %d floats identical to the CPU's, copy back)", N);
    ok = 1;
done:
    gpucore_tensor_destroy(t);
    gpucore_tensor_destroy(r);
    gpucore_context_destroy(ctx);
    gpucore_context_destroy(cpu);
    free(host);
    free(ref);
    return ok;
}

int main(int argc, char **argv)
{
    int json = 0;
    const char *device = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else {
            fprintf(stderr, "usage: gpucore-info [--json] [--device cpu|cuda|cuda:N|auto]\n");
            return 2;
        }
    }
    if (!device) device = getenv("GPUCORE_DEVICE");
    if (!device) device = "auto";

    put("library", "version", "%s", gpucore_version_string());
    component("library", "build");

    /* Layer 1-2: driver and runtime. */
    char why[1024];
    gpucore_status cuda_st = gpucore_backend_available(GPUCORE_DEVICE_CUDA, why, sizeof why);
    char buf[512];
    if (gpucore_component_version("cuda_plugin", buf, sizeof buf) == GPUCORE_OK) put("cuda", "backend module", "%s", buf);
    else put("cuda", "backend module", "not loaded: %s", gpucore_last_error());
    if (gpucore_component_version("cuda_driver", buf, sizeof buf) == GPUCORE_OK) put("cuda", "driver", "%s", buf);
    else put("cuda", "driver", "none");
    if (gpucore_component_version("cuda_runtime", buf, sizeof buf) == GPUCORE_OK) put("cuda", "runtime (built with)", "%s", buf);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    put("cuda", "CUDA_VISIBLE_DEVICES", "%s", cvd ? cvd : "(not set: all devices visible)");
    if (cuda_st == GPUCORE_OK) {
        put("cuda", "status", "usable");
    } else {
        put("cuda", "status", "unavailable: %s", why);
        put("cuda", "next step", "the CPU backend will be used for device=auto; GPUCORE_DEVICE=cuda will fail until "
                                 "the cause above is fixed");
    }

    /* Layer 3: devices. */
    int ncuda = 0;
    gpucore_device_count(GPUCORE_DEVICE_CUDA, &ncuda);
    put("devices", "cuda devices", "%d", ncuda);
    for (int d = 0; d < ncuda; d++) {
        gpucore_device_properties p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        char key[32];
        snprintf(key, sizeof key, "cuda:%d", d);
        if (gpucore_device_get_properties(GPUCORE_DEVICE_CUDA, d, &p)) {
            put("devices", key, "properties failed: %s", gpucore_last_error());
            continue;
        }
        char free_text[48] = "free unknown (no NVML)";
        if (p.free_memory >= 0) snprintf(free_text, sizeof free_text, "%.1f GiB free", p.free_memory / 1073741824.0);
        put("devices", key, "%s, sm_%d%d, %d SMs, %.1f GiB total, %s, bus %s", p.name, p.compute_major,
            p.compute_minor, p.multiprocessors, p.total_memory / 1073741824.0, free_text, p.pci_bus_id);
        snprintf(key, sizeof key, "cuda:%d code", d);
        if (p.has_native_code) put("devices", key, "machine code (SASS) for sm_%d%d is in this build", p.compute_major, p.compute_minor);
        else if (p.has_ptx) put("devices", key, "no SASS for sm_%d%d: the driver JIT-compiles PTX at first use (slow start); rebuild with -Dgpu_archs=...,%d%d", p.compute_major, p.compute_minor, p.compute_major, p.compute_minor);
        else put("devices", key, "NO code for sm_%d%d in this build: rebuild with -Dgpu_archs=%d%d", p.compute_major, p.compute_minor, p.compute_major, p.compute_minor);
        snprintf(key, sizeof key, "cuda:%d telemetry", d);
        if (p.utilization_percent >= 0)
            put("devices", key, "utilisation %d%%, %d C, SM clock %d MHz, memory clock %d MHz", p.utilization_percent,
                p.temperature_c, p.clock_khz / 1000, p.memory_clock_khz / 1000);
        else
            put("devices", key, "NVML not available (it ships with the driver: libnvidia-ml.so.1)");
        int64_t pids[32], used[32];
        int np = 0;
        snprintf(key, sizeof key, "cuda:%d processes", d);
        if (gpucore_device_get_processes(d, pids, used, 32, &np) == GPUCORE_OK) {
            char list[700] = "";
            size_t n = 0;
            for (int i = 0; i < np && i < 32 && n < sizeof list - 40; i++)
                n += (size_t)snprintf(list + n, sizeof list - n, "%spid %lld: %.2f GiB", i ? ", " : "",
                                      (long long)pids[i], used[i] / 1073741824.0);
            put("devices", key, "%d holding memory%s%s", np, np ? ": " : "", list);
        } else {
            put("devices", key, "unknown (%s)", gpucore_last_error());
        }
    }
    for (int a = 0; a < ncuda; a++)
        for (int b = 0; b < ncuda; b++) {
            if (a == b) continue;
            int can = 0;
            char key[32];
            snprintf(key, sizeof key, "peer %d->%d", a, b);
            gpucore_device_can_access_peer(a, b, &can);
            put("devices", key, "%s", can ? "yes" : "no");
        }
    {
        gpucore_device_properties p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        if (gpucore_device_get_properties(GPUCORE_DEVICE_CPU, 0, &p) == GPUCORE_OK)
            put("devices", "cpu", "%s, %d cores, %.1f GiB total, %.1f GiB free", p.name, p.multiprocessors,
                p.total_memory / 1073741824.0, p.free_memory / 1073741824.0);
    }

    /* Layer 4: libraries. */
    component("libraries", "cublas");
    component("libraries", "cudnn");
    component("libraries", "nccl");
    component("libraries", "nvml");
    component("libraries", "openblas");
    component("libraries", "openmp");
    /* MPI lives in a module opened on first use: say whether it loads, and why not. */
    if (gpucore_component_version("mpi", buf, sizeof buf) == GPUCORE_OK) {
        char path[512] = "";
        gpucore_component_version("mpi_module", path, sizeof path);
        put("libraries", "mpi", "available: %s (module %s)", buf, path);
    } else {
        put("libraries", "mpi", "unavailable: %s", gpucore_last_error());
    }

    /* Layer 5: smoke tests. */
    char detail[512];
    int cpu_ok = smoke_test("cpu", detail, sizeof detail);
    put("smoke test", "cpu", "%s", detail);
    for (int d = 0; d < ncuda; d++) {
        char spec[32];
        snprintf(spec, sizeof spec, "cuda:%d", d);
        int ok = smoke_test(spec, detail, sizeof detail);
        put("smoke test", spec, "%s%s", ok ? "" : "FAILED: ", detail);
    }

    /* The verdict for the selected device. */
    int code;
    gpucore_context *ctx = NULL;
    if (gpucore_context_create(device, &ctx) != GPUCORE_OK) {
        put("selected", "device", "%s: cannot be used: %s", device, gpucore_last_error());
        code = 3;
    } else {
        const char *name = gpucore_context_device_name(ctx);
        char spec[64];
        snprintf(spec, sizeof spec, "%s", name);
        gpucore_context_destroy(ctx);
        int ok = !strcmp(spec, "cpu") ? cpu_ok : smoke_test(spec, detail, sizeof detail);
        put("selected", "device", "%s (from %s)%s", spec, device, ok ? ": works" : ": smoke test FAILED");
        code = ok ? 0 : 1;
    }
    put("selected", "exit code", "%d", code);
    if (json) print_json();
    else print_text();
    return code;
}
