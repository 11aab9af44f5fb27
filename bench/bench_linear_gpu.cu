// GPU benchmark of the linear layer at decode shapes: cuBLASLt against the hand gemv
// (src/kernels/linear_gemv.cu), CUDA events. Prints, in one run:
//   (a) the read-stream ceiling: a reduction (32-bit integer sum) over 4 GiB with 16-byte
//       non-L1-allocating loads, 4 or 8 in flight per thread, measured before and after the linear
//       rows; "% ceil" is relative to the largest of these (--ceiling: only the first, printed as
//       "read_ceiling_tbps X" for scripts);
//   (b) y[m, N] = x[m, K] · W[N, K]^T for the Qwen3-8B decode shapes (qkv 6144x4096, o 4096x4096,
//       gate_up 24576x4096, down 4096x12288, lm_head 151936x4096) and the Qwen3-0.6B ones (qkv
//       4096x1024 = 16 q + 8 k + 8 v heads of 128, o 1024x2048, gate_up 6144x1024, down 1024x3072,
//       lm_head 151936x1024), m = 1, 4, 16, bf16 inputs, bf16 y (lm_head: f32 logits, as the model
//       runs it), no bias: cuBLASLt (LinearAlgo::kCublasLt) and the gemv (kGemv: the launcher's
//       own grid choice, printed as R<rowTiles>S<kSplit>). With --sweep, every gemv configuration
//       (rowTiles 1/2 x kSplit 1/2/4/8) too. Before timing, each (shape, m) checks the gemv's y
//       against cuBLASLt's (bf16 rounding apart); a MISMATCH row appears if they differ.
// L2: the weights rotate between C copies with C * |W| >= 4 * L2 (at least 2), so every launch
// reads a W that the previous C - 1 launches have pushed out of the L2: DRAM-cold weights, as in a
// real decode step where every layer's W is read once. x and y are single buffers and stay warm
// (in a decode step x was just written by the previous kernel). --warm keeps one copy instead: the
// weights that fit stay in the L2, the time an L2 prefetch of the next layer could reach.
// Timing: B = max(C, 16) launches (launch i on copy i mod C) are captured in one CUDA graph; the
// graph is replayed 3 + 15 times, each replay between its own pair of events; us per call = median
// replay / B. So the time includes the GPU-side gap between consecutive kernels but no host launch
// overhead. TB/s counts the compulsory bytes: W + x + y.
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
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"

namespace es {
namespace {

using bench::hashUniform;
using bench::median_us;
using bench::upload;

using kernel::LinearAlgo;
using kernel::detail::GemvConfig;

struct Row {
  std::string name, shape, config;
  double us = 0, tbps = -1, pct = -1, vsCublas = -1;  // < 0: not applicable
};
std::vector<Row> gRows;

// Random finite values in [lo, hi) (never all zeros), deterministic per (seed, index).
__global__ void fillBf16(bf16* out, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = hashUniform(seed, i);
    out[i] = to_bf16(lo + (hi - lo) * u);
  }
}
void fill(Buffer& b, uint32_t seed, float lo, float hi) {
  fillBf16<<<2048, 256>>>(b.as<bf16>(), b.bytes() / 2, seed, lo, hi);
  ES_CUDA_CHECK_LAUNCH();
}

// ---- read ceiling --------------------------------------------------------------------------
__device__ __forceinline__ uint4 loadStream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Sum of all 32-bit words; U loads in flight per thread; one word written per warp.
template <int U>
__global__ void __launch_bounds__(256)
    readReduce(const uint4* __restrict__ p, int64_t n16, uint32_t* __restrict__ out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = loadStream(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = loadStream(p + i);
    acc += v.x + v.y + v.z + v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) out[(blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32] = acc;
}

// Best of the U = 4 and U = 8 reductions over 4 GiB, in TB/s; one row each.
double readCeiling(cudaStream_t stream, const char* when, const Buffer& data, Buffer& out,
                   int sms) {
  const int64_t n16 = data.bytes() / 16;
  const int blocks = sms * 8;
  double best = 0;
  for (int u : {4, 8}) {
    const double us = median_us(stream, 3, 15, [&](int) {
      if (u == 4) {
        readReduce<4><<<blocks, 256, 0, stream>>>(data.as<uint4>(), n16, out.as<uint32_t>());
      } else {
        readReduce<8><<<blocks, 256, 0, stream>>>(data.as<uint4>(), n16, out.as<uint32_t>());
      }
      ES_CUDA_CHECK_LAUNCH();
    });
    const double tbps = double(data.bytes()) / (us * 1e6);
    best = std::max(best, tbps);
    char config[16];
    std::snprintf(config, sizeof(config), "U=%d", u);
    gRows.push_back({std::string("read ceiling ") + when, "4 GiB sum", config, us, tbps, -1, -1});
  }
  return best;
}

// ---- linear rows ----------------------------------------------------------------------------
struct Shape {
  const char* name;
  int32_t n, k;
  bool logits;  // f32 y
};

struct Variant {
  std::string name, config;
  LinearAlgo algo;
  bool direct = false;  // detail::launchLinearGemv with cfg
  GemvConfig cfg;
};

// Mismatching elements of two y's (bf16 or f32): |a - b| > 1e-2 |b| + 1e-2.
int64_t countMismatch(const Buffer& a, const Buffer& b, bool f32, int64_t count) {
  std::vector<uint8_t> ha(size_t(a.bytes())), hb(size_t(b.bytes()));
  ES_CUDA_CHECK(cudaMemcpy(ha.data(), a.data(), ha.size(), cudaMemcpyDeviceToHost));
  ES_CUDA_CHECK(cudaMemcpy(hb.data(), b.data(), hb.size(), cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    double va, vb;
    if (f32) {
      float fa, fb;
      std::memcpy(&fa, ha.data() + 4 * i, 4);
      std::memcpy(&fb, hb.data() + 4 * i, 4);
      va = fa, vb = fb;
    } else {
      bf16 ba, bb;
      std::memcpy(&ba, ha.data() + 2 * i, 2);
      std::memcpy(&bb, hb.data() + 2 * i, 2);
      va = to_float(ba), vb = to_float(bb);
    }
    if (!(std::abs(va - vb) <= 1e-2 * std::abs(vb) + 1e-2)) ++bad;
  }
  return bad;
}

void benchShape(cudaStream_t stream, kernel::LinearContext& ctx, const Shape& s, int64_t l2Bytes,
                int sms, bool sweep, bool warm) {
  const int64_t wBytes = int64_t{s.n} * s.k * 2;
  // --warm: one copy, so weights smaller than the L2 are read from it after the first launch.
  const int copies = warm ? 1 : int(std::max<int64_t>(2, (4 * l2Bytes + wBytes - 1) / wBytes));
  const int launches = std::max(copies, 16);
  std::vector<Buffer> w;
  for (int c = 0; c < copies; ++c) {
    w.push_back(Buffer::allocate(MemorySpace::kDevice, wBytes));
    fill(w.back(), 1000u + 17u * uint32_t(c), -1.0f, 1.0f);
  }
  const int64_t out_size = s.logits ? 4 : 2;
  for (int32_t m : {1, 4, 16}) {
    Buffer x = Buffer::allocate(MemorySpace::kDevice, int64_t{m} * s.k * 2);
    fill(x, 7u + uint32_t(m), -1.0f, 1.0f);
    Buffer yRef = Buffer::allocate(MemorySpace::kDevice, int64_t{m} * s.n * out_size);
    Buffer y = Buffer::allocate(MemorySpace::kDevice, int64_t{m} * s.n * out_size);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    auto params = [&](int c, void* out, LinearAlgo algo) {
      kernel::LinearParams p;
      p.x = x.data();
      p.w = w[size_t(c)].data();
      p.y = out;
      p.m = m;
      p.n = s.n;
      p.k = s.k;
      p.dtype = DType::kBF16;
      p.outDtype = s.logits ? DType::kF32 : DType::kBF16;
      p.algo = algo;
      return p;
    };
    const GemvConfig chosen = kernel::detail::chooseGemvConfig(s.n, s.k, sms);
    auto cfgName = [](GemvConfig c) {
      char buf[24];
      std::snprintf(buf, sizeof(buf), "R%dS%d", c.rowTiles, c.kSplit);
      return std::string(buf);
    };
    std::vector<Variant> variants = {{"cuBLASLt", "-", LinearAlgo::kCublasLt},
                                     {"gemv", cfgName(chosen), LinearAlgo::kGemv}};
    if (sweep) {
      for (int32_t tiles : {1, 2}) {
        for (int32_t split : {1, 2, 4, 8}) {
          variants.push_back(
              {"gemv sweep", cfgName({tiles, split}), LinearAlgo::kGemv, true, {tiles, split}});
        }
      }
    }
    auto launch = [&](const Variant& v, int c, void* out) {
      const kernel::LinearParams p = params(c, out, v.algo);
      if (v.direct)
        kernel::detail::launchLinearGemv(p, v.cfg, stream);
      else
        kernel::launchLinear(p, ctx, stream);
    };
    char shape[96];
    std::snprintf(shape, sizeof(shape), "%s %dx%d m=%d%s", s.name, s.n, s.k, m,
                  s.logits ? " f32 y" : "");
    // Parity with cuBLASLt on copy 0 (also the eager first call that caches cuBLASLt's plan).
    launch(variants[0], 0, yRef.data());
    for (size_t vi = 1; vi < variants.size(); ++vi) {
      ES_CUDA_CHECK(cudaMemsetAsync(y.data(), 0xA5, size_t(y.bytes()), stream));
      launch(variants[vi], 0, y.data());
      ES_CUDA_CHECK(cudaStreamSynchronize(stream));
      const int64_t bad = countMismatch(y, yRef, s.logits, int64_t{m} * s.n);
      if (bad != 0) {
        std::fprintf(stderr, "MISMATCH %s %s %s: %lld elements\n", variants[vi].name.c_str(),
                     variants[vi].config.c_str(), shape, static_cast<long long>(bad));
        gRows.push_back(
            {"MISMATCH " + variants[vi].name, shape, variants[vi].config, double(bad), -1, -1, -1});
      }
    }
    const double bytes = double(wBytes) + double(m) * s.k * 2 + double(m) * s.n * out_size;
    double cublasUs = -1;
    for (const Variant& v : variants) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      ES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < launches; ++i) launch(v, i % copies, y.data());
      ES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      ES_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      const double us =
          median_us(stream, 3, 15, [&](int) { ES_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) /
          launches;
      ES_CUDA_CHECK(cudaGraphExecDestroy(exec));
      ES_CUDA_CHECK(cudaGraphDestroy(graph));
      if (v.algo == LinearAlgo::kCublasLt) cublasUs = us;
      Row row{v.name, shape, v.config, us, bytes / (us * 1e6), -1, -1};
      if (v.algo != LinearAlgo::kCublasLt && cublasUs > 0) row.vsCublas = cublasUs / us;
      gRows.push_back(row);
    }
  }
}

// The bf16 GEMM peak the whole-model prefill is judged against: cuBLASLt on square
// 8192 problems and on the Qwen3-8B prefill shapes of a 4,224-token prompt, TFLOP/s of 2 m n k.
void benchGemmPeak(cudaStream_t stream, kernel::LinearContext& ctx) {
  struct Gemm {
    const char* name;
    int32_t m, n, k;
  };
  const Gemm gemms[] = {{"square", 8192, 8192, 8192},
                        {"8B prefill qkv", 4224, 6144, 4096},
                        {"8B prefill o", 4224, 4096, 4096},
                        {"8B prefill gate_up", 4224, 24576, 4096},
                        {"8B prefill down", 4224, 4096, 12288}};
  std::printf("\nbf16 GEMM (cuBLASLt, bf16 out), TFLOP/s of 2 m n k:\n");
  for (const Gemm& g : gemms) {
    Buffer x = Buffer::allocate(MemorySpace::kDevice, int64_t{g.m} * g.k * 2);
    Buffer w = Buffer::allocate(MemorySpace::kDevice, int64_t{g.n} * g.k * 2);
    Buffer y = Buffer::allocate(MemorySpace::kDevice, int64_t{g.m} * g.n * 2);
    fill(x, 11, -1.0f, 1.0f);
    fill(w, 12, -1.0f, 1.0f);
    kernel::LinearParams p{.x = x.data(),
                           .w = w.data(),
                           .y = y.data(),
                           .m = g.m,
                           .n = g.n,
                           .k = g.k,
                           .dtype = DType::kBF16,
                           .outDtype = DType::kBF16,
                           .algo = kernel::LinearAlgo::kCublasLt};
    const double us = median_us(stream, 3, 20, [&](int) { kernel::launchLinear(p, ctx, stream); });
    std::printf("  %-22s %5d x %5d x %5d  %9.1f us  %7.1f TFLOP/s\n", g.name, g.m, g.n, g.k, us,
                2.0 * g.m * g.n * g.k / (us * 1e6));
  }
}

int run(int argc, char** argv) {
  bool sweep = false;
  bool peakOnly = false;  // --gemm-peak: only the GEMM peak (seconds), for gpu_check's engine stage
  bool warm = false;      // --warm: weights not rotated (L2-resident where they fit)
  bool ceilingOnly = false;  // --ceiling: only the read-stream ceiling, one line for scripts
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--warm") == 0) {
      warm = true;
    } else if (std::strcmp(argv[i], "--gemm-peak") == 0) {
      peakOnly = true;
    } else if (std::strcmp(argv[i], "--ceiling") == 0) {
      ceilingOnly = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench_linear_gpu [--sweep] [--warm] | --gemm-peak | --ceiling\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  cudaStream_t stream = bench::openDeviceStream("bench_linear_gpu", &prop);
  if (stream == nullptr) return 1;
  kernel::LinearContext ctx;
  if (peakOnly) {
    benchGemmPeak(stream, ctx);
    ES_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  }

  double ceiling = 0;
  {
    Buffer data = Buffer::allocate(MemorySpace::kDevice, int64_t{4} << 30);
    fill(data, 5, -1.0f, 1.0f);
    Buffer out =
        Buffer::allocate(MemorySpace::kDevice, int64_t{prop.multiProcessorCount} * 8 * 8 * 4);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    ceiling = readCeiling(stream, "(before)", data, out, prop.multiProcessorCount);
  }
  if (ceilingOnly) {  // tools/gpu_check.sh engine reads this line
    std::printf("read_ceiling_tbps %.3f\n", ceiling);
    ES_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  }
  const Shape shapes[] = {
      {"8B qkv", 6144, 4096, false},      {"8B o", 4096, 4096, false},
      {"8B gate_up", 24576, 4096, false}, {"8B down", 4096, 12288, false},
      {"8B lm_head", 151936, 4096, true}, {"0.6B qkv", 4096, 1024, false},
      {"0.6B o", 1024, 2048, false},      {"0.6B gate_up", 6144, 1024, false},
      {"0.6B down", 1024, 3072, false},   {"0.6B lm_head", 151936, 1024, true},
  };
  for (const Shape& s : shapes) {
    benchShape(stream, ctx, s, prop.l2CacheSize, prop.multiProcessorCount, sweep, warm);
  }
  {
    Buffer data = Buffer::allocate(MemorySpace::kDevice, int64_t{4} << 30);
    fill(data, 5, -1.0f, 1.0f);
    Buffer out =
        Buffer::allocate(MemorySpace::kDevice, int64_t{prop.multiProcessorCount} * 8 * 8 * 4);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    ceiling =
        std::max(ceiling, readCeiling(stream, "(after)", data, out, prop.multiProcessorCount));
  }
  for (Row& r : gRows) {
    if (r.tbps >= 0) r.pct = 100.0 * r.tbps / ceiling;
  }

  std::printf(
      "\nceiling %.3f TB/s (best read-stream reduction); us per call from CUDA-graph "
      "replays, %s\n",
      ceiling,
      warm ? "weights NOT rotated (--warm: L2-resident where they fit)"
           : "weights rotated past the L2");
  std::printf("%-22s %-34s %-7s %10s %8s %8s %10s\n", "kernel", "shape", "config", "us/call",
              "TB/s", "% ceil", "x cuBLAS");
  for (const Row& r : gRows) {
    char tb[16] = "-", pct[16] = "-", vs[16] = "-";
    if (r.tbps >= 0) std::snprintf(tb, sizeof(tb), "%.3f", r.tbps);
    if (r.pct >= 0) std::snprintf(pct, sizeof(pct), "%.1f%%", r.pct);
    if (r.vsCublas >= 0) std::snprintf(vs, sizeof(vs), "%.2f", r.vsCublas);
    std::printf("%-22s %-34s %-7s %10.2f %8s %8s %10s\n", r.name.c_str(), r.shape.c_str(),
                r.config.c_str(), r.us, tb, pct, vs);
  }
  benchGemmPeak(stream, ctx);
  ES_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace es

int main(int argc, char** argv) {
  try {
    return es::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_linear_gpu: %s\n", e.what());
    return 1;
  }
}
