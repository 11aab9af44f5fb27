#pragma once
// Pieces the CUDA-event benchmarks share (bench/bench_*_gpu.cu): deterministic random inputs,
// uploads, and the median of event-timed calls.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "common/buffer.h"
#include "common/cuda_check.h"

namespace es::bench {

// A 64-bit mix (splitmix64's finaliser) folded to 32 bits: the inputs' random stream.
__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// A uniform in [0, 1) with 24 random bits, deterministic per (seed, index).
__device__ __forceinline__ float hashUniform(uint32_t seed, int64_t i) {
  return float(hash32((uint64_t{seed} << 40) ^ uint64_t(i)) >> 8) * (1.0f / 16777216.0f);
}

// Device 0's properties (into *prop) described on stderr, and a non-blocking stream on it (the
// caller destroys it); nullptr, after saying so with the benchmark's `name`, when there is no
// CUDA device.
inline cudaStream_t openDeviceStream(const char* name, cudaDeviceProp* prop) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "%s: no CUDA device\n", name);
    return nullptr;
  }
  ES_CUDA_CHECK(cudaGetDeviceProperties(prop, 0));
  std::fprintf(stderr, "device: %s, %d SMs, L2 %d MB\n", prop->name, prop->multiProcessorCount,
               prop->l2CacheSize >> 20);
  cudaStream_t stream = nullptr;
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

template <typename T>
Buffer upload(const std::vector<T>& host) {
  Buffer b = Buffer::allocate(MemorySpace::kDevice, int64_t(host.size() * sizeof(T)));
  ES_CUDA_CHECK(cudaMemcpy(b.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

// Median over `iters` timed calls of fn(i) (each between its own pair of events) after `warmup`
// untimed ones, in microseconds.
template <typename F>
double median_us(cudaStream_t stream, int warmup, int iters, F&& fn) {
  cudaEvent_t start, stop;
  ES_CUDA_CHECK(cudaEventCreate(&start));
  ES_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) fn(i);
  ES_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    ES_CUDA_CHECK(cudaEventRecord(start, stream));
    fn(i);
    ES_CUDA_CHECK(cudaEventRecord(stop, stream));
    ES_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ES_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t[i] = ms * 1000.0;
  }
  ES_CUDA_CHECK(cudaEventDestroy(start));
  ES_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

}  // namespace es::bench
