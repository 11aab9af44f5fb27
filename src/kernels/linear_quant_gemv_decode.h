#pragma once
// The quantized gemv's decoders (linear_quant_gemv.cu): from a row's span of W staged in shared
// memory to the mma A-operand registers of one lane, one 32-element block at a time. One
// definition for the kernel (device code: prmt, packed f16 / bf16 arithmetic, cvt) and for plain
// g++ (the same bit operations, the packed arithmetic done per half in f32 and rounded to nearest
// even, which is what the instructions do), so the CPU tests check the decoders against the
// formats' definition (tests/kernels/test_linear_quant_decode.cpp). dequant16 (at the end) gives
// whole elements for the prefill path's dequantization (kernels/quant_dequant.cu).
//
// A lane (t4 = lane % 4) of row r gets, for block b of a span, four packed pairs of the mma's
// input dtype T (bf16 or f16): p[0], p[1] feed the first mma (the fragment's k pairs lo, hi), p[2],
// p[3] the second. The pairs hold the lane's elements e = 2j, 2j + 1 (j = 0..3) of the block at
//   k = 8 t4 + e                                   every format but Q6_K,
//   k = 4 t4 + e (e < 4),  16 + 4 t4 + (e - 4)    Q6_K (its scales cover 16 elements),
// each as the integer (or fp8 value) that the block's scale multiplies; the element's value is
//   w = s0 * v + off (first mma: e < 4) and w = s1 * v + off (second mma), each product rounded to
// f32 before the sum, as common/quant_dequant.cpp computes it.
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

#include "common/dtype.h"
#include "common/host_device.h"
#include "common/quant_dequant.h"
#include "common/quant_format.h"

namespace es::kernel::quant {

// kSpan: K elements a warp stages at once (detail::quantGemvSpan); kSpanBytes: their bytes in a
// row; kStride: a staged row's bytes in shared memory (detail::quantGemvRowStride); kSplit4: the
// Q6_K lane mapping; kAffine: w = scale * q + offset (the kernel needs x's block sums).
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
  // Formats whose rows and spans are whole 16-byte segments (k being a multiple of the span or
  // of 16 bytes): a span starts at a segment (no shift) and never needs an extra segment.
  static constexpr bool kAligned = F == QuantFormat::kInt4 || F == QuantFormat::kFp8E4M3 ||
                                   F == QuantFormat::kGgufQ4_K || F == QuantFormat::kGgufQ5_K;
  // A staged row: the span's bytes rounded up to 16, plus 16 for the shift of the unaligned
  // formats, plus 16 where that makes an even number of segments: an odd number puts the 8 rows
  // g of a warp's lanes in 8 different 4-bank groups (no bank conflicts between them).
  static constexpr int kStrideMin = (kSpanBytes + 15) / 16 * 16 + (kAligned ? 0 : 16);
  static constexpr int kStride = (kStrideMin / 16) % 2 == 1 ? kStrideMin : kStrideMin + 16;
  // The 16-byte segments a span's row may need.
  static constexpr int kSegs = (kSpanBytes + 15) / 16 + (kAligned ? 0 : 1);
  static constexpr bool kSplit4 = F == QuantFormat::kGgufQ6_K;
  static constexpr bool kAffine =
      F == QuantFormat::kGgufQ4_1 || F == QuantFormat::kGgufQ4_K || F == QuantFormat::kGgufQ5_K;
};

// ---- bit and packed-arithmetic helpers ---------------------------------------------------------

// PTX prmt (default mode): byte i of the result is byte (sel >> 4i) & 7 of {b, a} (0-3: a).
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
#else
  const uint64_t both = uint64_t{a} | (uint64_t{b} << 32);
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t src = (sel >> (4 * i)) & 7u;
    d |= static_cast<uint32_t>((both >> (8 * src)) & 0xffu) << (8 * i);
  }
  return d;
#endif
}

// 4 / 2 bytes at p, which is 4- / 2-byte aligned where the decoders use them.
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t load32(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t load16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
#endif
}
ES_HOST_DEVICE ES_FORCE_INLINE float halfToFloat(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
#else
  return to_float(fp16{static_cast<uint16_t>(bits)});
#endif
}
ES_HOST_DEVICE ES_FORCE_INLINE float halfAt(const uint8_t* p) { return halfToFloat(load16(p)); }

// a * b rounded to f32, never contracted into a fused multiply-add with a later addition.
ES_HOST_DEVICE ES_FORCE_INLINE float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// a + b / a - b rounded to f32 (see mulRn).
ES_HOST_DEVICE ES_FORCE_INLINE float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
ES_HOST_DEVICE ES_FORCE_INLINE float subRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// The magic number M of T (the bits of 1024.0 in f16, 128.0 in bf16), twice: the bits M | u are
// M + u for an integer 0 <= u < 128 (< 1024 in f16).
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t magic2() {
  return std::is_same_v<T, bf16> ? 0x43004300u : 0x64006400u;
}
// 1.0 twice in T (the all-ones A operand of the x sums).
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t ones2() {
  return std::is_same_v<T, bf16> ? 0x3f803f80u : 0x3c003c00u;
}

// The f32 value of half h (0: low, 1: high) of a packed T pair, and a pair from two f32 values
// rounded to nearest even.
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE float pairHalf(uint32_t v, int h) {
  const auto bits = static_cast<uint16_t>(h == 0 ? v & 0xffffu : v >> 16);
  return to_float(T{bits});
}
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t packPair(float lo, float hi) {
  if constexpr (std::is_same_v<T, bf16>) {
    return uint32_t{to_bf16(lo).bits} | (uint32_t{to_bf16(hi).bits} << 16);
  } else {
    return uint32_t{to_fp16(lo).bits} | (uint32_t{to_fp16(hi).bits} << 16);
  }
}

// a - b for two packed T pairs, rounded to nearest (exact for the integers used here).
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t sub2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  if constexpr (std::is_same_v<T, bf16>) {
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  } else {
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  }
  return d;
#else
  return packPair<T>(pairHalf<T>(a, 0) - pairHalf<T>(b, 0), pairHalf<T>(a, 1) - pairHalf<T>(b, 1));
#endif
}

// (x & mask) | c in one instruction.
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t andOr(uint32_t x, uint32_t mask, uint32_t c) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(x), "r"(mask), "r"(c));
  return d;
#else
  return (x & mask) | c;
#endif
}

// The packed pair M + off, M + off (off < 128; < 1024 in f16): what intPair subtracts.
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t offsetPair(uint32_t off) {
  return magic2<T>() | off | (off << 16);
}

// The packed T pair (u0 - off, u1 - off) for u0, u1 the bits of x & mask at bits 0-15 and 16-31
// (< 128; < 1024 in f16), sub = offsetPair(off), exact: (M + u) - (M + off), both terms exact.
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t intPair(uint32_t x, uint32_t mask, uint32_t sub) {
  return sub2<T>(andOr(x, mask, magic2<T>()), sub);
}

// Bytes 0 and 1 of the 16-bit value h moved to bits 0-7 and 16-23.
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t spread16(uint32_t h) {
  return (h | (h << 8)) & 0x00ff00ffu;
}

// The FP8 E4M3 pair in bytes 2h, 2h + 1 of w as a packed T pair, exact (every e4m3 value is a
// bf16 and an f16 value). f16: cvt.rn.f16x2.e4m3x2 (0x7f / 0xff give NaN). bf16: exponent and
// mantissa (7 bits) to bits 4-10 of each half, the sign to bit 15, which is a bf16 of 2^-120 times
// the e4m3 value (an e4m3 exponent e reads as the bf16 exponent e, bias 127 instead of 7; e = 0
// reads as the bf16 subnormal 0.mmm x 2^-126 = 2^-120 x 0.mmm x 2^-6), times 2^120; 0x7f / 0xff
// give 480, not NaN (checkpoints hold no NaN weights).
template <typename T>
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t fp8Pair(uint32_t w, int h) {
  if constexpr (std::is_same_v<T, fp16>) {
    const uint32_t v = h == 0 ? w : w >> 16;
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("{\n"
        "  .reg .b16 lo;\n"
        "  cvt.u16.u32 lo, %1;\n"
        "  cvt.rn.f16x2.e4m3x2 %0, lo;\n"
        "}\n"
        : "=r"(d)
        : "r"(v));
    return d;
#else
    return packPair<T>(fp8E4M3ToFloat(static_cast<uint8_t>(v & 0xffu)),
                       fp8E4M3ToFloat(static_cast<uint8_t>((v >> 8) & 0xffu)));
#endif
  } else {
    // Bytes 2h, 2h + 1 to bits 0-7 / 16-23 (magnitudes) and 8-15 / 24-31 (signs).
    const uint32_t mag = prmt(w & 0x7f7f7f7fu, 0u, h == 0 ? 0x4140u : 0x4342u) << 4;
    const uint32_t bits = andOr(prmt(w, 0u, h == 0 ? 0x1404u : 0x3424u), 0x80008000u, mag);
    constexpr uint32_t kTwoTo120 = 0x7b807b80u;  // 2^120 twice in bf16
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(bits), "r"(kTwoTo120));
    return d;
#else
    const float scale = pairHalf<T>(kTwoTo120, 0);
    return packPair<T>(pairHalf<T>(bits, 0) * scale, pairHalf<T>(bits, 1) * scale);
#endif
  }
}

// ---- staging -----------------------------------------------------------------------------------

// Where row `row` of W (rowBytes a row, n rows) keeps span u: its first byte `at` and its length
// (kSpanBytes, less for the last span of a row whose k is not a multiple of kSpan).
template <QuantFormat F>
ES_HOST_DEVICE ES_FORCE_INLINE int64_t spanAt(int64_t row, int64_t rowBytes, int64_t u) {
  return row * rowBytes + u * Traits<F>::kSpanBytes;
}
template <QuantFormat F>
ES_HOST_DEVICE ES_FORCE_INLINE int64_t spanLen(int64_t rowBytes, int64_t u) {
  const int64_t left = rowBytes - u * Traits<F>::kSpanBytes;
  return left < Traits<F>::kSpanBytes ? left : Traits<F>::kSpanBytes;
}

// Segment s (0 .. kSegs - 1) of the staged copy of a row's span: the 16 bytes of W at `src`
// (16-byte aligned: the span's first byte rounded down, plus 16 s), of which the first `bytes` are
// read and the rest zero-filled (rows >= n: none read; the last row: none past the end of W).
// bytes < 0: the segment is past the span, not copied. The span starts at byte at & 15 of the
// staged row.
struct Segment {
  int64_t src;
  int bytes;
};
template <QuantFormat F>
ES_HOST_DEVICE ES_FORCE_INLINE Segment spanSegment(int64_t row, int64_t n, int64_t rowBytes,
                                                   int64_t u, int s) {
  const int64_t at = spanAt<F>(row, rowBytes, u);
  const int64_t seg = (at & ~int64_t{15}) + 16 * s;
  if (seg >= at + spanLen<F>(rowBytes, u)) return {0, -1};
  if (row >= n) return {0, 0};
  const int64_t left = n * rowBytes - seg;
  return {seg, static_cast<int>(left < 16 ? left : 16)};
}

// ---- per-format decoding -----------------------------------------------------------------------

// One row's operands for one 32-element block (see the top).
struct Block {
  uint32_t p[4];
  float s0, s1, off;
};

// What the decoders of one row see: its staged span bytes (from the span's first byte), and for
// int4 / fp8 its rows of scales (f16 / f32) and zeros (null for a row >= n: scale 0) with the
// scale and zero point of the current group (loadGroup; the zero point as offsetPair(z)).
struct RowSrc {
  const uint8_t* span;   // [kSpanBytes] u8, the row's span (shared memory)
  const void* scales;    // [groups] f16 (int4) / f32 (fp8), the row's scales, or null
  const uint8_t* zeros;  // [groups] u8, the row's zero points (int4), or null
  float scale;           // the current group's scale
  uint32_t zeroSub;      // offsetPair(z) of the current group's zero point
};

// int4 / fp8: r.scale and r.zeroSub of group gi (the kernel calls it when a block enters a new
// group, so each scale is read once per group, not per block).
// gi: the group's index (kb / group).
template <QuantFormat F, typename T>
ES_HOST_DEVICE ES_FORCE_INLINE void loadGroup(RowSrc& r, uint32_t gi) {
  r.scale = 0.0f;
  r.zeroSub = offsetPair<T>(0);
  if (r.scales == nullptr) return;
  if constexpr (F == QuantFormat::kInt4) {
    r.scale = halfToFloat(static_cast<const uint16_t*>(r.scales)[gi]);
    r.zeroSub = offsetPair<T>(r.zeros[gi]);
  } else if constexpr (F == QuantFormat::kFp8E4M3) {
    r.scale = static_cast<const float*>(r.scales)[gi];
  }
}

// Block b of the span for the lane t4 (int4 / fp8: r's group holds the block).
template <QuantFormat F, typename T>
ES_HOST_DEVICE ES_FORCE_INLINE Block decodeBlock(const RowSrc& r, int b, int t4) {
  Block o{};
  if constexpr (F == QuantFormat::kInt4) {
    // 16 bytes a block; byte j holds k = 2j (low nibble) and 2j + 1 (high nibble).
    const uint32_t v = load32(r.span + 16 * b + 4 * t4), hv = v >> 4;
    for (int j = 0; j < 4; ++j) {
      // byte 0 = byte j of v (low nibble: k 2j), byte 2 = byte j of v >> 4 (k 2j + 1).
      const uint32_t sel =
          uint32_t(j) | (uint32_t(j) << 4) | (uint32_t(4 + j) << 8) | (uint32_t(4 + j) << 12);
      o.p[j] = intPair<T>(prmt(v, hv, sel), 0x000f000fu, r.zeroSub);
    }
    o.s0 = o.s1 = r.scale;
  } else if constexpr (F == QuantFormat::kFp8E4M3) {
    const uint32_t lo = load32(r.span + 32 * b + 8 * t4), hi = load32(r.span + 32 * b + 8 * t4 + 4);
    o.p[0] = fp8Pair<T>(lo, 0);
    o.p[1] = fp8Pair<T>(lo, 1);
    o.p[2] = fp8Pair<T>(hi, 0);
    o.p[3] = fp8Pair<T>(hi, 1);
    o.s0 = o.s1 = r.scale;
  } else if constexpr (F == QuantFormat::kGgufQ8_0) {
    // 34 bytes: d (f16), 32 x int8 q; w = d * q. Blocks are 2-byte aligned.
    const uint8_t* blk = r.span + 34 * b;
    for (int j = 0; j < 4; ++j) {
      const uint32_t h = load16(blk + 2 + 8 * t4 + 2 * j);
      if constexpr (std::is_same_v<T, fp16>) {
        // (q + 128) - 128
        o.p[j] = intPair<T>(spread16(h) ^ 0x00800080u, 0x00ff00ffu, offsetPair<T>(128));
      } else {  // q + 128 does not fit bf16's magic number: through f32 (exact)
        o.p[j] = packPair<T>(static_cast<float>(static_cast<int8_t>(h & 0xffu)),
                             static_cast<float>(static_cast<int8_t>(h >> 8)));
      }
    }
    o.s0 = o.s1 = halfAt(blk);
  } else if constexpr (F == QuantFormat::kGgufQ4_0 || F == QuantFormat::kGgufQ4_1) {
    // Q4_0: 18 bytes: d, 16 bytes of nibbles; w = (q - 8) * d. Q4_1: 20 bytes: d, m, nibbles;
    // w = q * d + m. Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
    constexpr bool kQ41 = F == QuantFormat::kGgufQ4_1;
    const uint8_t* blk = r.span + (kQ41 ? 20 : 18) * b;
    const uint8_t* qs = blk + (kQ41 ? 4 : 2) + 8 * (t4 & 1);
    const int sh = t4 >= 2 ? 4 : 0;
    for (int j = 0; j < 4; ++j) {
      o.p[j] = intPair<T>(spread16(load16(qs + 2 * j)) >> sh, 0x000f000fu,
                          offsetPair<T>(kQ41 ? 0u : 8u));
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
    for (int w = 0; w < 2; ++w) {
      const uint32_t v = load32(qs + 4 * w);
      const uint32_t qh = kQ5 ? load32(blk + 16 + 8 * t4 + 4 * w) : 0u;
      for (int h = 0; h < 2; ++h) {
        const uint32_t sel = h == 0 ? 0x4140u : 0x4342u;  // bytes 2h, 2h + 1 to bits 0, 16
        uint32_t n = (prmt(v, 0u, sel) >> sh) & 0x000f000fu;
        if constexpr (kQ5) n |= ((prmt(qh, 0u, sel) >> b) & 0x00010001u) << 4;
        o.p[2 * w + h] = intPair<T>(n, 0x001f001fu, offsetPair<T>(0));
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
    o.s0 = o.s1 = mulRn(halfAt(blk), static_cast<float>(scale));
    o.off = -mulRn(halfAt(blk + 2), static_cast<float>(min));
  } else {
    // Q6_K: 210 bytes: ql[128], qh[64], int8 scales[16], d. Block b = 32-element group kk = b % 4
    // of half hf = b / 4: element l (0..31) has its low 4 bits in ql[64 hf + 32 (kk & 1) + l]
    // (low nibble for kk < 2, high for kk >= 2) and its top 2 bits in bits 2kk, 2kk + 1 of
    // qh[32 hf + l]; w = (d * scales[8 hf + 2 kk + l / 16]) * (q - 32). The lane takes
    // l = 4 t4 + e (first mma) and 16 + 4 t4 + e (second), e = 0..3. 2-byte aligned reads.
    const int hf = b >> 2, kk = b & 3;
    const uint8_t* ql = r.span + 64 * hf + 32 * (kk & 1) + 4 * t4;
    const uint8_t* qh = r.span + 128 + 32 * hf + 4 * t4;
    const int shl = (kk >> 1) * 4, shh = 2 * kk;
    for (int j = 0; j < 4; ++j) {
      const int at = (j >> 1) * 16 + (j & 1) * 2;  // l - 4 t4 of the pair's first element
      const uint32_t lo = (spread16(load16(ql + at)) >> shl) & 0x000f000fu;
      const uint32_t hi = (spread16(load16(qh + at)) >> shh) & 0x00030003u;
      o.p[j] = intPair<T>(lo | (hi << 4), 0x003f003fu, offsetPair<T>(32));
    }
    const float d = halfAt(r.span + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(r.span + 192 + 8 * hf + 2 * kk);
    o.s0 = mulRn(d, static_cast<float>(sc[0]));
    o.s1 = mulRn(d, static_cast<float>(sc[1]));
  }
  return o;
}

// ---- whole elements (the prefill path's dequantization) ----------------------------------------

// The f32 value of an FP8 E4M3 byte (0x7f / 0xff NaN), exact: on the device the hardware
// conversion to f16 (every e4m3 value is an f16 value), then to f32.
ES_HOST_DEVICE ES_FORCE_INLINE float fp8Float(uint8_t q) {
#ifdef __CUDA_ARCH__
  uint32_t h;
  asm("{\n"
      "  .reg .b16 lo;\n"
      "  cvt.u16.u32 lo, %1;\n"
      "  cvt.rn.f16x2.e4m3x2 %0, lo;\n"
      "}\n"
      : "=r"(h)
      : "r"(uint32_t{q}));
  return halfToFloat(h & 0xffffu);
#else
  return fp8E4M3ToFloat(q);
#endif
}

// The 6-bit scale (s) and min (m) of sub-block j of a Q4_K / Q5_K super-block's 12 scale bytes.
ES_HOST_DEVICE ES_FORCE_INLINE void kScaleMin(const uint8_t* sc, int j, int& s, int& m) {
  if (j < 4) {
    s = sc[j] & 63;
    m = sc[j + 4] & 63;
  } else {
    s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
    m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// Elements [c0, c0 + 16) of row `row` of W [n, k] (rowBytes: dataRowBytes of the layout), as
// common/quant_dequant.cpp computes them: the kernels' prefill path (kernels/quant_dequant.cu).
// c0 is a multiple of 16.
ES_HOST_DEVICE inline void dequant16(const QuantizedWeightView& w, int64_t k, int64_t rowBytes,
                                     int64_t row, int64_t c0, float (&v)[16]) {
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + row * rowBytes;
  switch (w.format) {
    case QuantFormat::kInt4: {
      const int64_t groups = k / w.group, g = c0 / w.group;
      const float s = halfAt(static_cast<const uint8_t*>(w.scales) + 2 * (row * groups + g));
      const int z = static_cast<const uint8_t*>(w.zeros)[row * groups + g];
      for (int e = 0; e < 16; ++e) {
        const int64_t i = c0 + e;
        const int q = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0x0f);
        v[e] = mulRn(static_cast<float>(q - z), s);
      }
      return;
    }
    case QuantFormat::kFp8E4M3: {
      const int64_t groups = (k + w.group - 1) / w.group;
      const float s = static_cast<const float*>(w.scales)[row * groups + c0 / w.group];
      for (int e = 0; e < 16; ++e) v[e] = mulRn(fp8Float(src[c0 + e]), s);
      return;
    }
    case QuantFormat::kGgufQ8_0: {
      const uint8_t* blk = src + c0 / 32 * 34;
      const float d = halfAt(blk);
      for (int e = 0; e < 16; ++e) {
        const int j = static_cast<int>(c0 % 32) + e;
        v[e] = mulRn(d, static_cast<float>(static_cast<int8_t>(blk[2 + j])));
      }
      return;
    }
    case QuantFormat::kGgufQ4_0:
    case QuantFormat::kGgufQ4_1: {
      const bool q41 = w.format == QuantFormat::kGgufQ4_1;
      const uint8_t* blk = src + c0 / 32 * (q41 ? 20 : 18);
      const uint8_t* qs = blk + (q41 ? 4 : 2);
      const float d = halfAt(blk);
      const float m = q41 ? halfAt(blk + 2) : 0.0f;
      for (int e = 0; e < 16; ++e) {
        const int j = static_cast<int>(c0 % 32) + e;  // element j: low nibble of byte j (< 16)
        const int nib = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
        v[e] = q41 ? addRn(mulRn(static_cast<float>(nib), d), m)
                   : mulRn(static_cast<float>(nib - 8), d);
      }
      return;
    }
    case QuantFormat::kGgufQ4_K:
    case QuantFormat::kGgufQ5_K: {
      const bool q5 = w.format == QuantFormat::kGgufQ5_K;
      const uint8_t* blk = src + c0 / 256 * (q5 ? 176 : 144);
      const int l0 = static_cast<int>(c0 % 256);
      const int sub = l0 / 32, c = sub / 2;  // sub-block, 64-element chunk
      int sc, mn;
      kScaleMin(blk + 4, sub, sc, mn);
      const float d0 = mulRn(halfAt(blk), static_cast<float>(sc));
      const float min0 = mulRn(halfAt(blk + 2), static_cast<float>(mn));
      const uint8_t* qs = blk + (q5 ? 48 : 16) + 32 * c;
      for (int e = 0; e < 16; ++e) {
        const int l = l0 % 32 + e;
        int q = (sub & 1) ? (qs[l] >> 4) : (qs[l] & 0x0f);
        if (q5) q |= ((blk[16 + l] >> sub) & 1) << 4;
        v[e] = subRn(mulRn(d0, static_cast<float>(q)), min0);
      }
      return;
    }
    case QuantFormat::kGgufQ6_K: {
      const uint8_t* blk = src + c0 / 256 * 210;
      const int l0 = static_cast<int>(c0 % 256);
      const int hf = l0 / 128, kk = (l0 % 128) / 32;
      const uint8_t* ql = blk + 64 * hf + 32 * (kk & 1);
      const uint8_t* qh = blk + 128 + 32 * hf;
      const int shift = kk < 2 ? 0 : 4;
      const float d = halfAt(blk + 208);
      for (int e = 0; e < 16; ++e) {
        const int l = l0 % 32 + e;
        const int q = (((ql[l] >> shift) & 0x0f) | (((qh[l] >> (2 * kk)) & 3) << 4)) - 32;
        const float s =
            static_cast<float>(static_cast<int8_t>(blk[192 + 8 * hf + 2 * kk + l / 16]));
        v[e] = mulRn(mulRn(d, s), static_cast<float>(q));
      }
      return;
    }
  }
}

}  // namespace es::kernel::quant
