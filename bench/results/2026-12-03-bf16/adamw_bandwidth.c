/* adamw_bandwidth.c — a throwaway probe for this results folder: the memory-bound floor of a mixed-precision
 * AdamW step over 124M elements (f32 master, m, v read and written; bf16 grad read, bf16 param written: 28
 * bytes an element) on 2 OpenMP threads; mode 1 writes the bf16 copy with non-temporal stores, mode 2
 * is the same traffic without the math. Build: gcc -O3 -march=native -fopenmp -fno-math-errno. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include <immintrin.h>
#define N (124000000L)
static inline uint16_t tobf(float f){uint32_t u;memcpy(&u,&f,4);u+=0x7fff+((u>>16)&1);return u>>16;}
int main(){float*ma=aligned_alloc(64,N*4),*m=aligned_alloc(64,N*4),*v=aligned_alloc(64,N*4);uint16_t*g=aligned_alloc(64,N*2),*p=aligned_alloc(64,N*2);
#pragma omp parallel for
for(long i=0;i<N;i++){ma[i]=1;m[i]=0;v[i]=0;g[i]=0x3f80;p[i]=0;}
for(int mode=0;mode<3;mode++)for(int rep=0;rep<3;rep++){double t=omp_get_wtime();
#pragma omp parallel for schedule(static)
 for(long c=0;c<N;c+=8192){long e=c+8192<N?c+8192:N;
  if(mode==2){ /* pure copy-ish: read 5 arrays write 4 */
   for(long i=c;i<e;i++){m[i]+=1;v[i]+=1;ma[i]+=(float)g[i];p[i]=(uint16_t)i;} continue;}
  for(long i=c;i<e;i++){uint32_t gu=(uint32_t)g[i]<<16;float gf;memcpy(&gf,&gu,4);
   float mm=0.9f*m[i]+0.1f*gf, vv=0.999f*v[i]+0.001f*gf*gf; m[i]=mm; v[i]=vv;
   float x=ma[i]*(1-1e-6f)-1e-4f*mm/(sqrtf(vv)+1e-8f); ma[i]=x;
   if(mode==0)p[i]=tobf(x);}
  if(mode==1){for(long i=c;i<e;i+=16){__m512 x=_mm512_load_ps(ma+i);__m256i b=(__m256i)_mm512_cvtneps_pbh(x);_mm256_stream_si256((__m256i*)(p+i),b);}}
 }
 t=omp_get_wtime()-t;printf("mode %d: %.1f ms  %.1f GB/s(28B/el)\n",mode,t*1e3,N*28/t/1e9);}
return 0;}
