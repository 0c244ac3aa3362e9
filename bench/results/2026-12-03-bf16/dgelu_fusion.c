/* dgelu_fusion.c — a throwaway probe for this results folder: the GPT-2 MLP c_proj data gradient (bf16,
 * 256 x 3072 <- 768) then gpucore_activation_backward(GELU tanh), against one gpucore_linear_backward with
 * x_gelu_aux (the DGELU epilogue); best of N. Build as gemm_shapes.c. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gpucore.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  gpucore_context*ctx; gpucore_context_create("cpu",&ctx);
  int64_t R=256,in=3072,out=768; int reps=argc>1?atoi(argv[1]):20;
  gpucore_tensor *a,*w,*dy,*dx;
  int64_t xs[2]={R,in},ws[2]={out,in},ys[2]={R,out};
  gpucore_tensor_create(ctx,GPUCORE_BF16,2,xs,&a);gpucore_tensor_create(ctx,GPUCORE_BF16,2,ws,&w);
  gpucore_tensor_create(ctx,GPUCORE_BF16,2,ys,&dy);gpucore_tensor_create(ctx,GPUCORE_BF16,2,xs,&dx);
  gpucore_random(a,GPUCORE_NORMAL,0,1,1,0,NULL);gpucore_random(w,GPUCORE_NORMAL,0,.05,2,0,NULL);gpucore_random(dy,GPUCORE_NORMAL,0,1,3,0,NULL);
  for(int mode=0;mode<2;mode++){double best=1e9;
  for(int r=-2;r<reps;r++){double t0=now(); gpucore_status st;
    if(mode==0){st=gpucore_linear_backward(dy,NULL,w,NULL,dx,NULL,NULL,NULL); if(!st) st=gpucore_activation_backward(GPUCORE_ACT_GELU_TANH,dx,dx,a,NULL);}
    else st=gpucore_linear_backward(dy,NULL,w,a,dx,NULL,NULL,NULL);
    gpucore_context_synchronize(ctx); if(st)printf("err %s\n",gpucore_last_error()); double t=now()-t0; if(r>=0&&t<best)best=t;}
  printf("%s: best %.3f ms\n",mode?"fused DGELU":"dgrad + activation_backward",best*1e3);}
  return 0;}
