// Decode linear layer on a quantized W ("quantized gemv"): y[m, n] = x[m, k] · dequant(W)^T
// (+ bias) for 1 <= m <= 16, bf16 or f16 x, fp32 accumulation, y rounded once (to the input dtype
// or kept as f32). W is any QuantFormat (common/quant_format.h) in its backend layout.
//
// Bytes are time: W is read once, front to back, and never expanded in memory. Each warp stages
// one span of its 16 rows of W (quantGemvSpan elements: 128-210 bytes a row) into its own
// shared-memory buffer with 16-byte cp.async copies (L2 only), kQuantGemvStages spans deep, so
// 2-3 spans (4-7 KB) per warp are in flight while it multiplies the oldest. The copies cover each
// row's span by its 16-byte segments; the GGUF blocks (34, 18, 20, 210 bytes) are not 16-byte
// aligned, so a row's span may start inside a segment (the decoders add that shift), and a
// segment past the end of W is copied only up to the end (cp.async's source size, zero fill).
//
// Multiplies: tensor cores, mma.sync m16n8k16 with fp32 accumulators, W the A operand (16 rows),
// x^T the B operand (8 rows of x per n8 tile; one tile for m <= 8, two for m <= 16; rows >= m are
// zeros), as in the dense gemv (linear_gemv.cu). The scales stay out of the operands, so the
// products are those of the format's definition up to f32 summation order: each W element enters
// the mma as the integer (or fp8) value its format scales, which bf16 and f16 hold exactly
//   int4  q - z            Q8_0  q            Q4_0  q - 8        Q4_1  q (offset m)
//   Q4_K  q (offset -dmin*m)   Q5_K  q (offset -dmin*m)     Q6_K  q - 32      fp8  e4m3 value
// and every mma covers 16 k values that share one scale: per 32-element block, the lane with
// t4 = lane % 4 holds 8 contiguous k (8 * t4 ...) split over two mmas (k pairs {0,1},{2,3} and
// {4,5},{6,7} given to the fragment's k pairs {2t4, 2t4+1} and {2t4+8, 2t4+9}, the same relabelling
// for A and B), so both mmas lie inside the 32-block: one int4 group (>= 32), one GGUF block or
// K-quant sub-block, one fp8 group (128 or k). Q6_K has a scale per 16 elements, so there the lane
// takes k 4 * t4 ... and 16 + 4 * t4 ...: the first mma covers the block's first 16 k, the second
// its last 16. After the block's mmas, acc += scale * block sum (+ offset * sum of x over the
// block, itself an mma of x with an all-ones A, for the formats with an additive offset).
// Integer operands come from the magic-number trick: the bits of M + u (M = 1024 in f16, 128 in
// bf16, u < 128 a small unsigned integer OR-ed into the mantissa) minus M + offset in one packed
// subtraction, exact (the decoders: linear_quant_gemv_decode.h). fp8 to f16 is cvt.rn.f16x2.e4m3x2;
// to bf16 the e4m3 bits are placed as a bf16 whose value is 2^-120 times the e4m3 value (subnormals
// included), times 2^120 (exact). Q8_0 to bf16 goes through f32 (its 8 bits do not fit the bf16
// magic number).
//
// Work split (linear_quant_gemv.h): the spans go round-robin to the 8 warps of the CTA and the
// kSplit CTAs of the cluster; partial tiles are summed in shared memory in warp order, then
// across the cluster through distributed shared memory in rank order, the bias is added in fp32
// and y is rounded once. Nothing depends on m except how many x tiles are multiplied, and each
// output column of an mma depends only on its own row of x: a row's result is the same at every
// m (row invariance, as the dense gemv).
//
// Fused with a decode layer's norms (LinearParams::normWeight / accumulate) as the dense gemv is
// (linear.h): the input norm multiplies each x chunk by the norm weight as it is loaded, the lanes
// add the squares of the raw x they load, and those meet beside the partial tiles, so each output
// gets its row's s = 1 / sqrt(mean(x^2) + eps); the residual add rounds the product, adds it to y
// and rounds again. With GemvEpilogue::kSwiglu (a gate/up W in GateUpLayout::kInterleaved8) the
// epilogue pairs each tile's gate row i with its up row i + 8 and writes SwiGLU of the two.
//
// PDL: W is never written by the kernel before this one, so the first spans are copied before
// the PDL wait (pdl.cuh); x (and y, with accumulate) is read and y written after it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "kernels/cp_async.cuh"
#include "kernels/forward_ops_device.cuh"
#include "kernels/gemv_device.cuh"
#include "kernels/linear.h"
#include "kernels/linear_quant_gemv.h"
#include "kernels/linear_quant_gemv_decode.h"
#include "kernels/pdl.cuh"

namespace es::kernel {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = detail::kQuantGemvWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = detail::kQuantGemvStages;
constexpr int kRows = 16;  // rows of W per CTA (one m16 tile)

using quant::Block;
using quant::RowSrc;

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- global loads ------------------------------------------------------------------------------

// 8 bytes of x (loadX in gemv_device.cuh reads 16): cached in L1. Zeros and no access when !pred.
__device__ __forceinline__ uint2 loadX8(const void* ptr, bool pred) {
  uint2 v;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %3, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  @p ld.global.nc.v2.u32 {%0, %1}, [%2];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y)
      : "l"(ptr), "r"(static_cast<int>(pred)));
  return v;
}

// ---- the kernel --------------------------------------------------------------------------------

// T: x / bias element type (bf16 or fp16); Y: y's (T or float); NT: n8 tiles of x rows (1: m <= 8,
// 2: m <= 16). gridDim = (ceil(n / 16), kSplit), launched as clusters of (1, kSplit, 1) when
// kSplit > 1. Dynamic shared memory: quantGemvSmemBytes(F).
// NORM (Y = T): the input RMSNorm with weight normW [k] and normEps fused as in the dense gemv
// (linear.h): the product is s * (W · round(x * normW)) with s = 1 / sqrt(mean(x^2) + eps) per
// row of x; each x element is loaded by exactly one lane of the cluster (the lanes with its g and
// t4, in the warp that takes its span), which adds its square, and the squares meet in shared
// memory (and across the cluster) in the same fixed order as the products.
// accumulate (Y = T): y = round(y + round(sum)), the residual add (read after the PDL wait).
// swiglu (Y = T, GemvEpilogue::kSwiglu): W holds gate/up rows in GateUpLayout::kInterleaved8 (n %
// 16 == 0), so rows 16t + i and 16t + 8 + i (i < 8) of a CTA's tile are the gate and up rows of
// feature 8t + i: y [m, n / 2] gets silu(gate) * up with gate and up first rounded to T as the
// plain kernel stores them, bit for bit the plain kernel followed by launchSwiglu.
// Arguments: x [m, k] T; w [n, rowBytes] u8 (the layout's data); scales [n, scaleRowElems] f16
// (int4) / f32 (fp8) or null; zeros [n, zeroRowBytes] u8 (int4) or null; bias [n] T or null;
// y [m, n] Y ([m, n / 2] with swiglu); normW [k] T or null.
template <QuantFormat F, typename T, typename Y, int NT, bool NORM>
__global__ void __launch_bounds__(kThreads, 2)
    linearQuantGemvKernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                          const void* __restrict__ scales, const uint8_t* __restrict__ zeros,
                          const T* __restrict__ bias, Y* __restrict__ y, int32_t m, int32_t n,
                          int32_t k, int32_t group, int64_t rowBytes, int64_t scaleRowElems,
                          int64_t zeroRowBytes, const T* __restrict__ normW, float normEps,
                          bool accumulate, bool swiglu) {
  static_assert(!NORM || std::is_same_v<T, Y>, "the fused norm writes the input dtype");
  using Tr = quant::Traits<F>;
  constexpr int kCols = 8 * NT;
  constexpr int kTile = kRows * kCols;
  extern __shared__ __align__(16) uint8_t stage[];  // [warp][stage][row][kStride]
  // Per-warp partial tiles, column-major (y^T[row, col] at [col][row]); then the CTA's sum, which
  // the other CTAs of the cluster read.
  __shared__ float warpPart[kWarps][kTile];
  __shared__ float ctaPart[kTile];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int split = static_cast<int>(gridDim.y), rank = static_cast<int>(blockIdx.y);
  const int64_t row0 = int64_t{blockIdx.x} * kRows;
  const int64_t spans = (int64_t{k} + Tr::kSpan - 1) / Tr::kSpan;
  const int64_t stride = int64_t{split} * kWarps;
  const int64_t first = int64_t{rank} * kWarps + warp;  // this warp's first span
  uint8_t* const buf = stage + warp * (kStages * kRows * Tr::kStride);

  // Copies span u of the CTA's 16 rows into stage st, by the 16-byte segments holding each row's
  // span (quant::spanSegment).
  auto issue = [&](int64_t u, int st) {
    uint8_t* dst = buf + st * (kRows * Tr::kStride);
    for (int i = lane; i < kRows * Tr::kSegs; i += 32) {
      const int r = i / Tr::kSegs, s = i - r * Tr::kSegs;
      const quant::Segment seg = quant::spanSegment<F>(row0 + r, n, rowBytes, u, s);
      if (seg.bytes >= 0) cpAsync16L2(dst + r * Tr::kStride + 16 * s, w + seg.src, seg.bytes);
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    const int64_t u = first + s * stride;
    if (u < spans) issue(u, s);
    cpAsyncCommit();
  }
  pdl::enter();

  // This lane's rows of W (row0 + g, row0 + g + 8) and of x (g + 8t).
  const int64_t wr[2] = {row0 + g, row0 + g + 8};
  const T* xp[NT];
  bool xok[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int xr = g + 8 * t;
    xok[t] = xr < m;
    xp[t] = x + (xok[t] ? int64_t{xr} * k : 0);
  }
  RowSrc src[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool ok = wr[h] < n;
    if constexpr (F == QuantFormat::kInt4) {
      src[h].scales = ok ? static_cast<const uint16_t*>(scales) + wr[h] * scaleRowElems : nullptr;
      src[h].zeros = ok ? zeros + wr[h] * zeroRowBytes : nullptr;
    } else if constexpr (F == QuantFormat::kFp8E4M3) {
      src[h].scales = ok ? static_cast<const float*>(scales) + wr[h] * scaleRowElems : nullptr;
      src[h].zeros = nullptr;
    } else {
      src[h].scales = nullptr;
      src[h].zeros = nullptr;
    }
    src[h].scale = 0.0f;
    src[h].zeroSub = quant::offsetPair<T>(0);
  }

  float acc[NT][4];
  float sq[NT];  // NORM: the squares of the raw x this lane loaded, row g + 8t
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    sq[t] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = 0.0f;
  }

  int32_t groupEnd = 0;  // int4 / fp8: the end of the scale group src[] holds (k grows)
  int it = 0;
  for (int64_t u = first; u < spans; u += stride, ++it) {
    const int64_t next = u + (kStages - 1) * stride;
    if (next < spans) issue(next, (it + kStages - 1) % kStages);
    cpAsyncCommit();
    cpAsyncWait<kStages - 1>();  // this lane's copies of span u have landed
    __syncwarp();                // ... and every lane's
    const uint8_t* sp = buf + (it % kStages) * (kRows * Tr::kStride);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      src[h].span = sp + (h * 8 + g) * Tr::kStride + (quant::spanAt<F>(wr[h], rowBytes, u) & 15);
    }
    const int64_t k0 = u * Tr::kSpan;
    const int blocks = static_cast<int>((min64(Tr::kSpan, k - k0) + 31) / 32);
    // The lane's x at the span's first block (k offset 8 t4, or 4 t4 for Q6_K).
    const int64_t xk = k0 + (Tr::kSplit4 ? 4 * t4 : 8 * t4);
    // Unrolled over the span's blocks (shared-memory and x offsets become constants); only the
    // last span of a row may have fewer blocks.
#pragma unroll
    for (int b = 0; b < Tr::kSpan / 32; ++b) {
      if (b >= blocks) break;
      const int64_t kb = k0 + 32 * b;
      const int64_t c0 = xk + 32 * b;
      // Only fp8 rows may end 16 k into a block (k % 32 == 16).
      const bool kin = F != QuantFormat::kFp8E4M3 || c0 < k;
      if constexpr (F == QuantFormat::kInt4 || F == QuantFormat::kFp8E4M3) {
        if (static_cast<int32_t>(kb) >= groupEnd) {  // a new scale group (warp-uniform)
          const uint32_t gi = static_cast<uint32_t>(kb) / static_cast<uint32_t>(group);
          quant::loadGroup<F, T>(src[0], gi);
          quant::loadGroup<F, T>(src[1], gi);
          groupEnd = static_cast<int32_t>(gi + 1) * group;
        }
      }
      uint4 xv[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if constexpr (Tr::kSplit4) {
          const uint2 lo = loadX8(xp[t] + c0, kin && xok[t]);
          const uint2 hi = loadX8(xp[t] + c0 + 16, kin && xok[t]);
          xv[t] = make_uint4(lo.x, lo.y, hi.x, hi.y);
        } else {
          xv[t] = loadX(xp[t] + c0, kin && xok[t]);
        }
      }
      if constexpr (NORM) {  // sq += x^2; x <- round(x * normW), normW read as x is
        uint4 nwv;
        if constexpr (Tr::kSplit4) {
          const uint2 lo = loadX8(normW + c0, kin);
          const uint2 hi = loadX8(normW + c0 + 16, kin);
          nwv = make_uint4(lo.x, lo.y, hi.x, hi.y);
        } else {
          nwv = loadX(normW + c0, kin);
        }
        float nw[8];
        unpack8<T>(nwv, nw);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float a[8];
          unpack8<T>(xv[t], a);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sq[t] += a[e] * a[e];
            a[e] = __fmul_rn(a[e], nw[e]);
          }
          xv[t] = pack8<T>(a);
        }
      }
      Block wb[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wb[h] = quant::decodeBlock<F, T>(src[h], b, t4);
        if (!kin) {
#pragma unroll
          for (int j = 0; j < 4; ++j) wb[h].p[j] = 0;  // k beyond the row: no NaN from padding
        }
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float s0[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma16816<T>(s0, wb[0].p[0], wb[1].p[0], wb[0].p[1], wb[1].p[1], xv[t].x, xv[t].y);
        if constexpr (Tr::kSplit4) {
          mma16816<T>(s1, wb[0].p[2], wb[1].p[2], wb[0].p[3], wb[1].p[3], xv[t].z, xv[t].w);
        } else {
          mma16816<T>(s0, wb[0].p[2], wb[1].p[2], wb[0].p[3], wb[1].p[3], xv[t].z, xv[t].w);
        }
        // Accumulator elements 0, 1: W row g; 2, 3: W row g + 8.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const Block& rb = wb[i >> 1];
          acc[t][i] = fmaf(rb.s0, s0[i], acc[t][i]);
          if constexpr (Tr::kSplit4) acc[t][i] = fmaf(rb.s1, s1[i], acc[t][i]);
        }
        if constexpr (Tr::kAffine) {
          float xs[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // the block's x sums, columns 2t4, 2t4 + 1
          const uint32_t one = quant::ones2<T>();
          mma16816<T>(xs, one, one, one, one, xv[t].x, xv[t].y);
          mma16816<T>(xs, one, one, one, one, xv[t].z, xv[t].w);
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[t][i] = fmaf(wb[i >> 1].off, xs[i], acc[t][i]);
        }
      }
    }
    __syncwarp();  // every lane is done with this stage before it is copied over
  }
  cpAsyncWait<0>();

  // Accumulator (row g [+8], columns 8t + 2 t4 + {0, 1}) -> warpPart[warp][col][row].
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int col = 8 * t + 2 * t4;
    warpPart[warp][col * kRows + g] = acc[t][0];
    warpPart[warp][(col + 1) * kRows + g] = acc[t][1];
    warpPart[warp][col * kRows + g + 8] = acc[t][2];
    warpPart[warp][(col + 1) * kRows + g + 8] = acc[t][3];
  }
  // NORM: row g + 8t's squares over the warp's 4 lanes of that row, then per warp.
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

  // Tile element e's sum over the CTA's warps / the cluster's CTAs, in fixed (rank, warp) order.
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
  // NORM: row col's squares over the CTA's warps / the cluster's CTAs, in (rank, warp) order, and
  // its RMSNorm scale.
  auto ctaSqSum = [&](int col) {
    float v = sqWarp[0][col];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) v += sqWarp[q][col];
    return v;
  };
  auto rowScale = [&](int col) {
    float v = 0.0f;
    if (split == 1) {
      v = ctaSqSum(col);
    } else {
      for (int q = 0; q < split; ++q) v += cluster.map_shared_rank(sqCta, q)[col];
    }
    return 1.0f / sqrtf(v / static_cast<float>(k) + normEps);
  };
  // Output item h: without swiglu tile element h, y[col, row0 + row] = round(sum + bias) (sum
  // scaled by the row's RMSNorm scale with NORM); with it the (gate, up) pair h of the tile's 8
  // pairs per column.
  auto finish = [&](int h, auto&& sumOf) {
    if (!swiglu) {
      const int col = h / kRows, row = h - col * kRows;
      const int64_t j = row0 + row;
      if (col >= m || j >= n) return;
      float sum = sumOf(h);
      if constexpr (NORM) sum = __fmul_rn(sum, rowScale(col));
      if (bias != nullptr) sum = __fadd_rn(sum, fwd::toF(bias[j]));
      Y* out = y + int64_t{col} * n + j;
      if (accumulate) {  // Y = T (quantGemvRejection)
        *out = fwd::fromF<Y>(__fadd_rn(fwd::toF(*out), fwd::toF(fwd::fromF<Y>(sum))));
      } else {
        *out = fwd::fromF<Y>(sum);
      }
    } else {
      const int col = h / 8, row = h - col * 8;  // the gate row; its up row is row + 8
      const int64_t j = row0 + row;
      if (col >= m || j >= n) return;  // n % 16 == 0: the up row j + 8 < n too
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
      g = fwd::toF(fwd::fromF<Y>(g));  // the plain kernel's rounding of y
      u = fwd::toF(fwd::fromF<Y>(u));
      y[int64_t{col} * (n / 2) + row0 / 2 + row] = fwd::fromF<Y>(fwd::siluTimes(g, u));
    }
  };
  const int items = swiglu ? kTile / 2 : kTile;
  if (split == 1) {
    for (int h = threadIdx.x; h < items; h += kThreads) finish(h, ctaSum);
    return;
  }
  for (int e = threadIdx.x; e < kTile; e += kThreads) ctaPart[e] = ctaSum(e);
  if constexpr (NORM) {
    if (threadIdx.x < kCols) sqCta[threadIdx.x] = ctaSqSum(threadIdx.x);
  }
  cluster.sync();  // every CTA's ctaPart (and sqCta) is complete and visible to the cluster
  for (int h = rank * kThreads + static_cast<int>(threadIdx.x); h < items; h += split * kThreads) {
    finish(h, clusterSum);
  }
  cluster.sync();  // no CTA exits while another may still read its shared memory
}

template <QuantFormat F, typename T, typename Y, int NT, bool NORM>
void launchTyped(const LinearParams& p, const detail::QuantGemvConfig& cfg, bool swiglu,
                 cudaStream_t stream) {
  const QuantizedWeightView& q = *p.quantized;
  const int32_t split = cfg.kSplit;
  const int64_t tiles = (int64_t{p.n} + kRows - 1) / kRows;
  const int smem = detail::quantGemvSmemBytes(F);
  auto kernel = linearQuantGemvKernel<F, T, Y, NT, NORM>;
  // Above 48 KB a kernel's dynamic shared memory must be allowed first (once per instance).
  static const bool allowed = [&] {
    ES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)allowed;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(split), 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
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
  ES_CUDA_CHECK(cudaLaunchKernelEx(
      &config, kernel, static_cast<const T*>(p.x), static_cast<const uint8_t*>(q.data), q.scales,
      static_cast<const uint8_t*>(q.zeros), static_cast<const T*>(p.bias), static_cast<Y*>(p.y),
      p.m, p.n, p.k, q.group, dataRowBytes(q.format, p.k, q.group),
      scaleRowBytes(q.format, p.k, q.group) / (q.format == QuantFormat::kFp8E4M3 ? 4 : 2),
      zeroRowBytes(q.format, p.k, q.group), static_cast<const T*>(p.normWeight), p.normEps,
      p.accumulate, swiglu));
}

template <QuantFormat F, typename T>
void launchOut(const LinearParams& p, const detail::QuantGemvConfig& cfg, bool swiglu,
               cudaStream_t stream) {
  const bool twoTiles = p.m > 8;
  if (p.normWeight != nullptr) {  // outDtype == dtype (quantGemvRejection)
    if (twoTiles)
      launchTyped<F, T, T, 2, true>(p, cfg, swiglu, stream);
    else
      launchTyped<F, T, T, 1, true>(p, cfg, swiglu, stream);
  } else if (p.outDtype == DType::kF32) {
    if (twoTiles)
      launchTyped<F, T, float, 2, false>(p, cfg, swiglu, stream);
    else
      launchTyped<F, T, float, 1, false>(p, cfg, swiglu, stream);
  } else {
    if (twoTiles)
      launchTyped<F, T, T, 2, false>(p, cfg, swiglu, stream);
    else
      launchTyped<F, T, T, 1, false>(p, cfg, swiglu, stream);
  }
}

template <QuantFormat F>
void launchFormat(const LinearParams& p, const detail::QuantGemvConfig& cfg, bool swiglu,
                  cudaStream_t stream) {
  if (p.dtype == DType::kBF16)
    launchOut<F, bf16>(p, cfg, swiglu, stream);
  else
    launchOut<F, fp16>(p, cfg, swiglu, stream);
}

}  // namespace

namespace detail {

void launchLinearQuantGemv(const LinearParams& p, QuantGemvConfig cfg, cudaStream_t stream,
                           GemvEpilogue epilogue) {
  constexpr const char* kWhere = "launchLinearQuantGemv";
  if (!validate(p)) return;
  const char* why = quantGemvRejection(p);
  ES_CHECK_ARG(why == nullptr, kWhere, "params",
               "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                   " k=" + std::to_string(p.k) + " dtype=" + std::string(dtype_name(p.dtype)),
               "not supported by the quantized gemv: ", why == nullptr ? "" : why);
  ES_CHECK_ARG(cfg.kSplit == 1 || cfg.kSplit == 2 || cfg.kSplit == 4 || cfg.kSplit == 8, kWhere,
               "kSplit", cfg.kSplit, "must be 1, 2, 4 or 8");
  const bool swiglu = epilogue == GemvEpilogue::kSwiglu;
  if (swiglu) {
    ES_CHECK_ARG(p.n % 16 == 0, kWhere, "n", p.n,
                 "must be a multiple of 16 for the SwiGLU epilogue (8 gate + 8 up rows a group)");
    ES_CHECK_ARG(p.outDtype == p.dtype, kWhere, "outDtype", dtype_name(p.outDtype),
                 "must be the input dtype for the SwiGLU epilogue");
    ES_CHECK_ARG(!p.accumulate, kWhere, "accumulate", "true",
                 "cannot be combined with the SwiGLU epilogue");
  }
  switch (p.quantized->format) {
    case QuantFormat::kInt4:
      return launchFormat<QuantFormat::kInt4>(p, cfg, swiglu, stream);
    case QuantFormat::kFp8E4M3:
      return launchFormat<QuantFormat::kFp8E4M3>(p, cfg, swiglu, stream);
    case QuantFormat::kGgufQ8_0:
      return launchFormat<QuantFormat::kGgufQ8_0>(p, cfg, swiglu, stream);
    case QuantFormat::kGgufQ4_0:
      return launchFormat<QuantFormat::kGgufQ4_0>(p, cfg, swiglu, stream);
    case QuantFormat::kGgufQ4_1:
      return launchFormat<QuantFormat::kGgufQ4_1>(p, cfg, swiglu, stream);
    case QuantFormat::kGgufQ4_K:
      return launchFormat<QuantFormat::kGgufQ4_K>(p, cfg, swiglu, stream);
    case QuantFormat::kGgufQ5_K:
      return launchFormat<QuantFormat::kGgufQ5_K>(p, cfg, swiglu, stream);
    case QuantFormat::kGgufQ6_K:
      return launchFormat<QuantFormat::kGgufQ6_K>(p, cfg, swiglu, stream);
  }
}

}  // namespace detail

}  // namespace es::kernel
