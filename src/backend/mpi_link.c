/*
 * mpi_link.c — libgpucore.so's side of the MPI module (mpi_module.h): loads
 * libgpucore_mpi.so on first use (gpucore_comm_create_mpi, the "mpi" component)
 * with the loader the CUDA backend module uses, and turns a missing module or
 * a missing Open MPI into GPUCORE_ERR_NOT_SUPPORTED with what to install and the
 * loader's own words. libgpucore.so itself has no MPI dependency.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_link.h"
#include "mpi_module.h"
#include "backend/module_loader.h"
#include "gpucore_config.h"

static pthread_mutex_t mpi_link_mu = PTHREAD_MUTEX_INITIALIZER;
static int mpi_tried;
static const gpucore_mpi_module *mpi_mod; /* set once, never cleared: the module stays loaded */
static char mpi_path[512];
static char mpi_failure[1024];

static int accept_mpi_module(void *entry, void *arg, char *why, size_t why_len)
{
    const gpucore_mpi_module *m = NULL;
    if (((gpucore_mpi_entry_fn)entry)(&gpucore_plugin_host_table, &m) != GPUCORE_OK || !m ||
        m->abi != GPUCORE_MPI_MODULE_ABI) {
        snprintf(why, why_len, "not a libgpucore MPI module of ABI %d", GPUCORE_MPI_MODULE_ABI);
        return 0;
    }
    *(const gpucore_mpi_module **)arg = m;
    return 1;
}

static void mpi_load(void)
{
    static const gpucore_module_spec spec = {GPUCORE_MPI_MODULE_ENV, GPUCORE_MPI_MODULE_FILE, "backend/mpi",
                                             GPUCORE_MPI_ENTRY_NAME};
    const char *env = getenv(GPUCORE_MPI_MODULE_ENV);
    char errors[700] = "";
    const gpucore_mpi_module *m = NULL;
    if (!GPUCORE_HAVE_MPI && !(env && *env)) {
        snprintf(mpi_failure, sizeof mpi_failure,
                 "this build of libgpucore has no MPI module (install Open MPI's development files, e.g. Debian's "
                 "libopenmpi-dev, and rebuild with meson -Dmpi=enabled)");
    } else if (gpucore_module_open(&spec, accept_mpi_module, &m, mpi_path, sizeof mpi_path, errors, sizeof errors)) {
        mpi_mod = m;
    } else {
        mpi_path[0] = '\0';
        snprintf(mpi_failure, sizeof mpi_failure,
                 "the MPI module %s could not be loaded (%s). The module is installed beside libgpucore.so and "
                 "needs Open MPI's runtime library (libmpi.so.40) on the loader path: install Open MPI (Debian/"
                 "Ubuntu: openmpi-bin and libopenmpi3) or add its lib folder to LD_LIBRARY_PATH; set %s to the "
                 "module's path to choose one",
                 GPUCORE_MPI_MODULE_FILE, errors, GPUCORE_MPI_MODULE_ENV);
    }
    if (!mpi_mod) gpucore_log(GPUCORE_LOG_INFO, "comm: MPI unavailable: %s", mpi_failure);
    mpi_tried = 1;
}

/* The loaded module, or NULL with NOT_SUPPORTED and the reason (naming op) set; communicator
 * calls add that CUDA has a way without MPI. */
static const gpucore_mpi_module *mpi_module(const char *op)
{
    const int comm = !strncmp(op, "comm_", 5);
    pthread_mutex_lock(&mpi_link_mu);
    if (!mpi_tried) mpi_load();
    pthread_mutex_unlock(&mpi_link_mu);
    if (!mpi_mod) {
        gpucore_set_error(GPUCORE_ERR_NOT_SUPPORTED, "%s: MPI is not available: %s%s", op, mpi_failure,
                          comm ? ". On CUDA, gpucore_comm_create with a unique id needs no MPI and works with any "
                                 "launcher" : "");
        return NULL;
    }
    return mpi_mod;
}

gpucore_status gpucore_mpi_world(const char *op, int *rank, int *size)
{
    const gpucore_mpi_module *m = mpi_module(op);
    if (!m) return GPUCORE_ERR_NOT_SUPPORTED;
    return m->world(op, rank, size);
}

const gpucore_mpi_module *gpucore_mpi_loaded(void)
{
    pthread_mutex_lock(&mpi_link_mu);
    const gpucore_mpi_module *m = mpi_mod;
    pthread_mutex_unlock(&mpi_link_mu);
    return m;
}

void gpucore_mpi_mark_broken(void)
{
    const gpucore_mpi_module *m = gpucore_mpi_loaded();
    if (m) m->mark_broken();
}

gpucore_status gpucore_mpi_component(const char *component, char *buf, size_t len)
{
    const gpucore_mpi_module *m = mpi_module("component_version");
    if (!m) return GPUCORE_ERR_NOT_SUPPORTED;
    if (!strcmp(component, "mpi_module")) snprintf(buf, len, "%s", mpi_path);
    else m->library_version(buf, len);
    return GPUCORE_OK;
}
