/*
 * mpi_link.h — libgpucore.so's side of the MPI module (mpi_link.c, over
 * mpi_module.h): what the CPU backend's collectives, the component query and the
 * communicators above (src/comm/) call to load the module and reach MPI.
 */
#ifndef GPUCORE_MPI_LINK_H
#define GPUCORE_MPI_LINK_H

#include "core/internal.h"
#include "mpi_module.h"

/* MPI (mpi_link.c, through the MPI module): load the module on first use, start MPI
 * if the program has not (MPI_Init_thread, finalized at exit), and report this
 * process's world rank and size. NOT_SUPPORTED, saying what to install, when the
 * module or Open MPI is missing. */
GPUCORE_HIDDEN gpucore_status gpucore_mpi_world(const char *op, int *rank, int *size);
/* The MPI module once gpucore_mpi_world has loaded it, else NULL. */
GPUCORE_HIDDEN const gpucore_mpi_module *gpucore_mpi_loaded(void);
/* A collective over MPI failed: MPI is unusable, so the exit handler must not call
 * MPI_Finalize (it could wait forever for a dead peer). */
GPUCORE_HIDDEN void gpucore_mpi_mark_broken(void);
/* component_version's "mpi" (the MPI library's version) and "mpi_module" (the module's path). */
GPUCORE_HIDDEN gpucore_status gpucore_mpi_component(const char *component, char *buf, size_t len);

#endif
