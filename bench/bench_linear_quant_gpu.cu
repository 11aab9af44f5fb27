// GPU benchmark of the quantized gemv (src/kernels/linear_quant_gemv.cu) beside the dense bf16
// gemv, CUDA events. Prints, in one run:
//   (a) the read-stream ceiling: a 32-bit sum over 4 GiB with 16-byte non-L1-allocating loads,
//       8 in flight per thread (the best of 3 runs);
//   (b) y[m, N] = x[m, K] · W[N, K]^T for the Qwen3-8B decode shapes (qkv 6144x4096, o 4096x4096,
//       gate_up 24576x4096, down 4096x12288, lm_head 151936x4096), m = 1 and 16, bf16 x and y,
//       no bias, through launchLinear (kAuto): W in bf16 (the dense gemv) and in every quantized
//       format (int4 group 128, fp8 with 128-element groups and per channel, Q8_0, Q4_0, Q4_1,
//       Q4_K, Q5_K, Q6_K). GB/s counts W's bytes (data, scales, zeros); "% ceil" is that against
//       (a); "x bf16" the dense gemv's time over this one.
// L2: the weights rotate between C copies with C * |W| >= 4 * L2 (at least 2), so every launch
// reads a W the previous launches have pushed out of the L2, as in a decode step. Timing: B =
// max(C, 16) launches captured in one CUDA graph, replayed 3 + 15 times between events; us per
// call = median replay / B. Random weights (finite scales, no NaN codes). Before timing, each
// quantized (shape, m) compares the gemv's y with the prefill path's (W dequantized to bf16, then
// cuBLASLt) and prints a MISMATCH line where they differ by more than bf16 rounding of W explains
// (tests/kernels/test_linear_quant_gpu.cpp checks the values against the CPU reference).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_gpu_util.cuh"
#include "common/buffer.h"
#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/quant_format.h"
#include "kernels/linear.h"
#include "kernels/linear_quant_gemv.h"

namespace es {
namespace {

using bench::hash32;
using bench::median_us;

// Random bytes, deterministic per (seed, index).
__global__ void fillBytes(uint8_t* out, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<uint8_t>(hash32((uint64_t{seed} << 40) ^ uint64_t(i)));
  }
}

// Small positive finite f16 values (exponent 2^-7, random mantissa) at `count` places `stride`
// bytes apart from `first`: the scales of int4 and the f16 fields of GGUF blocks.
__global__ void fixHalves(uint8_t* data, int64_t first, int64_t stride, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint8_t* p = data + first + i * stride;
    const uint32_t bits = 0x2000u | (p[0] & 0xffu) | ((p[1] & 0x03u) << 8);
    p[0] = static_cast<uint8_t>(bits & 0xff);
    p[1] = static_cast<uint8_t>(bits >> 8);
  }
}

// fp8 bytes without the NaN codes; f32 scales of 1 / 448; int4 zeros in [0, 15].
__global__ void fixFp8(uint8_t* data, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if ((data[i] & 0x7f) == 0x7f) data[i] ^= 1;
  }
}
__global__ void fillF32(float* out, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = v;
  }
}
__global__ void maskNibble(uint8_t* data, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    data[i] &= 15;
  }
}

// Dense bf16 values in [-1, 1).
__global__ void fillBf16(bf16* out, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = to_bf16(2.0f * bench::hashUniform(seed, i) - 1.0f);
  }
}

__device__ __forceinline__ uint4 loadStream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The sum of all 32-bit words, 8 loads in flight per thread; one word written per thread.
__global__ void __launch_bounds__(256)
    readSum(const uint4* __restrict__ p, int64_t n16, uint32_t* __restrict__ out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 7 * stride < n16; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = loadStream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = loadStream(p + i);
    acc += v.x + v.y + v.z + v.w;
  }
  out[blockIdx.x * int64_t{blockDim.x} + threadIdx.x] = acc;
}

constexpr int kFillBlocks = 2048;

struct Format {
  const char* name;
  bool dense;
  QuantFormat format;
  int32_t group;  // 0: k (per channel)
};

// One W copy of `f` for [n, k]: its arrays and view.
struct Weight {
  Buffer data, scales, zeros;
  int64_t bytes = 0;
  QuantizedWeightView view;
};

int64_t weightBytes(const Format& f, int32_t n, int32_t k) {
  if (f.dense) return int64_t{n} * k * 2;
  const int32_t group = f.group == 0 ? k : f.group;
  return int64_t{n} * (dataRowBytes(f.format, k, group) + scaleRowBytes(f.format, k, group) +
                       zeroRowBytes(f.format, k, group));
}

Weight makeWeight(const Format& f, int32_t n, int32_t k, uint32_t seed) {
  Weight w;
  if (f.dense) {
    w.bytes = int64_t{n} * k * 2;
    w.data = Buffer::allocate(MemorySpace::kDevice, w.bytes);
    fillBf16<<<kFillBlocks, 256>>>(w.data.as<bf16>(), int64_t{n} * k, seed);
    ES_CUDA_CHECK_LAUNCH();
    return w;
  }
  const int32_t group = f.group == 0 ? k : f.group;
  const int64_t db = int64_t{n} * dataRowBytes(f.format, k, group);
  const int64_t sb = int64_t{n} * scaleRowBytes(f.format, k, group);
  const int64_t zb = int64_t{n} * zeroRowBytes(f.format, k, group);
  w.bytes = db + sb + zb;
  w.data = Buffer::allocate(MemorySpace::kDevice, db);
  fillBytes<<<kFillBlocks, 256>>>(w.data.as<uint8_t>(), db, seed);
  ES_CUDA_CHECK_LAUNCH();
  if (sb > 0) w.scales = Buffer::allocate(MemorySpace::kDevice, sb);
  if (zb > 0) w.zeros = Buffer::allocate(MemorySpace::kDevice, zb);
  switch (f.format) {
    case QuantFormat::kInt4:
      fillBytes<<<kFillBlocks, 256>>>(w.scales.as<uint8_t>(), sb, seed + 1);
      fixHalves<<<kFillBlocks, 256>>>(w.scales.as<uint8_t>(), 0, 2, sb / 2);
      fillBytes<<<kFillBlocks, 256>>>(w.zeros.as<uint8_t>(), zb, seed + 2);
      maskNibble<<<kFillBlocks, 256>>>(w.zeros.as<uint8_t>(), zb);
      break;
    case QuantFormat::kFp8E4M3:
      fixFp8<<<kFillBlocks, 256>>>(w.data.as<uint8_t>(), db);
      fillF32<<<kFillBlocks, 256>>>(w.scales.as<float>(), sb / 4, 1.0f / 448.0f);
      break;
    default: {
      const int64_t bb = ggufBlockBytes(f.format), blocks = db / bb;
      uint8_t* d = w.data.as<uint8_t>();
      if (f.format == QuantFormat::kGgufQ6_K) {
        fixHalves<<<kFillBlocks, 256>>>(d, 208, bb, blocks);
      } else {
        fixHalves<<<kFillBlocks, 256>>>(d, 0, bb, blocks);
        if (f.format != QuantFormat::kGgufQ8_0 && f.format != QuantFormat::kGgufQ4_0) {
          fixHalves<<<kFillBlocks, 256>>>(d, 2, bb, blocks);  // Q4_1 m, K-quants dmin
        }
      }
      break;
    }
  }
  ES_CUDA_CHECK_LAUNCH();
  w.view = {.format = f.format,
            .data = w.data.data(),
            .scales = sb > 0 ? w.scales.data() : nullptr,
            .zeros = zb > 0 ? w.zeros.data() : nullptr,
            .group = group};
  return w;
}

struct Shape {
  const char* name;
  int32_t n, k;
};

// Outputs (bf16) of a and b that differ by more than 2^-6 of b's largest magnitude: the prefill
// path rounds every W element to bf16, the gemv does not, so they agree to about 2^-8 of the
// outputs' scale.
int64_t countMismatch(const Buffer& a, const Buffer& b, int64_t count) {
  std::vector<bf16> ha(static_cast<size_t>(count)), hb(static_cast<size_t>(count));
  ES_CUDA_CHECK(cudaMemcpy(ha.data(), a.data(), size_t(count) * 2, cudaMemcpyDeviceToHost));
  ES_CUDA_CHECK(cudaMemcpy(hb.data(), b.data(), size_t(count) * 2, cudaMemcpyDeviceToHost));
  double scale = 0;
  for (const bf16 v : hb) scale = std::max(scale, double(std::abs(to_float(v))));
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double d = std::abs(double(to_float(ha[size_t(i)])) - double(to_float(hb[size_t(i)])));
    if (!(d <= scale / 64)) ++bad;
  }
  return bad;
}

int run() {
  cudaDeviceProp prop{};
  cudaStream_t stream = bench::openDeviceStream("bench_linear_quant_gpu", &prop);
  if (stream == nullptr) return 1;
  kernel::LinearContext ctx;

  double ceiling = 0;
  {
    const int64_t bytes = int64_t{4} << 30;
    Buffer data = Buffer::allocate(MemorySpace::kDevice, bytes);
    fillBytes<<<kFillBlocks, 256>>>(data.as<uint8_t>(), bytes, 5);
    ES_CUDA_CHECK_LAUNCH();
    const int blocks = prop.multiProcessorCount * 8;
    Buffer out = Buffer::allocate(MemorySpace::kDevice, int64_t{blocks} * 256 * 4);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    for (int rep = 0; rep < 3; ++rep) {
      const double us = median_us(stream, 2, 10, [&](int) {
        readSum<<<blocks, 256, 0, stream>>>(data.as<uint4>(), bytes / 16, out.as<uint32_t>());
        ES_CUDA_CHECK_LAUNCH();
      });
      ceiling = std::max(ceiling, double(bytes) / (us * 1e3));
    }
  }
  std::printf("read ceiling: %.0f GB/s\n\n", ceiling);

  const Shape shapes[] = {{"qkv", 6144, 4096},
                          {"o", 4096, 4096},
                          {"gate_up", 24576, 4096},
                          {"down", 4096, 12288},
                          {"lm_head", 151936, 4096}};
  const Format formats[] = {{"bf16", true, QuantFormat::kInt4, 0},
                            {"int4-g128", false, QuantFormat::kInt4, 128},
                            {"fp8-b128", false, QuantFormat::kFp8E4M3, 128},
                            {"fp8-chan", false, QuantFormat::kFp8E4M3, 0},
                            {"q8_0", false, QuantFormat::kGgufQ8_0, 32},
                            {"q4_0", false, QuantFormat::kGgufQ4_0, 32},
                            {"q4_1", false, QuantFormat::kGgufQ4_1, 32},
                            {"q4_k", false, QuantFormat::kGgufQ4_K, 256},
                            {"q5_k", false, QuantFormat::kGgufQ5_K, 256},
                            {"q6_k", false, QuantFormat::kGgufQ6_K, 256}};
  std::printf("%-8s %-13s %-10s %3s %6s %10s %9s %7s %7s\n", "shape", "n x k", "format", "m",
              "split", "us", "GB/s", "% ceil", "x bf16");
  for (const Shape& s : shapes) {
    for (int32_t m : {1, 16}) {
      Buffer x = Buffer::allocate(MemorySpace::kDevice, int64_t{m} * s.k * 2);
      fillBf16<<<kFillBlocks, 256>>>(x.as<bf16>(), int64_t{m} * s.k, 7u + uint32_t(m));
      ES_CUDA_CHECK_LAUNCH();
      Buffer y = Buffer::allocate(MemorySpace::kDevice, int64_t{m} * s.n * 2);
      Buffer yRef = Buffer::allocate(MemorySpace::kDevice, int64_t{m} * s.n * 2);
      double denseUs = -1;
      for (const Format& f : formats) {
        const int64_t oneBytes = weightBytes(f, s.n, s.k);
        const int copies =
            int(std::max<int64_t>(2, (4 * int64_t{prop.l2CacheSize} + oneBytes - 1) / oneBytes));
        const int launches = std::max(copies, 16);
        std::vector<Weight> w;
        for (int c = 0; c < copies; ++c) w.push_back(makeWeight(f, s.n, s.k, 100u + 17u * c));
        ES_CUDA_CHECK(cudaDeviceSynchronize());
        auto params = [&](int c) {
          kernel::LinearParams p{.x = x.data(),
                                 .w = w[size_t(c)].data.data(),
                                 .y = y.data(),
                                 .m = m,
                                 .n = s.n,
                                 .k = s.k,
                                 .dtype = DType::kBF16,
                                 .outDtype = DType::kBF16};
          if (!f.dense) p.quantized = w[size_t(c)].view;
          return p;
        };
        kernel::launchLinear(params(0), ctx, stream);  // eager first call
        ES_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (!f.dense) {
          // The gemv against the prefill path (W dequantized to bf16, cuBLASLt) on copy 0.
          kernel::LinearParams ref = params(0);
          ref.y = yRef.data();
          ref.algo = kernel::LinearAlgo::kCublasLt;
          kernel::launchLinear(ref, ctx, stream);
          ES_CUDA_CHECK(cudaStreamSynchronize(stream));
          const int64_t bad = countMismatch(y, yRef, int64_t{m} * s.n);
          if (bad != 0) {
            std::printf("MISMATCH %s %s m=%d: %lld of %lld outputs differ from the prefill path\n",
                        f.name, s.name, m, static_cast<long long>(bad),
                        static_cast<long long>(int64_t{m} * s.n));
          }
        }
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        ES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < launches; ++i) kernel::launchLinear(params(i % copies), ctx, stream);
        ES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        ES_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        const double us =
            median_us(stream, 3, 15, [&](int) { ES_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) /
            launches;
        ES_CUDA_CHECK(cudaGraphExecDestroy(exec));
        ES_CUDA_CHECK(cudaGraphDestroy(graph));
        if (f.dense) denseUs = us;
        const double gbps = double(w[0].bytes) / (us * 1e3);
        const int split = f.dense ? 0
                                  : kernel::detail::chooseQuantGemvConfig(f.format, s.n, s.k,
                                                                          prop.multiProcessorCount)
                                        .kSplit;
        char shape[32];
        std::snprintf(shape, sizeof(shape), "%dx%d", s.n, s.k);
        std::printf("%-8s %-13s %-10s %3d %6s %10.2f %9.0f %6.1f%% %7.2f\n", s.name, shape, f.name,
                    m, f.dense ? "-" : std::to_string(split).c_str(), us, gbps,
                    100.0 * gbps / ceiling, denseUs > 0 ? denseUs / us : 1.0);
        std::fflush(stdout);
      }
    }
  }
  ES_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace es

int main() { return es::run(); }
