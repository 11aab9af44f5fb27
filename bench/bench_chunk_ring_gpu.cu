// The floor of the sampling chunk stage's memory structure: how fast can 256 CTAs of
// 512 threads, one 151,936-entry f32 row each (the verify case's [16, 16, 151936] logits,
// 155.6 MB), stream their row through a ring of shared-memory stages when each chunk costs a
// given time after it lands? chunkFastKernel (kernels/sampling.cu) is this loop plus its
// filter and merges; this benchmark leaves the filter out and puts a spin of a chosen number of
// SM cycles in its place, so the table says which ring (copy engine, stage size, depth) keeps
// DRAM busy for how much work per chunk.
//
//   read stream      grid-stride 16-byte loads over the same bytes: the ceiling
//   cp.async S x C   every thread copies its own 16-byte pieces of the next chunks (S stages of C
//                    entries, S - 1 chunks in flight while one is consumed; no barrier); ", 2
//                    rows": 128 CTAs of two rows each (16,384-entry chunks: one CTA an SM)
//   bulk S x C       one thread asks the copy engine (cp.async.bulk, TMA) for a whole chunk,
//                    completion on an mbarrier per stage; a stage is refilled once every warp
//                    has arrived on its "empty" mbarrier
//
// Each consumed chunk: every thread reads its pieces from the stage and keeps their maximum (one
// value per thread and row written at the row's end and checked against the row maxima, so
// nothing is optimized away and a wrong ring reports no time), then spins.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench_gpu_util.cuh"
#include "kernels/cp_async.cuh"

namespace {

using es::Buffer;
using es::MemorySpace;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 256;
constexpr int kRowLen = 151936;

// ---- the ceiling
// ----------------------------------------------------------------------------------
__global__ void __launch_bounds__(256)
    read_stream(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // practically never: keeps the loads alive
}

__device__ __forceinline__ void spin_cycles(int cycles) {
  if (cycles <= 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// ---- cp.async ring
// ---------------------------------------------------------------------------------
using es::kernel::cpAsync16;
using es::kernel::cpAsyncCommit;
using es::kernel::cpAsyncWait;

// Rows blockIdx.x * P .. + P - 1 in chunks of C entries (one sequence of P * chunks items, as the
// chunk stage walks its run) through S stages (dynamic shared memory, S * C floats).
template <int S, int C, int P = 1>
__global__ void __launch_bounds__(kThreads, 2)
    ring_cp_async(const float* logits, int spin, float* sink) {
  constexpr int kPieces = C / 4 / kThreads;  // 16-byte pieces per thread per chunk
  static_assert(kPieces * 4 * kThreads == C, "C must be a multiple of 4 * kThreads");
  extern __shared__ __align__(16) float4 ring[];  // [S][C / 4]
  const int t = threadIdx.x;
  const int chunks = (kRowLen + C - 1) / C, items = P * chunks;
  const int row0 = blockIdx.x * P;
  auto issue = [&](int i) {
    if (i < items) {
      const int c = i % chunks;
      const float* row = logits + static_cast<size_t>(row0 + i / chunks) * kRowLen;
      const int len = min(C, kRowLen - c * C);
      float4* stage = ring + (i % S) * (C / 4);
#pragma unroll
      for (int p = 0; p < kPieces; ++p) {
        const int e = 4 * (t + p * kThreads);
        const int bytes = 4 * max(0, min(4, len - e));
        cpAsync16(stage + t + p * kThreads, bytes > 0 ? row + c * C + e : row, bytes);
      }
    }
    cpAsyncCommit();  // one group per item, empty past the end, so wait_group counts items
  };
  for (int i = 0; i < S - 1; ++i) issue(i);
  float acc = -INFINITY;
  for (int i = 0; i < items; ++i) {
    issue(i + S - 1);  // into the stage this thread read last iteration (its own pieces only)
    cpAsyncWait<S - 1>();
    const float4* stage = ring + (i % S) * (C / 4);
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      const float4 w = stage[t + p * kThreads];
      acc = fmaxf(acc, fmaxf(fmaxf(w.x, w.y), fmaxf(w.z, w.w)));
    }
    spin_cycles(spin);
    if (i % chunks == chunks - 1) {  // the row's last chunk
      sink[static_cast<size_t>(row0 + i / chunks) * kThreads + t] = acc;
      acc = -INFINITY;
    }
  }
}

// ---- bulk-copy (TMA) ring
// --------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, "
        "1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

template <int S, int C>
__global__ void __launch_bounds__(kThreads, 2)
    ring_bulk(const float* logits, int spin, float* sink) {
  constexpr int kPieces = C / 4 / kThreads;
  extern __shared__ __align__(128) float4 ring[];  // [S][C / 4]
  __shared__ uint64_t full[S], empty[S];
  const int t = threadIdx.x;
  const float* row = logits + static_cast<size_t>(blockIdx.x) * kRowLen;
  const int chunks = (kRowLen + C - 1) / C;
  if (t == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Chunk c goes to stage c % S; its fill is that stage's (c / S)-th phase.
  auto issue = [&](int c) {
    const int s = c % S;
    if (c >= S) mbar_wait(&empty[s], ((c / S) - 1) & 1);  // every warp has read chunk c - S
    const uint32_t bytes = 4u * static_cast<uint32_t>(min(C, kRowLen - c * C));
    mbar_arrive_expect_tx(&full[s], bytes);
    bulk_copy(ring + s * (C / 4), row + c * C, bytes, &full[s]);
  };
  if (t == 0) {
    for (int c = 0; c < S - 1 && c < chunks; ++c) issue(c);
  }
  float acc = -INFINITY;
  for (int c = 0; c < chunks; ++c) {
    if (t == 0 && c + S - 1 < chunks) issue(c + S - 1);
    const int s = c % S;
    mbar_wait(&full[s], (c / S) & 1);
    const int len = min(C, kRowLen - c * C);
    const float4* stage = ring + s * (C / 4);
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      const int e = 4 * (t + p * kThreads);
      if (e < len) {
        const float4 w = stage[t + p * kThreads];
        acc = fmaxf(acc, fmaxf(fmaxf(w.x, w.y), fmaxf(w.z, w.w)));
      }
    }
    __syncwarp();
    if ((t & 31) == 0) mbar_arrive(&empty[s]);
    spin_cycles(spin);
  }
  sink[blockIdx.x * kThreads + t] = acc;
}

struct Row {
  const char* name;
  int spin;
  double us;
};

template <typename Kernel>
double time_ring(cudaStream_t stream, Kernel kernel, size_t smem, int grid, const Buffer& logits,
                 Buffer& sink, int spin) {
  ES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  return es::bench::median_us(stream, 3, 30, [&](int) {
    kernel<<<grid, kThreads, smem, stream>>>(logits.as<float>(), spin, sink.as<float>());
    ES_CUDA_CHECK_LAUNCH();
  });
}

// Checks the ring's output against the row maxima (a wrong ring must not report a time).
bool check_sink(const Buffer& sink, const std::vector<float>& rowMax, const char* name) {
  std::vector<float> h(static_cast<size_t>(kRows) * kThreads);
  ES_CUDA_CHECK(
      cudaMemcpy(h.data(), sink.data(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < kRows; ++r) {
    float m = -INFINITY;
    for (int t = 0; t < kThreads; ++t) m = std::max(m, h[static_cast<size_t>(r) * kThreads + t]);
    if (m != rowMax[r]) {
      std::fprintf(stderr, "%s: row %d maximum %g, expected %g\n", name, r, m, rowMax[r]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  cudaStream_t stream = es::bench::openDeviceStream("bench_chunk_ring_gpu", &prop);
  if (stream == nullptr) return 0;
  const size_t n = static_cast<size_t>(kRows) * kRowLen;
  std::vector<float> host(n);
  std::vector<float> rowMax(kRows, -INFINITY);
  uint32_t x = 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    host[i] = static_cast<float>(x >> 8) * (1.0f / 16777216.0f) * 20.0f - 10.0f;
    rowMax[i / kRowLen] = std::max(rowMax[i / kRowLen], host[i]);
  }
  Buffer logits = es::bench::upload(host);
  Buffer sink = Buffer::allocate(MemorySpace::kDevice,
                                 static_cast<int64_t>(kRows) * kThreads * sizeof(float));
  const double bytes = static_cast<double>(n) * sizeof(float);

  std::vector<Row> rows;
  const double ceiling_us = es::bench::median_us(stream, 3, 30, [&](int) {
    read_stream<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(
        logits.as<uint4>(), static_cast<int64_t>(n / 4), sink.as<uint32_t>());
    ES_CUDA_CHECK_LAUNCH();
  });
  rows.push_back({"read stream (ceiling)", 0, ceiling_us});
  bool ok = true;
  const int spins[] = {0, 1000, 2000, 4000};
  auto run = [&](const char* name, auto kernel, size_t smem, int rows_per_cta = 1) {
    for (int spin : spins) {
      ES_CUDA_CHECK(cudaMemset(sink.data(), 0, sink.bytes()));
      const double us = time_ring(stream, kernel, smem, kRows / rows_per_cta, logits, sink, spin);
      ok &= check_sink(sink, rowMax, name);
      rows.push_back({name, spin, us});
    }
  };
  run("cp.async 2 x 8192", ring_cp_async<2, 8192>, 2 * 8192 * 4);
  run("cp.async 3 x 8192", ring_cp_async<3, 8192>, 3 * 8192 * 4);
  run("cp.async 4 x 4096", ring_cp_async<4, 4096>, 4 * 4096 * 4);
  run("cp.async 6 x 4096", ring_cp_async<6, 4096>, 6 * 4096 * 4);
  // Larger items (half the per-item fixed costs of the chunk stage per entry): 16,384 entries a
  // chunk, 1 CTA an SM (128 KB of stages), 2 rows a CTA; and 8,192 at 2 rows a CTA for the same
  // grid of 128 CTAs. A spin per 16,384-entry chunk compares with half of it per 8,192.
  run("cp.async 2 x 16384, 2 rows", ring_cp_async<2, 16384, 2>, 2 * 16384 * 4, 2);
  run("cp.async 2 x 8192, 2 rows", ring_cp_async<2, 8192, 2>, 2 * 8192 * 4, 2);
  run("bulk 2 x 8192", ring_bulk<2, 8192>, 2 * 8192 * 4);
  run("bulk 3 x 8192", ring_bulk<3, 8192>, 3 * 8192 * 4);
  run("bulk 4 x 4096", ring_bulk<4, 4096>, 4 * 4096 * 4);
  run("bulk 6 x 4096", ring_bulk<6, 4096>, 6 * 4096 * 4);
  run("bulk 12 x 2048", ring_bulk<12, 2048>, 12 * 2048 * 4);

  std::printf(
      "%d rows x %d f32 (%.1f MB), %d CTAs of %d threads; spin = SM cycles per chunk after it "
      "lands\n\n",
      kRows, kRowLen, bytes / 1e6, kRows, kThreads);
  std::printf("%-28s %8s %10s %8s %12s\n", "ring", "spin", "median_us", "TB/s", "% ceiling");
  for (const Row& r : rows) {
    const double tbps = bytes / (r.us * 1e6);
    std::printf("%-28s %8d %10.2f %8.2f %12.1f\n", r.name, r.spin, r.us, tbps,
                100.0 * ceiling_us / r.us);
  }
  ES_CUDA_CHECK(cudaStreamDestroy(stream));
  if (!ok) {
    std::fprintf(stderr, "bench_chunk_ring_gpu: a ring's output was wrong\n");
    return 1;
  }
  return 0;
}
