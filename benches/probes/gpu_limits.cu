// The GPU's limits that the decoder's figures are measured against (benches/scale-h200.sh):
// device-to-device copy bandwidth (bytes read + written, cudaMemcpyAsync of COPY_MIB, default
// 4096: many times the L2) and the FP32 FMA rate (a kernel of independent FMA chains, every
// thread 8 chains of 4096 dependent FMAs, 2 FLOPs each; the results are stored so the work is
// kept). Medians of 9 timed runs after 2 warm-ups, CUDA events. Built on the machine with
// `nvcc -O3 -arch=sm_90 gpu_limits.cu -o gpu_limits`.
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void fma_chains(float *out, float a, float b, int iters) {
  float v[8];
  for (int i = 0; i < 8; i++) v[i] = threadIdx.x * 1e-3f + i;
  for (int n = 0; n < iters; n++) {
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = fmaf(v[i], a, b);
  }
  float s = 0;
  for (int i = 0; i < 8; i++) s += v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  const char *m = getenv("COPY_MIB");
  size_t bytes = (size_t)(m ? atol(m) : 4096) << 20;
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  void *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMemset(src, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 11; r++) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 2) ms.push_back(t);
  }
  float copy_ms = median(ms);
  printf("gpu-limits %s: %d SMs; copy (read+write) %.0f GB/s over %zu MiB\n", p.name,
         p.multiProcessorCount, 2.0 * bytes / (copy_ms * 1e-3) / 1e9, bytes >> 20);
  int threads = 256, blocks = p.multiProcessorCount * 16, iters = 4096;
  float *out;
  CK(cudaMalloc(&out, sizeof(float) * threads * blocks));
  ms.clear();
  for (int r = 0; r < 11; r++) {
    CK(cudaEventRecord(e0));
    fma_chains<<<blocks, threads>>>(out, 0.999f, 1e-3f, iters);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 2) ms.push_back(t);
  }
  double flops = 2.0 * 8 * iters * (double)threads * blocks;
  printf("gpu-limits %s: fp32 fma %.1f TFLOP/s\n", p.name, flops / (median(ms) * 1e-3) / 1e12);
  return 0;
}
