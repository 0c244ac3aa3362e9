/*
 * backend_registry.c — finds the backend for a device type.
 *
 * The CPU backend is built in. The CUDA backend is a separate module
 * (libgpucore_cuda.so) loaded with dlopen on first use, so libgpucore.so itself
 * loads and runs on machines with no CUDA libraries at all, and a missing
 * libcudnn or libcuda becomes a clear message instead of a loader failure.
 * The test-only cuda-emulated backend (kernel sources on the SIMT layer) is found
 * through GPUCORE_EMULATED_PLUGIN.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"

const gpucore_plugin_host gpucore_plugin_host_table = {GPUCORE_BACKEND_ABI, gpucore_set_error, gpucore_log};

typedef struct plugin_slot {
    const char *env_var;
    const char *file_name;
    int tried;
    const gpucore_backend *backend;
    char failure[768];
    char path[512];
} plugin_slot;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static plugin_slot cuda_slot = {"GPUCORE_CUDA_PLUGIN", "libgpucore_cuda.so", 0, NULL, "", ""};
static plugin_slot emulated_slot = {"GPUCORE_EMULATED_PLUGIN", NULL, 0, NULL, "", ""};

/* Directory holding libgpucore.so, so the plugin beside it is found wherever installed. */
static void library_dir(char *buf, size_t len)
{
    Dl_info info;
    buf[0] = '\0';
    if (dladdr((void *)gpucore_version, &info) && info.dli_fname) {
        snprintf(buf, len, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) *slash = '\0';
        else snprintf(buf, len, ".");
    }
}

static int try_load(plugin_slot *slot, const char *path, char *errors, size_t errlen)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t used = strlen(errors);
    if (!handle) {
        const char *why = dlerror();
        snprintf(errors + used, errlen - used, "%s%s: %s", used ? "; " : "", path, why ? why : "dlopen failed");
        return 0;
    }
    gpucore_plugin_entry_fn entry = (gpucore_plugin_entry_fn)dlsym(handle, GPUCORE_PLUGIN_ENTRY_NAME);
    const gpucore_backend *be = NULL;
    if (!entry || entry(&gpucore_plugin_host_table, &be) != GPUCORE_OK || !be || be->abi != GPUCORE_BACKEND_ABI) {
        snprintf(errors + used, errlen - used, "%s%s: not a libgpucore backend module of ABI %d", used ? "; " : "",
                 path, GPUCORE_BACKEND_ABI);
        dlclose(handle);
        return 0;
    }
    /* The module stays loaded for the life of the process (its handles may be cached anywhere). */
    slot->backend = be;
    snprintf(slot->path, sizeof slot->path, "%s", path);
    return 1;
}

static void load_slot(plugin_slot *slot)
{
    char errors[700] = "";
    const char *env = getenv(slot->env_var);
    if (env && *env) {
        try_load(slot, env, errors, sizeof errors);
    } else if (slot->file_name) {
        char dir[400], path[512];
        library_dir(dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s", dir, slot->file_name);
        /* Beside the library, in an installed gpucore/ folder, or in the build tree's backend/cuda/. */
        static const char *subdirs[] = {"", "/gpucore", "/backend/cuda"};
        for (int i = 0; i < 3 && !slot->backend; i++) {
            snprintf(path, sizeof path, "%s%s/%s", dir, subdirs[i], slot->file_name);
            try_load(slot, path, errors, sizeof errors);
        }
    } else {
        snprintf(errors, sizeof errors, "%s is not set (the emulated backend exists only in test builds)",
                 slot->env_var);
    }
    if (!slot->backend) {
        if (slot->file_name)
            snprintf(slot->failure, sizeof slot->failure,
                     "the CUDA backend module could not be loaded (%s). This build may lack CUDA (meson "
                     "-Dcuda=enabled), or a CUDA library it needs is not on the loader path; set %s to the "
                     "module's path to choose one",
                     errors, slot->env_var);
        else
            snprintf(slot->failure, sizeof slot->failure, "%s", errors);
        gpucore_log(GPUCORE_LOG_INFO, "%s", slot->failure);
    }
    slot->tried = 1;
}

const gpucore_backend *gpucore_backend_get(gpucore_device_type type)
{
    plugin_slot *slot;
    switch (type) {
    case GPUCORE_DEVICE_CPU: return gpucore_cpu_backend();
    case GPUCORE_DEVICE_CUDA: slot = &cuda_slot; break;
    case GPUCORE_DEVICE_CUDA_EMULATED: slot = &emulated_slot; break;
    default:
        gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "device type %d is not a gpucore_device_type", (int)type);
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    if (!slot->tried) load_slot(slot);
    pthread_mutex_unlock(&registry_lock);
    if (!slot->backend) gpucore_set_error(GPUCORE_ERR_BACKEND_UNAVAILABLE, "%s", slot->failure);
    return slot->backend;
}

gpucore_status gpucore_backend_available(gpucore_device_type type, char *why, size_t why_len)
{
    const gpucore_backend *be = gpucore_backend_get(type);
    gpucore_status st;
    char reason[768] = "";
    if (!be) {
        st = GPUCORE_ERR_BACKEND_UNAVAILABLE;
        snprintf(reason, sizeof reason, "%s", gpucore_last_error());
    } else {
        st = be->available(reason, sizeof reason);
        if (st != GPUCORE_OK) gpucore_set_error(st, "%s", reason);
    }
    if (why && why_len) snprintf(why, why_len, "%s", reason);
    return st;
}

gpucore_status gpucore_component_version(const char *component, char *buf, size_t buf_len)
{
    if (!component || !buf) return gpucore_set_error(GPUCORE_ERR_NULL_POINTER, "component_version: NULL argument");
    if (buf_len == 0) return gpucore_set_error(GPUCORE_ERR_INVALID_ARGUMENT, "component_version: buf_len is 0");
    if (!strcmp(component, "cuda_plugin")) {
        if (!gpucore_backend_get(GPUCORE_DEVICE_CUDA)) return GPUCORE_ERR_NOT_SUPPORTED;
        snprintf(buf, buf_len, "%s", cuda_slot.path);
        return GPUCORE_OK;
    }
    /* The CPU backend knows its own components and the build; CUDA ones come from the plugin. */
    gpucore_status st = gpucore_cpu_backend()->component_version(component, buf, buf_len);
    if (st != GPUCORE_ERR_NOT_SUPPORTED) return st;
    const gpucore_backend *cuda = gpucore_backend_get(GPUCORE_DEVICE_CUDA);
    if (!cuda)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "component_version: '%s' is not known without the CUDA "
                                 "backend: %s", component, cuda_slot.failure);
    return cuda->component_version(component, buf, buf_len);
}
