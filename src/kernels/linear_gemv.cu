// Decode linear layer ("gemv"): y[m, n] = x[m, k] · W[n, k]^T (+ bias) for 1 <= m <= 16, f16 or
// bf16 inputs, fp32 accumulation, y rounded once (to the input dtype or kept as f32).
//
// At these shapes the layer is a stream of W (n * k * 2 bytes, read once) and the job is to keep
// the HBM busy: every thread issues all its 16-byte W loads (ld.global.nc.L1::no_allocate, with
// a 256-byte L2 prefetch hint) for several K blocks before the first multiply, which keeps
// 4 KB per warp in flight.
//
// The multiplies run on the tensor cores (mma.sync m16n8k16, fp32 accumulators), the same
// accuracy class as cuBLASLt: at m = 16 an fp32 FMA per weight element and row of x would need the
// whole CUDA-core FMA rate to keep up with the memory. W is the A operand (16 rows of W = 16
// output features), x^T the B operand (8 rows of x per n8 tile; one tile for m <= 8, two for
// m <= 16), so the accumulator tile is y^T. No shared-memory staging: a dot product does not care
// in which order its k terms are added, so each thread takes 16 contiguous bytes (8 k values) of
// W rows g and g + 8 (g = lane / 4) and of x row g, at k offset 8 * (lane % 4) inside a 32-element
// block, and hands elements {0,1},{2,3} to one mma and {4,5},{6,7} to a second one as if they
// were the fragment's k pairs {2t, 2t+1} and {2t+8, 2t+9}. A and B use the same relabelling, so
// every product still pairs W[j, kk] with x[i, kk], and the 16 k slots of each mma are 16
// distinct k values.
//
// Work split (linear_gemv.h): a CTA (8 warps) owns 16 * R rows of W for all m rows; the warps of
// the CTA, and the kSplit CTAs of a thread-block cluster, take the 32-element K blocks
// round-robin (block b goes to warp (b mod 8 * kSplit)), so together they read each W row front
// to back. Partial tiles are summed in shared memory in warp order, then across the cluster
// through distributed shared memory in rank order, the bias is added in fp32 and y is rounded
// once. Tails: rows >= n, rows of x >= m and k chunks >= k are predicated off (zeros, no load);
// k % 8 == 0 is required, so a chunk is wholly inside or outside K.
//
// Fused with a decode layer's norms (LinearParams::normWeight / accumulate, linear.h), so its two
// RMSNorm kernels disappear without adding a step to any CTA's critical path:
//   input norm  RMSNorm(x) * w = s * (x * w) with one scale s per row of x, so the product is
//               s * (W · round(x * w)): each x chunk is multiplied by w as it is loaded (w is
//               read with it), the threads add the squares of the raw x they load, and those
//               sums meet in shared memory (and across the cluster) beside the partial tiles, so
//               each output gets its row's s = 1 / sqrt(mean(x^2) + eps) in the epilogue. Every
//               K block is loaded by exactly one warp of the cluster, so each row's sum covers
//               all of x, in an order that depends on the K split only, as the products' does.
//   accumulate  y (the residual stream) += the rounded output, rounded again. y is read before
//               the PDL wait: the kernel launched right before this one must not write it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/gemv_device.cuh"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"
#include "kernels/pdl.cuh"
#include "kernels/swiglu.h"

namespace es::kernel {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = detail::kGemvWarps;
constexpr int kThreads = kWarps * 32;

// What the epilogue does with each output (GemvEpilogue, and LinearParams::accumulate).
enum Epilogue { kStore, kSwigluPairs, kAccumulate };

// 16 bytes of W: read once, so not kept in L1; the L2 fetches the surrounding 256 bytes, which
// the neighbouring warps read next. Zeros and no access when !pred.
__device__ __forceinline__ uint4 loadW(const void* ptr, bool pred) {
  uint4 v;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "r"(static_cast<int>(pred)));
  return v;
}

// T: x/W/bias element type (bf16 or fp16); Y: y's (T or float). R: 16-row tiles of W per CTA.
// NT: n8 tiles of x rows (1: m <= 8, 2: m <= 16). gridDim = (ceil(n / 16R), kSplit), launched as
// clusters of (1, kSplit, 1) when kSplit > 1.
// SWIGLU (GemvEpilogue::kSwiglu, Y = T): W is a gate/up matrix in GateUpLayout::kInterleaved8
// (n % 16 == 0), so rows 16t + i and 16t + 8 + i (i < 8) of every 16-row tile are the gate and up
// rows of feature 8t + i; y is [m, n / 2] and gets silu(gate) * up, where gate and up are first
// rounded to T exactly as the plain kernel stores them, so the result equals the plain kernel
// followed by launchSwiglu bit for bit.
// EPI kAccumulate (Y = T): y[col, j] = round(y[col, j] + round(sum)), launchRmsNorm's residual
// add; y is read before the PDL wait (see the top).
// NORM: the input norm with weight normW [k] and normEps (see the top).
// CTAS_PER_SM: the occupancy ptxas is held to (launchTyped picks it): 3 for R = 1 (80 registers),
// 2 for R = 2, and either for R = 1 with NORM (GemvConfig::normCtasPerSm; at 3 those spill 16-52
// bytes, at 2 not).
template <typename T, typename Y, int R, int NT, Epilogue EPI, bool NORM, int CTAS_PER_SM>
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
    linearGemvKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                     Y* __restrict__ y, int32_t m, int32_t n, int32_t k,
                     const T* __restrict__ normW, float normEps) {
  constexpr bool SWIGLU = EPI == kSwigluPairs;
  static_assert(EPI == kStore || std::is_same_v<T, Y>,
                "the SwiGLU and accumulate epilogues write the input dtype");
  constexpr int U = 4 / R;  // K blocks loaded per round: U * R * 2 16-byte W loads per thread
  constexpr int kRows = 16 * R;
  constexpr int kCols = 8 * NT;
  constexpr int kTile = kRows * kCols;
  // Per-warp partial tiles, column-major (y^T[row, col] at [col][row]) so the reduction reads
  // consecutive rows; then the CTA's sum, which the other CTAs of the cluster read.
  __shared__ float warpPart[kWarps][kTile];
  __shared__ float ctaPart[kTile];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int split = static_cast<int>(gridDim.y), rank = static_cast<int>(blockIdx.y);
  const int64_t row0 = int64_t{blockIdx.x} * kRows;
  const int64_t kk = k;

  // This thread's W rows (row0 + 16r + g + 8h) and x rows (g + 8t), at k offset 8 * t4.
  const T* wp[R][2];
  bool wok[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + 16 * r + g + 8 * h;
      wok[r][h] = row < n;
      wp[r][h] = w + (wok[r][h] ? row * kk : 0) + 8 * t4;
    }
  }
  const T* xp[NT];
  bool xok[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int xr = g + 8 * t;
    xok[t] = xr < m;
    xp[t] = x + (xok[t] ? int64_t{xr} * kk : 0) + 8 * t4;
  }

  // W is never written by the kernel before this one (a programmatic dependent launch, pdl.cuh):
  // this thread's first round of W is loaded into the registers the first round's multiplies use
  // while that kernel finishes, then the kernel waits for it before x is read or y written, so
  // after the wait only x is left to read (a 0.6B layer's gemvs have one round per warp: all
  // their W). Registers rather than an L2 prefetch (prefetch.global.L2): the round is then ready
  // for its multiplies, not only closer to the SM.
  const int64_t blocks = (kk + 31) / 32;
  const int64_t stride = int64_t{split} * kWarps;
  const int64_t first = int64_t{rank} * kWarps + warp;  // this warp's first K block
  uint4 early[U][R][2];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t b = first + u * stride;
    const bool kin = b < blocks && b * 32 + 8 * t4 < kk;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        early[u][r][h] = loadW(wp[r][h] + (kin ? b * 32 : 0), kin && wok[r][h]);
      }
    }
  }
  // Output items (see finish below) are dealt to the cluster's threads round-robin, at most
  // kMaxItems to a thread. kAccumulate reads its items' y now, before the wait: the previous
  // kernel does not write y (the models: attention before o, gate/up before down), and the one
  // before it has completed.
  constexpr int kItems = SWIGLU ? kTile / 2 : kTile;
  constexpr int kMaxItems = (kItems + kThreads - 1) / kThreads;
  const int item0 = rank * kThreads + static_cast<int>(threadIdx.x), itemStride = split * kThreads;
  float yBefore[EPI == kAccumulate ? kMaxItems : 1];
  if constexpr (EPI == kAccumulate) {
#pragma unroll
    for (int i = 0; i < kMaxItems; ++i) {
      const int h = item0 + i * itemStride, col = h / kRows;
      const int64_t j = row0 + (h - col * kRows);
      yBefore[i] = h < kItems && col < m && j < n ? fwd::toF(y[int64_t{col} * n + j]) : 0.0f;
    }
  }
  pdl::enter();

  float acc[R][NT][4];
  float sq[NT];  // NORM: the squares of the raw x this thread loaded, row g + 8t
#pragma unroll
  for (int t = 0; t < NT; ++t) sq[t] = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][t][i] = 0.0f;
    }
  }

  // acc += W · x over one round's K blocks.
  auto multiply = [&](const uint4(&wv)[U][R][2], const uint4(&xv)[U][NT]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          mma16816<T>(acc[r][t], wv[u][r][0].x, wv[u][r][1].x, wv[u][r][0].y, wv[u][r][1].y,
                      xv[u][t].x, xv[u][t].y);
          mma16816<T>(acc[r][t], wv[u][r][0].z, wv[u][r][1].z, wv[u][r][0].w, wv[u][r][1].w,
                      xv[u][t].z, xv[u][t].w);
        }
      }
    }
  };
  // One round from K block b0: its W (unless already loaded) and x, then the multiplies.
  auto round = [&](int64_t b0, bool loadWHere, uint4(&wv)[U][R][2]) {
    uint4 xv[U][NT];
    uint4 nwv[NORM ? U : 1];  // NORM: w's chunk at this thread's k offset
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t b = b0 + u * stride;
      const int64_t c = b * 32 + 8 * t4;  // this thread's k offset; c + 8 <= k when c < k
      const bool kin = b < blocks && c < kk;
      if (loadWHere) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            wv[u][r][h] = loadW(wp[r][h] + (kin ? b * 32 : 0), kin && wok[r][h]);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) xv[u][t] = loadX(xp[t] + (kin ? b * 32 : 0), kin && xok[t]);
      if constexpr (NORM) nwv[u] = loadX(normW + (kin ? b * 32 : 0) + 8 * t4, kin);
    }
    if constexpr (NORM) {  // sq += x^2; x <- round(x * w) (zeros where not loaded)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float nw[8];
        unpack8<T>(nwv[u], nw);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float a[8];
          unpack8<T>(xv[u][t], a);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sq[t] += a[e] * a[e];
            a[e] = __fmul_rn(a[e], nw[e]);
          }
          xv[u][t] = pack8<T>(a);
        }
      }
    }
    multiply(wv, xv);
  };

  // 32-element K blocks, dealt round-robin over the split * 8 warps of the cluster; the first
  // round (W already in `early`) is peeled off, so `early` is dead after it.
  if (first < blocks) round(first, false, early);
  for (int64_t b0 = first + U * stride; b0 < blocks; b0 += U * stride) {
    uint4 wv[U][R][2];
    round(b0, true, wv);
  }

  // Accumulator (row g [+8] of tile r, columns 8t + 2*t4 + {0, 1}) -> warpPart[warp][col][row].
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int col = 8 * t + 2 * t4, row = 16 * r + g;
      warpPart[warp][col * kRows + row] = acc[r][t][0];
      warpPart[warp][(col + 1) * kRows + row] = acc[r][t][1];
      warpPart[warp][col * kRows + row + 8] = acc[r][t][2];
      warpPart[warp][(col + 1) * kRows + row + 8] = acc[r][t][3];
    }
  }
  // NORM: row g + 8t's squares over the warp's 4 lanes of that row, then per warp in shared memory.
  __shared__ float sqWarp[NORM ? kWarps : 1][kCols];
  __shared__ float sqCta[NORM ? kCols : 1];
  if constexpr (NORM) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float v = sq[t];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (t4 == 0) sqWarp[warp][g + 8 * t] = v;
    }
  }
  __syncthreads();

  // The sum of tile element e (column-major, as warpPart) over the CTA's warps / the cluster's
  // CTAs, always in the same fixed (rank, warp) order.
  auto ctaSum = [&](int e) {
    float s = warpPart[0][e];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) s += warpPart[v][e];
    return s;
  };
  cg::cluster_group cluster = cg::this_cluster();
  auto clusterSum = [&](int e) {
    float s = 0.0f;
    for (int q = 0; q < split; ++q) s += cluster.map_shared_rank(ctaPart, q)[e];
    return s;
  };
  // NORM: row col's squares over the CTA's warps / the cluster's CTAs, in (rank, warp) order.
  auto ctaSqSum = [&](int col) {
    float s = sqWarp[0][col];
#pragma unroll
    for (int v = 1; v < kWarps; ++v) s += sqWarp[v][col];
    return s;
  };
  auto rowScale = [&](int col) {
    if constexpr (!NORM) {
      return 1.0f;
    } else {
      float s = 0.0f;
      if (split == 1) {
        s = ctaSqSum(col);
      } else {
        for (int q = 0; q < split; ++q) s += cluster.map_shared_rank(sqCta, q)[col];
      }
      return 1.0f / sqrtf(s / static_cast<float>(k) + normEps);
    }
  };
  // Output item h (i: its index among this thread's items): without the SwiGLU epilogue, tile
  // element h: y[col, row0 + row] = round(sum + bias[row0 + row]) (sum scaled by the row's
  // RMSNorm scale with NORM). With it, the (gate, up) pair h of the tile's kRows / 2 pairs per
  // column.
  auto finish = [&](int h, int i, auto&& sumOf) {
    if constexpr (!SWIGLU) {
      const int col = h / kRows, row = h - col * kRows;
      const int64_t j = row0 + row;
      if (col < m && j < n) {
        float sum = sumOf(h);
        if constexpr (NORM) sum = __fmul_rn(sum, rowScale(col));
        if (bias != nullptr) sum = __fadd_rn(sum, fwd::toF(bias[j]));
        Y* out = y + int64_t{col} * n + j;
        if constexpr (EPI == kAccumulate) {
          *out = fwd::fromF<Y>(__fadd_rn(yBefore[i], fwd::toF(fwd::fromF<Y>(sum))));
        } else {
          *out = fwd::fromF<Y>(sum);
        }
      }
    } else {
      constexpr int kPairs = kRows / 2;
      const int col = h / kPairs, pair = h - col * kPairs;
      const int row = 16 * (pair / 8) + pair % 8;  // the gate row; its up row is row + 8
      const int64_t j = row0 + row;
      if (col < m && j < n) {  // n % 16 == 0: the up row j + 8 < n too
        float g = sumOf(col * kRows + row), u = sumOf(col * kRows + row + 8);
        if constexpr (NORM) {
          const float scale = rowScale(col);
          g = __fmul_rn(g, scale);
          u = __fmul_rn(u, scale);
        }
        if (bias != nullptr) {
          g = __fadd_rn(g, fwd::toF(bias[j]));
          u = __fadd_rn(u, fwd::toF(bias[j + 8]));
        }
        g = fwd::toF(fwd::fromF<T>(g));  // the plain kernel's rounding of y
        u = fwd::toF(fwd::fromF<T>(u));
        const int64_t feature = (j / 16) * 8 + j % 16;
        y[int64_t{col} * (n / 2) + feature] = fwd::fromF<Y>(fwd::siluTimes(g, u));
      }
    }
  };
  if (split == 1) {
#pragma unroll
    for (int i = 0; i < kMaxItems; ++i) {
      if (item0 + i * itemStride < kItems) finish(item0 + i * itemStride, i, ctaSum);
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile; e += kThreads) ctaPart[e] = ctaSum(e);
  if constexpr (NORM) {
    if (threadIdx.x < kCols) sqCta[threadIdx.x] = ctaSqSum(threadIdx.x);
  }
  cluster.sync();  // every CTA's ctaPart (and sqCta) is complete and visible to the cluster
#pragma unroll
  for (int i = 0; i < kMaxItems; ++i) {
    if (item0 + i * itemStride < kItems) finish(item0 + i * itemStride, i, clusterSum);
  }
  cluster.sync();  // no CTA exits while another may still read its shared memory
}

template <typename T, typename Y, int R, int NT, Epilogue EPI, bool NORM>
void launchTyped(const LinearParams& p, const detail::GemvConfig& cfg, cudaStream_t stream) {
  const int32_t split = cfg.kSplit;
  constexpr int64_t kRows = 16 * R;
  const int64_t tiles = (int64_t{p.n} + kRows - 1) / kRows;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(split), 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  int used = 0;
  if (split > 1) {
    attr[used].id = cudaLaunchAttributeClusterDimension;
    attr[used].val.clusterDim.x = 1;
    attr[used].val.clusterDim.y = static_cast<unsigned>(split);
    attr[used].val.clusterDim.z = 1;
    ++used;
  }
  if (pdl::enabled()) {  // a programmatic dependent of the previous kernel (pdl.cuh)
    attr[used].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[used].val.programmaticStreamSerializationAllowed = 1;
    ++used;
  }
  config.attrs = attr;
  config.numAttrs = used;
  // The instance compiled for detail::gemvCtasPerSm's occupancy (linear_gemv.h).
  auto kernel = linearGemvKernel < T, Y, R, NT, EPI, NORM, R == 1 && !NORM ? 3 : 2 > ;
  if constexpr (R == 1 && NORM) {
    if (detail::gemvCtasPerSm(cfg, true) == 3) kernel = linearGemvKernel<T, Y, R, NT, EPI, NORM, 3>;
  }
  ES_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<const T*>(p.x),
                                   static_cast<const T*>(p.w), static_cast<const T*>(p.bias),
                                   static_cast<Y*>(p.y), p.m, p.n, p.k,
                                   static_cast<const T*>(p.normWeight), p.normEps));
}

template <typename T, typename Y, Epilogue EPI, bool NORM>
void launchShape(const LinearParams& p, detail::GemvConfig cfg, cudaStream_t stream) {
  const bool twoTiles = p.m > 8;
  if (cfg.rowTiles == 1) {
    if (twoTiles)
      launchTyped<T, Y, 1, 2, EPI, NORM>(p, cfg, stream);
    else
      launchTyped<T, Y, 1, 1, EPI, NORM>(p, cfg, stream);
  } else {
    if (twoTiles)
      launchTyped<T, Y, 2, 2, EPI, NORM>(p, cfg, stream);
    else
      launchTyped<T, Y, 2, 1, EPI, NORM>(p, cfg, stream);
  }
}

template <typename T, typename Y, Epilogue EPI>
void launchNorm(const LinearParams& p, detail::GemvConfig cfg, cudaStream_t stream) {
  if (p.normWeight != nullptr)
    launchShape<T, Y, EPI, true>(p, cfg, stream);
  else
    launchShape<T, Y, EPI, false>(p, cfg, stream);
}

template <typename T>
void launchDtype(const LinearParams& p, detail::GemvConfig cfg, cudaStream_t stream,
                 detail::GemvEpilogue epilogue) {
  if (epilogue == detail::GemvEpilogue::kSwiglu)
    launchNorm<T, T, kSwigluPairs>(p, cfg, stream);
  else if (p.accumulate)
    launchNorm<T, T, kAccumulate>(p, cfg, stream);
  else if (p.outDtype == DType::kF32)
    launchNorm<T, float, kStore>(p, cfg, stream);
  else
    launchNorm<T, T, kStore>(p, cfg, stream);
}

}  // namespace

namespace detail {

void launchLinearGemv(const LinearParams& p, GemvConfig cfg, cudaStream_t stream,
                      GemvEpilogue epilogue) {
  constexpr const char* kWhere = "launchLinearGemv";
  if (!validate(p)) return;
  const char* why = gemvRejection(p);
  ES_CHECK_ARG(why == nullptr, kWhere, "params",
               "m=" + std::to_string(p.m) + " k=" + std::to_string(p.k) +
                   " dtype=" + std::string(dtype_name(p.dtype)),
               "not supported by the gemv: ", why == nullptr ? "" : why);
  ES_CHECK_ARG(cfg.rowTiles == 1 || cfg.rowTiles == 2, kWhere, "rowTiles", cfg.rowTiles,
               "must be 1 or 2");
  ES_CHECK_ARG(cfg.kSplit == 1 || cfg.kSplit == 2 || cfg.kSplit == 4 || cfg.kSplit == 8, kWhere,
               "kSplit", cfg.kSplit, "must be 1, 2, 4 or 8");
  ES_CHECK_ARG(cfg.normCtasPerSm == 2 || cfg.normCtasPerSm == 3, kWhere, "normCtasPerSm",
               cfg.normCtasPerSm, "must be 2 or 3");
  if (epilogue == GemvEpilogue::kSwiglu) {
    ES_CHECK_ARG(p.n % 16 == 0, kWhere, "n", p.n,
                 "must be a multiple of 16 for the SwiGLU epilogue (8 gate + 8 up rows a group)");
    ES_CHECK_ARG(p.outDtype == p.dtype, kWhere, "outDtype", dtype_name(p.outDtype),
                 "must be the input dtype for the SwiGLU epilogue");
    ES_CHECK_ARG(!p.accumulate, kWhere, "accumulate", "true",
                 "cannot be combined with the SwiGLU epilogue");
  }
  if (p.dtype == DType::kBF16)
    launchDtype<bf16>(p, cfg, stream, epilogue);
  else
    launchDtype<fp16>(p, cfg, stream, epilogue);
}

}  // namespace detail

}  // namespace es::kernel
