/* gemm_shapes.c — a throwaway probe for this results folder: the bf16 GEMMs of a GPT-2 124M B4 T64 step
 * (rows 256) one at a time through gpucore_linear_forward/backward (forward, dgrad, wgrad), best of N,
 * wall and per CPU-second x 2 cores. Build: gcc -O2 gemm_shapes.c -I../../../include -I../../../build-release/include
 * -L../../../build-release/src -lgpucore -Wl,-rpath,$PWD/../../../build-release/src */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gpucore.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double cpu(void){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  gpucore_context*ctx; gpucore_context_create("cpu",&ctx);
  int64_t io[5][2]={{768,2304},{768,768},{768,3072},{3072,768},{768,50257}};
  int64_t R=256; int reps=argc>1?atoi(argv[1]):5;
  for(int l=0;l<5;l++){int64_t in=io[l][0],out=io[l][1];
    for(int pass=0;pass<3;pass++){
      gpucore_tensor *x,*w,*y,*dy,*dx,*dw;
      int64_t xs[2]={R,in},ws[2]={out,in},ys[2]={R,out};
      gpucore_tensor_create(ctx,GPUCORE_BF16,2,xs,&x);gpucore_tensor_create(ctx,GPUCORE_BF16,2,ws,&w);
      gpucore_tensor_create(ctx,GPUCORE_BF16,2,ys,&y);gpucore_tensor_create(ctx,GPUCORE_BF16,2,ys,&dy);
      gpucore_tensor_create(ctx,GPUCORE_BF16,2,xs,&dx);gpucore_tensor_create(ctx,GPUCORE_BF16,2,ws,&dw);
      gpucore_random(x,GPUCORE_NORMAL,0,1,1,0,NULL);gpucore_random(w,GPUCORE_NORMAL,0,.05,2,0,NULL);gpucore_random(dy,GPUCORE_NORMAL,0,1,3,0,NULL);
      double best=1e9,bestc=1e9; gpucore_status st=0;
      for(int r=-1;r<reps;r++){double t0=now(),c0=cpu();
        if(pass==0) st=gpucore_linear_forward(x,w,NULL,GPUCORE_ACT_NONE,y,NULL,NULL);
        else if(pass==1) st=gpucore_linear_backward(dy,NULL,w,NULL,dx,NULL,NULL,NULL);
        else st=gpucore_linear_backward(dy,x,w,NULL,NULL,dw,NULL,NULL);
        gpucore_context_synchronize(ctx); double t=now()-t0,c=cpu()-c0; if(r>=0){if(t<best)best=t;if(c<bestc)bestc=c;}}
      double fl=2.0*R*in*out;
      printf("bf16 %5lld->%5lld %-6s %8.3f ms wall %7.1f GF/s wall %7.1f GF/s per-cpu-s x2 %s\n",(long long)in,(long long)out,pass==0?"fwd":pass==1?"dgrad":"wgrad",best*1e3,fl/best/1e9,fl/(bestc/2)/1e9,st?gpucore_last_error():"");
      gpucore_tensor_destroy(x);gpucore_tensor_destroy(w);gpucore_tensor_destroy(y);gpucore_tensor_destroy(dy);gpucore_tensor_destroy(dx);gpucore_tensor_destroy(dw);
    }}
  return 0;}
