/*
 * cuda_use_marks.c — the per-entry stream marks of the cuDNN plan caches (cuda_use_marks.h).
 * Event queries answer through cuda_query_answer, which takes a NotReady off the thread's last error
 * (should the runtime keep it) and leaves any other pending error to its owner.
 */
#include "cuda_use_marks.h"

gpucore_status cuda_use_marks_record(cuda_use_marks *u, cudaStream_t stream)
{
    int slot = -1;
    for (int i = 0; i < u->n && slot < 0; i++)
        if (u->m[i].stream == stream) slot = i;
    for (int i = 0; i < u->n && slot < 0; i++)
        if (cuda_query_answer(cudaEventQuery(u->m[i].done)) == cudaSuccess) slot = i;
    if (slot < 0 && u->n < CUDA_USE_MARKS) {
        CUDA_TRY(cudaEventCreateWithFlags(&u->m[u->n].done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        slot = u->n++;
    }
    if (slot < 0) {
        slot = 0;
        CUDA_TRY(cudaEventSynchronize(u->m[0].done), "cudaEventSynchronize");
    }
    u->m[slot].stream = stream;
    CUDA_TRY(cudaEventRecord(u->m[slot].done, stream), "cudaEventRecord");
    return GPUCORE_OK;
}

int cuda_use_marks_idle(const cuda_use_marks *u)
{
    for (int i = 0; i < u->n; i++)
        if (cuda_query_answer(cudaEventQuery(u->m[i].done)) == cudaErrorNotReady) return 0;
    return 1;
}

void cuda_use_marks_release(cuda_use_marks *u)
{
    for (int i = 0; i < u->n; i++) {
        cudaEventSynchronize(u->m[i].done);
        cudaEventDestroy(u->m[i].done);
    }
    u->n = 0;
}
