/*
 * backend_registry.c — finds the backend for a device type.
 *
 * The CPU backend is built in. The CUDA backend is a separate module
 * (libgpucore_cuda.so) loaded with dlopen on first use, so libgpucore.so itself
 * loads and runs on machines with no CUDA libraries at all, and a missing
 * libcudnn or libcuda becomes a clear message instead of a loader failure.
 * The test-only cuda-emulated backend (kernel sources on the SIMT layer) is found
 * through GPUCORE_EMULATED_PLUGIN. The search and dlopen (gpucore_module_open,
 * module_loader.h) serve the MPI module too (src/backend/mpi_link.c).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/internal.h"
#include "module_loader.h"
#include "mpi_link.h"

const gpucore_plugin_host gpucore_plugin_host_table = {GPUCORE_BACKEND_ABI, gpucore_set_error, gpucore_log};

typedef struct plugin_slot {
    gpucore_module_spec spec;
    int tried;
    const gpucore_backend *backend;
    char failure[768];
    char path[512];
} plugin_slot;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static plugin_slot cuda_slot = {
    {"GPUCORE_CUDA_PLUGIN", "libgpucore_cuda.so", "backend/cuda", GPUCORE_PLUGIN_ENTRY_NAME}, 0, NULL, "", ""};
static plugin_slot emulated_slot = {{"GPUCORE_EMULATED_PLUGIN", NULL, NULL, GPUCORE_PLUGIN_ENTRY_NAME}, 0, NULL, "", ""};

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

/* "path: why" after what is there (dlerror's text already starts with the path: not twice). */
static void append_error(char *errors, size_t errlen, const char *path, const char *why)
{
    size_t used = strlen(errors), n = strlen(path);
    int named = !strncmp(why, path, n) && why[n] == ':';
    if (used + 1 < errlen)
        snprintf(errors + used, errlen - used, "%s%s%s%s", used ? "; " : "", named ? "" : path, named ? "" : ": ", why);
}

static int try_open(const gpucore_module_spec *spec, const char *path, gpucore_module_accept_fn accept, void *arg,
                    char *errors, size_t errlen)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        append_error(errors, errlen, path, why ? why : "dlopen failed");
        return 0;
    }
    void *entry = dlsym(handle, spec->entry_name);
    char why[256] = "";
    if (!entry) snprintf(why, sizeof why, "exports no %s: not a libgpucore module", spec->entry_name);
    if (!entry || !accept(entry, arg, why, sizeof why)) {
        append_error(errors, errlen, path, why[0] ? why : "refused");
        dlclose(handle);
        return 0;
    }
    return 1; /* the module stays loaded for the life of the process (its handles may be cached anywhere) */
}

int gpucore_module_open(const gpucore_module_spec *spec, gpucore_module_accept_fn accept, void *arg, char *path,
                        size_t path_len, char *errors, size_t errors_len)
{
    const char *env = spec->env_var ? getenv(spec->env_var) : NULL;
    if (env && *env) {
        snprintf(path, path_len, "%s", env);
        return try_open(spec, env, accept, arg, errors, errors_len);
    }
    if (!spec->file_name) return 0;
    char dir[400];
    library_dir(dir, sizeof dir);
    /* Beside the library, in an installed gpucore/ folder, or in the module's build-tree folder. */
    const char *subdirs[] = {"", "/gpucore", spec->build_subdir};
    for (int i = 0; i < 3; i++) {
        if (!subdirs[i]) continue;
        snprintf(path, path_len, "%s%s%s/%s", dir, i == 2 ? "/" : "", subdirs[i], spec->file_name);
        if (try_open(spec, path, accept, arg, errors, errors_len)) return 1;
    }
    return 0;
}

static int accept_backend(void *entry, void *arg, char *why, size_t why_len)
{
    plugin_slot *slot = arg;
    const gpucore_backend *be = NULL;
    if (((gpucore_plugin_entry_fn)entry)(&gpucore_plugin_host_table, &be) != GPUCORE_OK || !be ||
        be->abi != GPUCORE_BACKEND_ABI) {
        snprintf(why, why_len, "not a libgpucore backend module of ABI %d", GPUCORE_BACKEND_ABI);
        return 0;
    }
    slot->backend = be;
    return 1;
}

static void load_slot(plugin_slot *slot)
{
    char errors[700] = "";
    const char *env = getenv(slot->spec.env_var);
    if (!gpucore_module_open(&slot->spec, accept_backend, slot, slot->path, sizeof slot->path, errors,
                             sizeof errors)) {
        slot->path[0] = '\0';
        if (slot->spec.file_name)
            snprintf(slot->failure, sizeof slot->failure,
                     "the CUDA backend module could not be loaded (%s). This build may lack CUDA (meson "
                     "-Dcuda=enabled), or a CUDA library it needs is not on the loader path; set %s to the "
                     "module's path to choose one",
                     errors, slot->spec.env_var);
        else if (env && *env)
            snprintf(slot->failure, sizeof slot->failure, "%s", errors);
        else
            snprintf(slot->failure, sizeof slot->failure,
                     "%s is not set (the emulated backend exists only in test builds)", slot->spec.env_var);
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
    /* MPI's version and the MPI module's path come from that module (loaded here if need be). */
    if (!strcmp(component, "mpi") || !strcmp(component, "mpi_module"))
        return gpucore_mpi_component(component, buf, buf_len);
    /* The CPU backend knows its own components and the build; CUDA ones come from the plugin. */
    gpucore_status st = gpucore_cpu_backend()->component_version(component, buf, buf_len);
    if (st != GPUCORE_ERR_NOT_SUPPORTED) return st;
    const gpucore_backend *cuda = gpucore_backend_get(GPUCORE_DEVICE_CUDA);
    if (!cuda)
        return gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "component_version: '%s' is not known without the CUDA "
                                 "backend: %s", component, cuda_slot.failure);
    return cuda->component_version(component, buf, buf_len);
}
