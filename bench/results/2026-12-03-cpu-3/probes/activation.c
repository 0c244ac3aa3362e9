/* activation.c — activation ACT (3 = tanh GELU) forward (0) or backward (1) on N f32, best ns per element: activation ACT BWD N */
#include "gpucore.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int act = atoi(argv[1]), bwd = atoi(argv[2]); int64_t n = atoll(argv[3]);
  gpucore_context *ctx; if(gpucore_context_create("cpu",&ctx)) return 1;
  int64_t sh[1]={n}; gpucore_tensor *x,*y,*dy;
  gpucore_tensor_create(ctx,GPUCORE_F32,1,sh,&x); gpucore_tensor_create(ctx,GPUCORE_F32,1,sh,&y); gpucore_tensor_create(ctx,GPUCORE_F32,1,sh,&dy);
  gpucore_random(x, GPUCORE_UNIFORM, -4, 4, 1, 0, NULL); gpucore_random(dy, GPUCORE_UNIFORM, -1, 1, 2, 0, NULL);
  double best=1e9;
  for(int rep=0;rep<10;rep++){
    int N=(int)(40000000/n)+1; double t0=now();
    for(int i=0;i<N;i++){ if(bwd) gpucore_activation_backward(act,y,dy,x,NULL); else gpucore_activation_forward(act,y,x,NULL);} gpucore_context_synchronize(ctx);
    double t=(now()-t0)/N/n*1e9; if(t<best)best=t;
  }
  printf("%.3f\n", best);
  return 0;
}
