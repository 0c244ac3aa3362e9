/*
 * standin_nvml.c — libnvidia-ml.so.1 for the contract build (found through the
 * module's run path): the few NVML entries the CUDA backend resolves with dlsym.
 * Fixed telemetry; one process per device listed. Stand-ins for NVML check
 * nothing beyond the handle: the backend only reads telemetry for the doctor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
static int initialised;
static int devices[16];

EXPORT int nvmlInit_v2(void) { initialised = 1; return 0; }
EXPORT int nvmlShutdown(void) { initialised = 0; return 0; }

EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev)
{
    unsigned dom = 0, b = 0, d = 0;
    if (!initialised) return 1; /* NVML_ERROR_UNINITIALIZED */
    if (!bus || !dev || sscanf(bus, "%x:%x:%x", &dom, &b, &d) != 3 || b < 0x10 || b >= 0x10 + 16) return 6; /* NOT_FOUND */
    *dev = &devices[b - 0x10];
    return 0;
}

EXPORT int nvmlDeviceGetUtilizationRates(void *dev, unsigned *v) { if (!dev) return 2; v[0] = 7; v[1] = 3; return 0; }
EXPORT int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *v) { (void)sensor; if (!dev) return 2; *v = 41; return 0; }
EXPORT int nvmlDeviceGetClockInfo(void *dev, int which, unsigned *v) { if (!dev) return 2; *v = which == 1 ? 1980 : 2619; return 0; }

typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } proc_info;
EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *n, proc_info *out)
{
    if (!dev || !n) return 2;
    if (*n < 1) { *n = 1; return 7; } /* INSUFFICIENT_SIZE */
    out[0] = (proc_info){(unsigned)getpid(), 64ull << 20, 0, 0};
    *n = 1;
    return 0;
}

/* nvmlMemory_t (v1): total, free, used bytes. The device's memory is STANDIN_MEM_MB (as the runtime's), the one
 * listed process uses 64 MiB. */
typedef struct { unsigned long long total, free, used; } memory_info;
EXPORT int nvmlDeviceGetMemoryInfo(void *dev, memory_info *m)
{
    if (!dev || !m) return 2; /* INVALID_ARGUMENT */
    const char *mb = getenv("STANDIN_MEM_MB");
    m->total = (unsigned long long)(mb ? atol(mb) : 4096) << 20;
    m->used = 64ull << 20;
    m->free = m->total - m->used;
    return 0;
}

EXPORT int nvmlSystemGetDriverVersion(char *buf, unsigned len) { snprintf(buf, len, "580.00 (stand-in)"); return 0; }
