/* binding_cost.c — the same two C calls as binding_cost.py (into out=, and a new result then its
 * destroy) on 16-element f32 tensors, from C: the library's own share of a small op, in microseconds.
 *   gcc -O2 -Iinclude binding_cost.c -o /tmp/binding_cost -Lbuild-release/src -lgpucore \
 *       -Wl,-rpath,$PWD/build-release/src && /tmp/binding_cost   (from the repository root) */
#include <stdio.h>
#include <time.h>
#include "gpucore.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  gpucore_context *ctx=NULL; if(gpucore_context_create("cpu",&ctx)){printf("ctx %s\n",gpucore_last_error());return 1;}
  int64_t n=16; gpucore_tensor *a,*b,*c;
  gpucore_tensor_create(ctx,GPUCORE_F32,1,&n,&a);gpucore_tensor_create(ctx,GPUCORE_F32,1,&n,&b);gpucore_tensor_create(ctx,GPUCORE_F32,1,&n,&c);
  for(int r=0;r<5;r++){double t0=now();for(int i=0;i<200000;i++)gpucore_binary(GPUCORE_ADD,c,a,b,NULL);gpucore_context_synchronize(ctx);double t1=now();
   for(int i=0;i<200000;i++){gpucore_tensor *o; gpucore_binary_new(GPUCORE_ADD,a,b,NULL,&o); gpucore_tensor_destroy(o);} gpucore_context_synchronize(ctx);double t2=now();
   printf("out= %.3f us  new+destroy %.3f us\n",(t1-t0)/2e5*1e6,(t2-t1)/2e5*1e6);}
  return 0;}
