/* wgrad_transpose.c — a throwaway probe for this results folder: the weight-gradient GEMM dW = dyᵀ·x
 * (K = 256 rows, bf16) with dyᵀ as a transposed view (what gpucore_linear_backward passes oneDNN) against
 * a contiguous copy of dyᵀ first, and the copy alone. Argument 2: the output features (50257: the head).
 * Build as gemm_shapes.c. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gpucore.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double cpu(void){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  gpucore_context*ctx; gpucore_context_create("cpu",&ctx);
  int64_t R=256,in=768,out=argc>2?atoll(argv[2]):50257; int reps=argc>1?atoi(argv[1]):5;
  gpucore_tensor *x,*dy,*dw,*dyT,*dyc;
  int64_t xs[2]={R,in},ws[2]={out,in},ys[2]={R,out},ts[2]={out,R};
  gpucore_tensor_create(ctx,GPUCORE_BF16,2,xs,&x);gpucore_tensor_create(ctx,GPUCORE_BF16,2,ws,&dw);
  gpucore_tensor_create(ctx,GPUCORE_BF16,2,ys,&dy);gpucore_tensor_create(ctx,GPUCORE_BF16,2,ts,&dyc);
  gpucore_random(x,GPUCORE_NORMAL,0,1,1,0,NULL);gpucore_random(dy,GPUCORE_NORMAL,0,1,3,0,NULL);
  gpucore_tensor_transpose(dy,0,1,&dyT);
  gpucore_matmul_options o; gpucore_matmul_options_init(&o);
  for(int mode=0;mode<3;mode++){double best=1e9,bc=1e9;
  for(int r=-1;r<reps;r++){double t0=now(),c0=cpu(); gpucore_status st=0;
    if(mode==0) st=gpucore_matmul(dyT,x,dw,&o,NULL);
    else if(mode==1){st=gpucore_copy(dyc,dyT,NULL); if(!st) st=gpucore_matmul(dyc,x,dw,&o,NULL);}
    else st=gpucore_copy(dyc,dyT,NULL);
    gpucore_context_synchronize(ctx); if(st)printf("err %s\n",gpucore_last_error()); double t=now()-t0,c=cpu()-c0; if(r>=0){if(t<best)best=t;if(c<bc)bc=c;}}
  printf("out %lld %s: best %.3f ms wall, %.3f ms cpu/2  %.1f GF/s(cpu)\n",(long long)out,mode==0?"wgrad transposed src":mode==1?"copy + plain wgrad":"copy alone",best*1e3,bc*500,2.0*R*in*out/(bc/2)/1e9);}
  return 0;}
