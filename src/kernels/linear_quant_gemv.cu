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
// subtraction, exact. fp8 to f16 is cvt.rn.f16x2.e4m3x2; to bf16 the e4m3 bits are placed as a
// bf16 whose value is 2^-120 times the e4m3 value (subnormals included), times 2^120 (exact).
// Q8_0 to bf16 goes through f32 (its 8 bits do not fit the bf16 magic number).
//
// Work split (linear_quant_gemv.h): the spans go round-robin to the 8 warps of the CTA and the
// kSplit CTAs of the cluster; partial tiles are summed in shared memory in warp order, then
// across the cluster through distributed shared memory in rank order, the bias is added in fp32
// and y is rounded once. Nothing depends on m except how many x tiles are multiplied, and each
// output column of an mma depends only on its own row of x: a row's result is the same at every
// m (row invariance, as the dense gemv).
//
// PDL: W is never written by the kernel before this one, so the first spans are copied before
// the PDL wait (pdl.cuh); x is read and y written after it.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/linear.h"
#include "kernels/linear_quant_gemv.h"
#include "kernels/pdl.cuh"

namespace es::kernel {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = detail::kQuantGemvWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = detail::kQuantGemvStages;
constexpr int kRows = 16;  // rows of W per CTA (one m16 tile)

// ---- format traits -----------------------------------------------------------------------------

// kSpan: K elements a warp stages at once (quantGemvSpan); kSpanBytes: their bytes in a row;
// kStride: a staged row's bytes in shared memory (quantGemvRowStride); kSplit4: the Q6_K lane
// mapping (k 4t4.. and 16 + 4t4..); kAffine: w = scale * q + offset (x sums needed).
template <QuantFormat F>
struct Traits {
  static constexpr int kSpan =
      (F == QuantFormat::kFp8E4M3 || F == QuantFormat::kGgufQ8_0) ? 128 : 256;
  static constexpr int kSpanBytes = F == QuantFormat::kInt4       ? kSpan / 2
                                    : F == QuantFormat::kFp8E4M3  ? kSpan
                                    : F == QuantFormat::kGgufQ8_0 ? kSpan / 32 * 34
                                    : F == QuantFormat::kGgufQ4_0 ? kSpan / 32 * 18
                                    : F == QuantFormat::kGgufQ4_1 ? kSpan / 32 * 20
                                    : F == QuantFormat::kGgufQ4_K ? 144
                                    : F == QuantFormat::kGgufQ5_K ? 176
                                                                  : 210;
  static constexpr int kStride = (kSpanBytes + 15) / 16 * 16 + 16;
  static constexpr int kSegs = kStride / 16;  // 16-byte segments a staged row may need
  static constexpr bool kSplit4 = F == QuantFormat::kGgufQ6_K;
  static constexpr bool kAffine =
      F == QuantFormat::kGgufQ4_1 || F == QuantFormat::kGgufQ4_K || F == QuantFormat::kGgufQ5_K;
};

// ---- small device helpers ----------------------------------------------------------------------

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
__device__ __forceinline__ uint32_t lds16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
__device__ __forceinline__ float halfAt(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(lds16(p))));
}

// The magic number M of T (the bits of 1024.0 in f16, 128.0 in bf16), twice: M + u has the bits
// M | u for an integer 0 <= u < 128 in both.
template <typename T>
__device__ __forceinline__ uint32_t magic2() {
  return std::is_same_v<T, bf16> ? 0x43004300u : 0x64006400u;
}
// 1.0 twice in T (the all-ones A operand of the x sums).
template <typename T>
__device__ __forceinline__ uint32_t ones2() {
  return std::is_same_v<T, bf16> ? 0x3f803f80u : 0x3c003c00u;
}

// a - b for two packed T values, rounded to nearest (exact for the integers used here).
template <typename T>
__device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (std::is_same_v<T, bf16>) {
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  } else {
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
}

// The packed T pair (u0 - off, u1 - off) for u = u0 | u1 << 16 (u0, u1, off < 128; < 1024 in
// f16).
template <typename T>
__device__ __forceinline__ uint32_t intPair(uint32_t u, uint32_t off) {
  return sub2<T>(u | magic2<T>(), magic2<T>() | off | (off << 16));
}

// Bytes 0 and 1 of the 16-bit value h moved to bits 0-7 and 16-23.
__device__ __forceinline__ uint32_t spread16(uint32_t h) { return (h | (h << 8)) & 0x00ff00ffu; }

// FP8 E4M3 pair (bytes 0, 1 of the low 16 bits of v) as packed T, exact.
template <typename T>
__device__ __forceinline__ uint32_t fp8Pair(uint32_t v) {
  if constexpr (std::is_same_v<T, fp16>) {
    uint32_t d;
    asm("{\n"
        "  .reg .b16 lo;\n"
        "  cvt.u16.u32 lo, %1;\n"
        "  cvt.rn.f16x2.e4m3x2 %0, lo;\n"
        "}\n"
        : "=r"(d)
        : "r"(v));
    return d;
  } else {
    // Exponent and mantissa (7 bits) to bits 4-10 of each half, the sign to bit 15: a bf16 of
    // 2^-120 times the e4m3 value (an e4m3 exponent e reads as the bf16 exponent e, bias 127
    // instead of 7; e = 0 reads as the bf16 subnormal 0.mmm x 2^-126 = 2^-120 x 0.mmm x 2^-6).
    const uint32_t mag = prmt(v & 0x7f7fu, 0u, 0x4140u) << 4;
    const uint32_t sign = prmt(v, 0u, 0x1404u) & 0x80008000u;
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(mag | sign), "r"(0x7b807b80u));  // x 2^120
    return d;
  }
}

// ---- global loads
// --------------------------------------------------------------------------------

// 16 / 8 bytes of x: read by every CTA, so cached in L1. Zeros and no access when !pred.
__device__ __forceinline__ uint4 loadX16(const void* ptr, bool pred) {
  uint4 v;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "r"(static_cast<int>(pred)));
  return v;
}
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

// cp.async of the 16 bytes at src to dst (shared), of which only the first srcBytes (0-16) are
// read; the rest of dst is zero-filled. L2 only: W is read once.
__device__ __forceinline__ void copy16(void* dst, const void* src, int srcBytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(srcBytes)
               : "memory");
}
__device__ __forceinline__ void copyCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copyWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// c += A · B for one m16n8k16 tile, fp32 accumulators. A: {a0, a1, a2, a3} = (row g, k pair lo),
// (row g + 8, k pair lo), (row g, k pair hi), (row g + 8, k pair hi); B: {b0, b1} = (k pair lo,
// column g), (k pair hi, column g); c: (row g, columns 2t, 2t+1), (row g + 8, same columns).
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// ---- per-format decoding
// -------------------------------------------------------------------------

// One row's operands for one 32-element block: p[0], p[1] feed the first mma (the lane's k pairs
// lo, hi), p[2], p[3] the second; s0 / s1 scale the first / second mma's sums (equal except for
// Q6_K); off multiplies the block's x sum (the affine formats).
struct Block {
  uint32_t p[4];
  float s0, s1, off;
};

// What the decoders of one row see: its staged span bytes (shared memory, from the span's first
// byte), and for int4 / fp8 its rows of scales and zeros (global) and the group.
struct RowSrc {
  const uint8_t* span;
  const void* scales;    // this row's scales, or null for a row >= n
  const uint8_t* zeros;  // this row's zeros (int4)
};

// Block b of the span (span k offset kSpan * u; the block's global k offset is kb) for the lane
// with t4 = lane % 4: the lane's 8 elements are k = 8 * t4 + e of the block (4 * t4 + e and
// 16 + 4 * t4 + e for Q6_K), e = 0..7.
template <QuantFormat F, typename T>
__device__ __forceinline__ Block decodeBlock(const RowSrc& r, int b, int t4, int64_t kb,
                                             int32_t group) {
  Block o;
  if constexpr (F == QuantFormat::kInt4) {
    // 16 bytes a block; byte j holds k = 2j (low nibble) and 2j + 1 (high nibble).
    const uint32_t v = lds32(r.span + 16 * b + 4 * t4), hv = v >> 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // byte 0 = byte j of v (low nibble: k 2j), byte 2 = byte j of v >> 4 (k 2j + 1).
      const uint32_t sel =
          uint32_t(j) | (uint32_t(j) << 4) | (uint32_t(4 + j) << 8) | (uint32_t(4 + j) << 12);
      o.p[j] = prmt(v, hv, sel) & 0x000f000fu;
    }
    uint32_t z = 0;
    float s = 0.0f;
    if (r.scales != nullptr) {
      const int64_t gi = kb / group;
      s = __half2float(static_cast<const __half*>(r.scales)[gi]);
      z = r.zeros[gi];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) o.p[j] = intPair<T>(o.p[j], z);
    o.s0 = o.s1 = s;
    o.off = 0.0f;
  } else if constexpr (F == QuantFormat::kFp8E4M3) {
    const uint2 v = *reinterpret_cast<const uint2*>(r.span + 32 * b + 8 * t4);
    o.p[0] = fp8Pair<T>(v.x);
    o.p[1] = fp8Pair<T>(v.x >> 16);
    o.p[2] = fp8Pair<T>(v.y);
    o.p[3] = fp8Pair<T>(v.y >> 16);
    const float s = r.scales != nullptr ? static_cast<const float*>(r.scales)[kb / group] : 0.0f;
    o.s0 = o.s1 = s;
    o.off = 0.0f;
  } else if constexpr (F == QuantFormat::kGgufQ8_0) {
    // 34 bytes: d (f16), 32 x int8 q; w = d * q.
    const uint8_t* blk = r.span + 34 * b;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t h = lds16(blk + 2 + 8 * t4 + 2 * j);
      if constexpr (std::is_same_v<T, fp16>) {
        o.p[j] = intPair<T>(spread16(h) ^ 0x00800080u, 128);  // (q + 128) - 128
      } else {
        const float q0 = static_cast<float>(static_cast<int8_t>(h & 0xffu));
        const float q1 = static_cast<float>(static_cast<int8_t>(h >> 8));
        const __nv_bfloat162 pr = __floats2bfloat162_rn(q0, q1);
        o.p[j] = *reinterpret_cast<const uint32_t*>(&pr);
      }
    }
    o.s0 = o.s1 = halfAt(blk);
    o.off = 0.0f;
  } else if constexpr (F == QuantFormat::kGgufQ4_0 || F == QuantFormat::kGgufQ4_1) {
    // Q4_0: 18 bytes: d, 16 bytes of nibbles; w = d * (q - 8). Q4_1: 20 bytes: d, m, nibbles;
    // w = d * q + m. Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
    constexpr bool kQ41 = F == QuantFormat::kGgufQ4_1;
    const uint8_t* blk = r.span + (kQ41 ? 20 : 18) * b;
    const uint8_t* qs = blk + (kQ41 ? 4 : 2) + 8 * (t4 & 1);
    const int sh = t4 >= 2 ? 4 : 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t n = (spread16(lds16(qs + 2 * j)) >> sh) & 0x000f000fu;
      o.p[j] = intPair<T>(n, kQ41 ? 0u : 8u);
    }
    o.s0 = o.s1 = halfAt(blk);
    o.off = kQ41 ? halfAt(blk + 2) : 0.0f;
  } else if constexpr (F == QuantFormat::kGgufQ4_K || F == QuantFormat::kGgufQ5_K) {
    // Q4_K: 144 bytes: d, dmin, scales[12], qs[128]; Q5_K: 176 bytes: d, dmin, scales[12],
    // qh[32], qs[128]. Block b (sub-block b) is chunk c = b / 2 of qs: low nibbles of
    // qs[32c + l] for even b, high nibbles for odd b; Q5_K's fifth bit is bit b of qh[l].
    // w = (d * sc) * q - dmin * m with the sub-block's 6-bit sc and m. Both block sizes are
    // multiples of 16, so the span is 16-byte aligned in shared memory (4-byte reads).
    constexpr bool kQ5 = F == QuantFormat::kGgufQ5_K;
    const uint8_t* blk = r.span;
    const uint8_t* qs = blk + (kQ5 ? 48 : 16) + 32 * (b >> 1) + 8 * t4;
    const int sh = (b & 1) * 4;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t v = lds32(qs + 4 * w);
      const uint32_t qh = kQ5 ? lds32(blk + 16 + 8 * t4 + 4 * w) : 0u;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t sel = h == 0 ? 0x4140u : 0x4342u;  // bytes 2h, 2h + 1 to bits 0, 16
        uint32_t n = (prmt(v, 0u, sel) >> sh) & 0x000f000fu;
        if constexpr (kQ5) n |= ((prmt(qh, 0u, sel) >> b) & 0x00010001u) << 4;
        o.p[2 * w + h] = intPair<T>(n, 0);
      }
    }
    const uint8_t* sc = blk + 4;
    int scale, min;
    if (b < 4) {
      scale = sc[b] & 63;
      min = sc[b + 4] & 63;
    } else {
      scale = (sc[b + 4] & 0x0f) | ((sc[b - 4] >> 6) << 4);
      min = (sc[b + 4] >> 4) | ((sc[b] >> 6) << 4);
    }
    o.s0 = o.s1 = __fmul_rn(halfAt(blk), static_cast<float>(scale));
    o.off = -__fmul_rn(halfAt(blk + 2), static_cast<float>(min));
  } else {
    // Q6_K: 210 bytes: ql[128], qh[64], int8 scales[16], d. Block b = 32-element group kk = b % 4
    // of half hf = b / 4: element l (0..31) has its low 4 bits in ql[64 hf + 32 (kk & 1) + l]
    // (low nibble for kk < 2, high for kk >= 2) and its top 2 bits in bits 2kk, 2kk + 1 of
    // qh[32 hf + l]; w = (d * scales[8 hf + 2 kk + l / 16]) * (q - 32). The lane takes
    // l = 4 t4 + e (first mma) and 16 + 4 t4 + e (second), e = 0..3.
    const int hf = b >> 2, kk = b & 3;
    const uint8_t* ql = r.span + 64 * hf + 32 * (kk & 1) + 4 * t4;
    const uint8_t* qh = r.span + 128 + 32 * hf + 4 * t4;
    const int shl = (kk >> 1) * 4, shh = 2 * kk;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int at = (j >> 1) * 16 + (j & 1) * 2;  // l - 4 t4 of the pair's first element
      const uint32_t lo = (spread16(lds16(ql + at)) >> shl) & 0x000f000fu;
      const uint32_t hi = (spread16(lds16(qh + at)) >> shh) & 0x00030003u;
      o.p[j] = intPair<T>(lo | (hi << 4), 32);
    }
    const float d = halfAt(r.span + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(r.span + 192 + 8 * hf + 2 * kk);
    o.s0 = __fmul_rn(d, static_cast<float>(sc[0]));
    o.s1 = __fmul_rn(d, static_cast<float>(sc[1]));
    o.off = 0.0f;
  }
  return o;
}

// ---- the kernel
// ----------------------------------------------------------------------------------

// T: x / bias element type (bf16 or fp16); Y: y's (T or float); NT: n8 tiles of x rows (1: m <= 8,
// 2: m <= 16). gridDim = (ceil(n / 16), kSplit), launched as clusters of (1, kSplit, 1) when
// kSplit > 1. Dynamic shared memory: quantGemvSmemBytes(F).
template <QuantFormat F, typename T, typename Y, int NT>
__global__ void __launch_bounds__(kThreads, 2)
    linearQuantGemvKernel(const T* __restrict__ x, const uint8_t* __restrict__ w,
                          const void* __restrict__ scales, const uint8_t* __restrict__ zeros,
                          const T* __restrict__ bias, Y* __restrict__ y, int32_t m, int32_t n,
                          int32_t k, int32_t group, int64_t rowBytes, int64_t scaleRowElems,
                          int64_t zeroRowBytes) {
  using Tr = Traits<F>;
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
  const int64_t total = int64_t{n} * rowBytes;  // bytes of W
  const int64_t spans = (int64_t{k} + Tr::kSpan - 1) / Tr::kSpan;
  const int64_t stride = int64_t{split} * kWarps;
  const int64_t first = int64_t{rank} * kWarps + warp;  // this warp's first span
  uint8_t* const buf = stage + warp * (kStages * kRows * Tr::kStride);

  // Copies span u of the CTA's 16 rows into stage st: row r's bytes [r * rowBytes + u *
  // kSpanBytes, + len) by the 16-byte segments holding them (rows >= n: zeros).
  auto issue = [&](int64_t u, int st) {
    uint8_t* dst = buf + st * (kRows * Tr::kStride);
    for (int i = lane; i < kRows * Tr::kSegs; i += 32) {
      const int r = i / Tr::kSegs, s = i - r * Tr::kSegs;
      const int64_t row = row0 + r;
      const int64_t at = row * rowBytes + u * Tr::kSpanBytes;  // first byte of the row's span
      const int64_t len = min64(Tr::kSpanBytes, rowBytes - u * Tr::kSpanBytes);
      const int64_t seg = (at & ~int64_t{15}) + 16 * s;
      if (seg >= at + len) continue;  // past the row's span: never read
      const int64_t avail = row < n ? min64(16, total - seg) : 0;
      copy16(dst + r * Tr::kStride + 16 * s, avail > 0 ? w + seg : w,
             static_cast<int>(avail > 0 ? avail : 0));
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    const int64_t u = first + s * stride;
    if (u < spans) issue(u, s);
    copyCommit();
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
      src[h].scales = ok ? static_cast<const __half*>(scales) + wr[h] * scaleRowElems : nullptr;
      src[h].zeros = ok ? zeros + wr[h] * zeroRowBytes : nullptr;
    } else if constexpr (F == QuantFormat::kFp8E4M3) {
      src[h].scales = ok ? static_cast<const float*>(scales) + wr[h] * scaleRowElems : nullptr;
      src[h].zeros = nullptr;
    } else {
      src[h].scales = nullptr;
      src[h].zeros = nullptr;
    }
  }

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = 0.0f;
  }

  int it = 0;
  for (int64_t u = first; u < spans; u += stride, ++it) {
    const int64_t next = u + (kStages - 1) * stride;
    if (next < spans) issue(next, (it + kStages - 1) % kStages);
    copyCommit();
    copyWait<kStages - 1>();  // this lane's copies of span u have landed
    __syncwarp();             // ... and every lane's
    const uint8_t* sp = buf + (it % kStages) * (kRows * Tr::kStride);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      src[h].span = sp + (h * 8 + g) * Tr::kStride +
                    ((wr[h] * rowBytes + u * Tr::kSpanBytes) & 15);  // the segment shift
    }
    const int64_t k0 = u * Tr::kSpan;
    const int blocks = static_cast<int>((min64(Tr::kSpan, k - k0) + 31) / 32);
    for (int b = 0; b < blocks; ++b) {
      const int64_t kb = k0 + 32 * b;
      // The lane's k offsets; fp8 rows may end 16 k into a block (k % 32 == 16).
      const int64_t c0 = Tr::kSplit4 ? kb + 4 * t4 : kb + 8 * t4;
      const bool kin = c0 < k;
      uint4 xv[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if constexpr (Tr::kSplit4) {
          const uint2 lo = loadX8(xp[t] + c0, kin && xok[t]);
          const uint2 hi = loadX8(xp[t] + c0 + 16, kin && xok[t]);
          xv[t] = make_uint4(lo.x, lo.y, hi.x, hi.y);
        } else {
          xv[t] = loadX16(xp[t] + c0, kin && xok[t]);
        }
      }
      Block wb[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wb[h] = decodeBlock<F, T>(src[h], b, t4, kb, group);
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
          const uint32_t one = ones2<T>();
          mma16816<T>(xs, one, one, one, one, xv[t].x, xv[t].y);
          mma16816<T>(xs, one, one, one, one, xv[t].z, xv[t].w);
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[t][i] = fmaf(wb[i >> 1].off, xs[i], acc[t][i]);
        }
      }
    }
    __syncwarp();  // every lane is done with this stage before it is copied over
  }
  copyWait<0>();

  // Accumulator (row g [+8], columns 8t + 2 t4 + {0, 1}) -> warpPart[warp][col][row].
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int col = 8 * t + 2 * t4;
    warpPart[warp][col * kRows + g] = acc[t][0];
    warpPart[warp][(col + 1) * kRows + g] = acc[t][1];
    warpPart[warp][col * kRows + g + 8] = acc[t][2];
    warpPart[warp][(col + 1) * kRows + g + 8] = acc[t][3];
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
  auto finish = [&](int e, float sum) {
    const int col = e / kRows, row = e - col * kRows;
    const int64_t j = row0 + row;
    if (col < m && j < n) {
      if (bias != nullptr) sum = __fadd_rn(sum, fwd::toF(bias[j]));
      y[int64_t{col} * n + j] = fwd::fromF<Y>(sum);
    }
  };
  if (split == 1) {
    for (int e = threadIdx.x; e < kTile; e += kThreads) finish(e, ctaSum(e));
    return;
  }
  for (int e = threadIdx.x; e < kTile; e += kThreads) ctaPart[e] = ctaSum(e);
  cluster.sync();  // every CTA's ctaPart is complete and visible to the cluster
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < kTile; e += split * kThreads) {
    finish(e, clusterSum(e));
  }
  cluster.sync();  // no CTA exits while another may still read its shared memory
}

template <QuantFormat F, typename T, typename Y, int NT>
void launchTyped(const LinearParams& p, const detail::QuantGemvConfig& cfg, cudaStream_t stream) {
  const QuantizedWeightView& q = *p.quantized;
  const int32_t split = cfg.kSplit;
  const int64_t tiles = (int64_t{p.n} + kRows - 1) / kRows;
  const int smem = detail::quantGemvSmemBytes(F);
  auto kernel = linearQuantGemvKernel<F, T, Y, NT>;
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
      zeroRowBytes(q.format, p.k, q.group)));
}

template <QuantFormat F, typename T>
void launchOut(const LinearParams& p, const detail::QuantGemvConfig& cfg, cudaStream_t stream) {
  const bool twoTiles = p.m > 8;
  if (p.outDtype == DType::kF32) {
    if (twoTiles)
      launchTyped<F, T, float, 2>(p, cfg, stream);
    else
      launchTyped<F, T, float, 1>(p, cfg, stream);
  } else {
    if (twoTiles)
      launchTyped<F, T, T, 2>(p, cfg, stream);
    else
      launchTyped<F, T, T, 1>(p, cfg, stream);
  }
}

template <QuantFormat F>
void launchFormat(const LinearParams& p, const detail::QuantGemvConfig& cfg, cudaStream_t stream) {
  if (p.dtype == DType::kBF16)
    launchOut<F, bf16>(p, cfg, stream);
  else
    launchOut<F, fp16>(p, cfg, stream);
}

}  // namespace

namespace detail {

void launchLinearQuantGemv(const LinearParams& p, QuantGemvConfig cfg, cudaStream_t stream) {
  constexpr const char* kWhere = "launchLinearQuantGemv";
  if (!validate(p)) return;
  const char* why = quantGemvRejection(p);
  ES_CHECK_ARG(why == nullptr, kWhere, "params",
               "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                   " k=" + std::to_string(p.k) + " dtype=" + std::string(dtype_name(p.dtype)),
               "not supported by the quantized gemv: ", why == nullptr ? "" : why);
  ES_CHECK_ARG(cfg.kSplit == 1 || cfg.kSplit == 2 || cfg.kSplit == 4 || cfg.kSplit == 8, kWhere,
               "kSplit", cfg.kSplit, "must be 1, 2, 4 or 8");
  switch (p.quantized->format) {
    case QuantFormat::kInt4:
      return launchFormat<QuantFormat::kInt4>(p, cfg, stream);
    case QuantFormat::kFp8E4M3:
      return launchFormat<QuantFormat::kFp8E4M3>(p, cfg, stream);
    case QuantFormat::kGgufQ8_0:
      return launchFormat<QuantFormat::kGgufQ8_0>(p, cfg, stream);
    case QuantFormat::kGgufQ4_0:
      return launchFormat<QuantFormat::kGgufQ4_0>(p, cfg, stream);
    case QuantFormat::kGgufQ4_1:
      return launchFormat<QuantFormat::kGgufQ4_1>(p, cfg, stream);
    case QuantFormat::kGgufQ4_K:
      return launchFormat<QuantFormat::kGgufQ4_K>(p, cfg, stream);
    case QuantFormat::kGgufQ5_K:
      return launchFormat<QuantFormat::kGgufQ5_K>(p, cfg, stream);
    case QuantFormat::kGgufQ6_K:
      return launchFormat<QuantFormat::kGgufQ6_K>(p, cfg, stream);
  }
}

}  // namespace detail

}  // namespace es::kernel
