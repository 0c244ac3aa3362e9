/* add16.c — the C cost of a 16-element add into a new tensor (create + op + destroy) and into out=; build: cc -O2 -Iinclude add16.c -Lbuild-release/src -lgpucore */
#include "gpucore.h"
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  gpucore_context *ctx; if(gpucore_context_create("cpu",&ctx)) return 1;
  int64_t sh[1]={16}; gpucore_tensor *a,*b,*c;
  gpucore_tensor_create(ctx,GPUCORE_F32,1,sh,&a); gpucore_tensor_create(ctx,GPUCORE_F32,1,sh,&b);
  gpucore_tensor_create(ctx,GPUCORE_F32,1,sh,&c);
  for(int rep=0;rep<5;rep++){
    int N=200000; double t0=now();
    for(int i=0;i<N;i++){gpucore_tensor *o; gpucore_binary_new(GPUCORE_ADD,a,b,NULL,&o); gpucore_tensor_destroy(o);}
    double t1=now();
    for(int i=0;i<N;i++){gpucore_binary(GPUCORE_ADD,c,a,b,NULL);}
    double t2=now();
    printf("new+destroy %.3f us   binary out= %.3f us\n",(t1-t0)/N*1e6,(t2-t1)/N*1e6);
  }
  return 0;
}
