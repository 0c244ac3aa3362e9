/* call_overhead.c — a throwaway probe for this results folder: the cost of one tiny (32^3) gpucore_matmul,
 * f32 and bf16, queued back to back and synchronised after each: the per-call overhead of the oneDNN path
 * (plan-cache lookup, stream and memory objects, the stream task). Build as gemm_shapes.c. */
#include <stdio.h>
#include <time.h>
#include "gpucore.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){gpucore_context*ctx; gpucore_context_create("cpu",&ctx);
 for(int dt=0;dt<2;dt++){gpucore_tensor*a,*b,*d; int64_t s[2]={32,32}; gpucore_dtype t=dt?GPUCORE_BF16:GPUCORE_F32;
 gpucore_tensor_create(ctx,t,2,s,&a);gpucore_tensor_create(ctx,t,2,s,&b);gpucore_tensor_create(ctx,t,2,s,&d);
 gpucore_random(a,GPUCORE_NORMAL,0,1,1,0,NULL);gpucore_random(b,GPUCORE_NORMAL,0,1,2,0,NULL);
 gpucore_matmul_options o; gpucore_matmul_options_init(&o);
 for(int r=0;r<3;r++){int n=2000; double t0=now(); for(int i=0;i<n;i++){gpucore_matmul(a,b,d,&o,NULL);} gpucore_context_synchronize(ctx);
 double t1=now(); for(int i=0;i<n;i++){gpucore_matmul(a,b,d,&o,NULL);gpucore_context_synchronize(ctx);} double t2=now();
 printf("%s 32^3: %.1f us/call queued, %.1f us/call synced\n",dt?"bf16":"f32",(t1-t0)/n*1e6,(t2-t1)/n*1e6);}}
 return 0;}
