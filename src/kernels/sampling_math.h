#pragma once
// Arithmetic shared bit-for-bit by the CPU reference and both GPU sampling paths (spec §3).
//
// Why a shared header: the tests demand identical tokens from the reference and the kernels on
// the same uniforms. That holds only if every float the decision depends on is produced by the
// same IEEE operations in the same order on host and device. So:
//  * float mul/add/sub/div go through fmulRn & co.: on the device these are the _rn intrinsics,
//    which nvcc never contracts into an FMA (a plain `a * b + c` may be contracted there);
//  * exp is our own polynomial (expNonpos) built from fmaf, correctly rounded on both sides, so
//    the device's expf (2 ulp) and glibc's expf (1 ulp) never disagree;
//  * masses are exact fixed-point integers (massOf), so sums in any order agree exactly: the
//    top-k / top-p boundaries are the same whatever the reduction tree.
// Only the fp32 running sum of the inverse CDF over a *whole row* (top-k off or k > 512) is
// summed in a different order on the GPU; that is the documented CDF-boundary tolerance
// (docs/sampling.md).
#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace es::sampling {

inline constexpr float kGreedyTemperature = 1e-3f;     // T below this: greedy (top-k 1)
inline constexpr float kTopPOffAbove = 1.0f - 1e-6f;   // top-p active when p < this
inline constexpr float kMassScale = 1099511627776.0f;  // 2^40: fixed-point unit of a mass
inline constexpr int32_t kMaxVocab = (1 << 24) - 1;    // keeps V * 2^40 below 2^64
inline constexpr float kResidualMassFloor = 1e-20f;    // spec §3.7
inline constexpr float kDraftProbFloor = 1e-20f;       // q <= this: alpha = 1

#if defined(__CUDA_ARCH__)
ES_HOST_DEVICE ES_FORCE_INLINE float fmulRn(float a, float b) { return __fmul_rn(a, b); }
ES_HOST_DEVICE ES_FORCE_INLINE float faddRn(float a, float b) { return __fadd_rn(a, b); }
ES_HOST_DEVICE ES_FORCE_INLINE float fsubRn(float a, float b) { return __fsub_rn(a, b); }
ES_HOST_DEVICE ES_FORCE_INLINE float fdivRn(float a, float b) { return __fdiv_rn(a, b); }
ES_HOST_DEVICE ES_FORCE_INLINE double ddivRn(double a, double b) { return __ddiv_rn(a, b); }
ES_HOST_DEVICE ES_FORCE_INLINE double dmulRn(double a, double b) { return __dmul_rn(a, b); }
ES_HOST_DEVICE ES_FORCE_INLINE float fmaRn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
ES_HOST_DEVICE ES_FORCE_INLINE float d2fRn(double a) { return __double2float_rn(a); }
#else
// Host: x86-64 without -mfma never contracts; volatile-free plain operators are IEEE here.
inline float fmulRn(float a, float b) { return a * b; }
inline float faddRn(float a, float b) { return a + b; }
inline float fsubRn(float a, float b) { return a - b; }
inline float fdivRn(float a, float b) { return a / b; }
inline double ddivRn(double a, double b) { return a / b; }
inline double dmulRn(double a, double b) { return a * b; }
inline float fmaRn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline float d2fRn(double a) { return static_cast<float>(a); }
#endif

ES_HOST_DEVICE ES_FORCE_INLINE uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
ES_HOST_DEVICE ES_FORCE_INLINE float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// Order-preserving uint32 key of a non-NaN float (larger float -> larger key). -0 maps to +0 so
// that the two zeros tie (and then resolve to the lower index like every other tie).
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t orderKey(float f) {
  uint32_t b = f2u(f);
  if ((b & 0x7fffffffu) == 0) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
ES_HOST_DEVICE ES_FORCE_INLINE float keyValue(uint32_t key) {
  return u2f((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}
// Unique 64-bit rank of entry `index`: larger key first, then lower index first. 0 never occurs
// (it would need index 0xffffffff), so 0 is a safe padding sentinel for descending sorts.
ES_HOST_DEVICE ES_FORCE_INLINE uint64_t composite(uint32_t key, uint32_t index) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~index);
}
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t compositeKey(uint64_t c) {
  return static_cast<uint32_t>(c >> 32);
}
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t compositeIndex(uint64_t c) {
  return ~static_cast<uint32_t>(c);
}

// exp(d) for d <= 0 (d = logit - max), from fmaf only, so host and device agree bit for bit.
// Cody-Waite reduction d = j*ln2 + f, |f| <= ln2/2, degree-7 polynomial for exp(f) (coefficients
// after N. Juffa's public expf), then scaling by 2^j in two exact steps so subnormals round once.
// Max relative error vs exp() ~2e-7 (checked in test_sampling.cpp). exp(0) == 1 exactly.
ES_HOST_DEVICE inline float expNonpos(float d) {
  if (!(d > -104.0f)) return 0.0f;  // also -inf; exp(-104) < 2^-149/2
  const float j = fsubRn(fmaRn(1.442695f, d, 12582912.0f), 12582912.0f);  // rint(d/ln2)
  float f = fmaRn(j, -6.93145752e-1f, d);
  f = fmaRn(j, -1.42860677e-6f, f);
  float r = 1.37805939e-3f;
  r = fmaRn(r, f, 8.37312452e-3f);
  r = fmaRn(r, f, 4.16695364e-2f);
  r = fmaRn(r, f, 1.66664720e-1f);
  r = fmaRn(r, f, 4.99999851e-1f);
  r = fmaRn(r, f, 1.0f);
  r = fmaRn(r, f, 1.0f);
  const int32_t i = static_cast<int32_t>(j);  // in [-150, 0]
  // 2^i = 2^(i+64) * 2^-64 when i < -126 keeps both factors normal.
  if (i >= -126) return fmulRn(r, u2f(static_cast<uint32_t>(i + 127) << 23));
  const float a = fmulRn(r, u2f(static_cast<uint32_t>(i + 64 + 127) << 23));
  return fmulRn(a, u2f(static_cast<uint32_t>(-64 + 127) << 23));
}

// Fixed-point mass of an exp weight e in [0, 1]: floor(e * 2^40). Exact (power-of-two scale,
// truncating conversion); weights below 2^-40 of the row maximum count as zero.
ES_HOST_DEVICE ES_FORCE_INLINE uint64_t massOf(float e) {
  return static_cast<uint64_t>(fmulRn(e, kMassScale));
}

// Mass of a scaled logit s below the row maximum: massOf(expNonpos(s - max)), bit for bit,
// with the exp skipped where the mass is certainly 0: for d < -28, expNonpos(d) is within
// 4e-7 relative of e^d <= 6.92e-13 < 2^-40 = 9.09e-13, so floor(e * 2^40) = 0. Most entries of
// a real row are that far below the maximum, and the full-row passes evaluate it per entry.
ES_HOST_DEVICE ES_FORCE_INLINE uint64_t massBelowMax(float s, float rowMax) {
  const float d = fsubRn(s, rowMax);
  return d < -28.0f ? 0 : massOf(expNonpos(d));
}

// Scaled logit (spec §3.1): greedy rows keep the raw logit (only the order matters then).
ES_HOST_DEVICE ES_FORCE_INLINE float scaleLogit(float x, float invT, bool greedy) {
  return greedy ? x : fmulRn(x, invT);
}

// Per-row parameters after the documented sanitising (see docs/sampling.md): the host validates
// scalar parameters; per-row device arrays cannot be validated there, so out-of-range values get
// a defined meaning here instead (NaN or < 1e-3 temperature: greedy; NaN or <= 0 top-p: keep the
// top token only; top-p >= 1 - 1e-6: off).
struct RowParams {
  bool greedy;
  float invT;
  int32_t k;  // effective top-k in [1, V]; V means off
  bool topPOn;
  float topP;
};

ES_HOST_DEVICE inline RowParams makeRowParams(float temperature, int32_t topK, float topP,
                                              int32_t vocab) {
  RowParams r;
  r.greedy = !(temperature >= kGreedyTemperature);
  r.invT = r.greedy ? 1.0f : fdivRn(1.0f, temperature);
  r.k = (topK <= 0 || topK >= vocab) ? vocab : topK;
  if (r.greedy) r.k = 1;
  r.topPOn = !(topP >= kTopPOffAbove);
  r.topP = (topP > 0.0f) ? topP : 0.0f;  // NaN -> 0 -> budget clamps to one unit
  return r;
}

// Top-p budget Bp = floor(p * S) in mass units, at least 1 so the top token always survives.
ES_HOST_DEVICE inline uint64_t topPBudget(float p, uint64_t total) {
  const double b = dmulRn(static_cast<double>(p), static_cast<double>(total));
  const uint64_t v = static_cast<uint64_t>(b);
  return v == 0 ? 1 : v;
}

ES_HOST_DEVICE ES_FORCE_INLINE float probOf(uint64_t w, uint64_t total) {
  return d2fRn(ddivRn(static_cast<double>(w), static_cast<double>(total)));
}

// Probability of entry i (scaled logit s) under a full-row cut (spec §3.2-3.4): 0 for composite
// ranks below cc; in truncate mode (partial) the cut entry itself weighs `last`, every other
// kept entry its mass; over the normaliser. fullRowKernel and the split CDF's kernels both
// call this, so the probabilities the split CDF sums are fullRowKernel's bit for bit.
ES_HOST_DEVICE ES_FORCE_INLINE float fullRowProb(float s, int32_t i, uint64_t cc, bool partial,
                                                 uint64_t last, float rowMax, uint64_t norm) {
  const uint64_t c = composite(orderKey(s), static_cast<uint32_t>(i));
  if (c < cc) return 0.0f;
  return probOf((partial && c == cc) ? last : massBelowMax(s, rowMax), norm);
}

// Sample of a uniform-fallback row: the exact inverse CDF of the uniform distribution.
ES_HOST_DEVICE inline int32_t uniformRowToken(float u, int32_t vocab) {
  int64_t t = static_cast<int64_t>(dmulRn(static_cast<double>(u), static_cast<double>(vocab)));
  if (t >= vocab) t = vocab - 1;
  if (t < 0) t = 0;
  return static_cast<int32_t>(t);
}

// A scaled logit that makes the row fall back to uniform (spec §3.3): NaN or +inf. (A row whose
// every entry is -inf also falls back; callers check the maximum for that.)
ES_HOST_DEVICE ES_FORCE_INLINE bool poisonsRow(float s) { return !(s < u2f(0x7f800000u)); }

}  // namespace es::sampling
