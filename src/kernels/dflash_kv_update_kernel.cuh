#pragma once
// Device kernels of launchDFlashTargetKVCacheUpdate (spec §2.1). CUDA-only header, included by
// the launcher (dflash_kv_update.cu) and by bench/bench_dflash_kernels_gpu.cu, which times the
// variants side by side; the launcher picks the default one.
//
// 16-byte path (`pairKernel`, D % 8 == 0, rotaryDim % 16 == 0, 16-byte aligned bases): per
// (token, head) the row is cut into "units": rotaryDim/16 rotary *pairs* (chunk j of the first
// rotary half and chunk j of the second half, 8 elements each) and (D - rotaryDim)/8 pass-through
// chunks. One thread owns one unit of one head for TOK tokens and both planes, so every K and V
// element is loaded exactly once (16-byte loads), both rotated halves come out of registers, and
// a pair thread has 4 independent 16-byte data loads (+ 4 cos/sin float4, shared by all heads of
// the token, L1 hits) in flight per token before any store. Data loads do not depend on the
// position/owner/page-table chain, so they are issued first, for all TOK tokens; the skip decision
// and the page lookups happen while they are in flight. A padding row therefore still reads its
// K/V/cos/sin (always in bounds: they are [T, ...]) but writes nothing.
//
// Fallback (`scalarKernel`): one element per thread-iteration, any even rotaryDim, any alignment.
//
// Arithmetic (both paths): two fp32 products and one add/sub with explicit _rn intrinsics (no FMA
// contraction) and one round-to-nearest-even to the cache type, as the CPU reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/kv_page.h"
#include "kernels/dflash_kv_update.h"

namespace es::kernel::kvupdate {

constexpr int kThreads = 256;
constexpr int32_t kPage = es::kv::kTokensPerPage;

// ---- 16-byte memory helpers -------------------------------------------------------------------
// STREAM: K/V are touched once: loads bypass L1 allocation, stores are evict-first.
template <bool STREAM>
__device__ __forceinline__ uint4 ld16(const void* p) {
  uint4 r;
  if constexpr (STREAM) {
    // Not volatile and no memory clobber: the compiler may hoist it above the cache stores (the
    // inputs never alias the pool; the pointers are __restrict__).
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
  } else {
    r = __ldg(reinterpret_cast<const uint4*>(p));
  }
  return r;
}
template <bool STREAM>
__device__ __forceinline__ void st16(void* p, const uint4& v) {
  if constexpr (STREAM) {
    __stcs(reinterpret_cast<uint4*>(p), v);
  } else {
    *reinterpret_cast<uint4*>(p) = v;
  }
}

// ---- two 16-bit elements <-> float2 (exact up-conversion, RN down-conversion) ------------------
__device__ __forceinline__ float2 unpack2(uint32_t w, fp16) {
  __half2 h;
  __builtin_memcpy(&h, &w, 4);
  return __half22float2(h);
}
__device__ __forceinline__ float2 unpack2(uint32_t w, bf16) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ uint32_t pack2(float2 f, fp16) {
  const __half2 h = __float22half2_rn(f);
  uint32_t w;
  __builtin_memcpy(&w, &h, 4);
  return w;
}
__device__ __forceinline__ uint32_t pack2(float2 f, bf16) {
  const __nv_bfloat162 h = __float22bfloat162_rn(f);
  uint32_t w;
  __builtin_memcpy(&w, &h, 4);
  return w;
}

// NeoX rotation of one pair of 8-element chunks: lo = k[j..j+7], hi = k[h+j..h+j+7],
// c = cos[j..j+7], s = sin[j..j+7]:  lo' = lo·c − hi·s,  hi' = hi·c + lo·s.
template <typename T>
__device__ __forceinline__ void ropePair(uint4& lo, uint4& hi, const float4& c0, const float4& c1,
                                         const float4& s0, const float4& s1) {
  const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  uint32_t a[4] = {lo.x, lo.y, lo.z, lo.w};
  uint32_t b[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 x = unpack2(a[w], T{});
    const float2 y = unpack2(b[w], T{});
    const float cx = c[2 * w], cy = c[2 * w + 1], sx = s[2 * w], sy = s[2 * w + 1];
    const float2 xo = make_float2(__fsub_rn(__fmul_rn(x.x, cx), __fmul_rn(y.x, sx)),
                                  __fsub_rn(__fmul_rn(x.y, cy), __fmul_rn(y.y, sy)));
    const float2 yo = make_float2(__fadd_rn(__fmul_rn(y.x, cx), __fmul_rn(x.x, sx)),
                                  __fadd_rn(__fmul_rn(y.y, cy), __fmul_rn(x.y, sy)));
    a[w] = pack2(xo, T{});
    b[w] = pack2(yo, T{});
  }
  lo = make_uint4(a[0], a[1], a[2], a[3]);
  hi = make_uint4(b[0], b[1], b[2], b[3]);
}

// ---- 16-byte pair kernel ----------------------------------------------------------------------
// Grid: blockIdx.x covers groupsPerCta * TOK consecutive tokens; thread w (and w + kThreads, ...
// when one token has more than kThreads units) owns (group = w / items, item = w % items), i.e.
// tokens first + group + i·groupsPerCta for i < TOK, so each of the TOK load waves of a CTA reads
// groupsPerCta consecutive rows.
template <typename T, int TOK, bool STREAM>
__global__ void __launch_bounds__(kThreads)
    pairKernel(const T* __restrict__ kDelta, const T* __restrict__ vDelta, T* __restrict__ kvCache,
               const float* __restrict__ cosSin, const int32_t* __restrict__ positions,
               const int32_t* __restrict__ owners, const int32_t* __restrict__ pageTable,
               int32_t numTokens, int32_t batch, int32_t hkv, int32_t headDim, int32_t rotaryDim,
               int32_t numPages, int32_t maxPages, int32_t unitsPerHead, int32_t groupsPerCta) {
  const int32_t items = hkv * unitsPerHead;
  const int32_t span = groupsPerCta * items;
  const int32_t half = rotaryDim / 2;
  const int32_t pairs = rotaryDim / 16;
  for (int32_t w = threadIdx.x; w < span; w += kThreads) {
    const int32_t group = w / items;
    const int32_t item = w - group * items;
    const int32_t head = item / unitsPerHead;
    const int32_t unit = item - head * unitsPerHead;
    const bool isPair = unit < pairs;
    const int32_t offA = isPair ? unit * 8 : rotaryDim + (unit - pairs) * 8;
    const int32_t offB = offA + half;  // pairs only
    const int64_t first = int64_t{blockIdx.x} * groupsPerCta * TOK + group;

    // Phase 1: every load that does not depend on the page table, for all TOK tokens.
    uint4 ka[TOK], kb[TOK], va[TOK], vb[TOK];
    float4 c0[TOK], c1[TOK], s0[TOK], s1[TOK];
    int32_t pos[TOK], own[TOK];
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      const int64_t token = first + int64_t{i} * groupsPerCta;
      pos[i] = -1;
      own[i] = -1;
      if (token < numTokens) {
        pos[i] = __ldg(positions + token);
        own[i] = __ldg(owners + token);
        const int64_t src = (token * hkv + head) * headDim;
        ka[i] = ld16<STREAM>(kDelta + src + offA);
        va[i] = ld16<STREAM>(vDelta + src + offA);
        if (isPair) {
          kb[i] = ld16<STREAM>(kDelta + src + offB);
          vb[i] = ld16<STREAM>(vDelta + src + offB);
          // rotaryDim % 16 == 0 and offA % 8 == 0: 32-byte aligned float4 pairs.
          const float* row = cosSin + token * rotaryDim + offA;
          c0[i] = __ldg(reinterpret_cast<const float4*>(row));
          c1[i] = __ldg(reinterpret_cast<const float4*>(row + 4));
          s0[i] = __ldg(reinterpret_cast<const float4*>(row + half));
          s1[i] = __ldg(reinterpret_cast<const float4*>(row + half + 4));
        }
      }
    }

    // Phase 2: skip decision and page lookups (-1 = do not write that plane).
    int32_t kPageId[TOK], vPageId[TOK], slot[TOK];
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      kPageId[i] = -1;
      vPageId[i] = -1;
      slot[i] = 0;
      const int32_t b = own[i];
      const int32_t p = pos[i];
      if (b < 0 || b >= batch || p < 0) continue;
      const int32_t logicalPage = p / kPage;
      if (logicalPage >= maxPages) continue;
      slot[i] = p - logicalPage * kPage;
      const int32_t* tableRow = pageTable + int64_t{b} * 2 * maxPages;
      const int32_t kp = __ldg(tableRow + logicalPage);
      const int32_t vp = __ldg(tableRow + maxPages + logicalPage);
      if (kp >= 0 && kp < numPages) kPageId[i] = kp;
      if (vp >= numPages && int64_t{vp} < 2 * int64_t{numPages}) vPageId[i] = vp;
    }

    // Phase 3: rotate and store.
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      if (kPageId[i] >= 0) {
        if (isPair) ropePair<T>(ka[i], kb[i], c0[i], c1[i], s0[i], s1[i]);
        T* dst = kvCache + ((int64_t{kPageId[i]} * kPage + slot[i]) * hkv + head) * headDim;
        st16<STREAM>(dst + offA, ka[i]);
        if (isPair) st16<STREAM>(dst + offB, kb[i]);
      }
      if (vPageId[i] >= 0) {
        T* dst = kvCache + ((int64_t{vPageId[i]} * kPage + slot[i]) * hkv + head) * headDim;
        st16<STREAM>(dst + offA, va[i]);
        if (isPair) st16<STREAM>(dst + offB, vb[i]);
      }
    }
  }
}

// ---- scalar fallback --------------------------------------------------------------------------
__device__ __forceinline__ float toF32(uint16_t bits, fp16) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ float toF32(uint16_t bits, bf16) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
__device__ __forceinline__ uint16_t fromF32(float v, fp16) {
  return __half_as_ushort(__float2half_rn(v));
}
__device__ __forceinline__ uint16_t fromF32(float v, bf16) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// One thread per element of one (token, head) for both planes; tokensPerCta tokens per CTA.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    scalarKernel(const T* __restrict__ kDelta, const T* __restrict__ vDelta,
                 T* __restrict__ kvCache, const float* __restrict__ cosSin,
                 const int32_t* __restrict__ positions, const int32_t* __restrict__ owners,
                 const int32_t* __restrict__ pageTable, int32_t numTokens, int32_t batch,
                 int32_t hkv, int32_t headDim, int32_t rotaryDim, int32_t numPages,
                 int32_t maxPages, int32_t tokensPerCta) {
  const uint16_t* kBits = reinterpret_cast<const uint16_t*>(kDelta);
  const uint16_t* vBits = reinterpret_cast<const uint16_t*>(vDelta);
  uint16_t* cacheBits = reinterpret_cast<uint16_t*>(kvCache);
  const int32_t itemsPerToken = hkv * headDim;
  const int32_t span = tokensPerCta * itemsPerToken;
  const int32_t half = rotaryDim / 2;
  for (int32_t w = threadIdx.x; w < span; w += kThreads) {
    const int32_t local = w / itemsPerToken;
    const int32_t item = w - local * itemsPerToken;
    const int64_t token = int64_t{blockIdx.x} * tokensPerCta + local;
    if (token >= numTokens) return;
    const int32_t head = item / headDim;
    const int32_t d = item - head * headDim;

    const int32_t pos = __ldg(positions + token);
    const int32_t b = __ldg(owners + token);
    if (b < 0 || b >= batch || pos < 0) continue;
    const int32_t logicalPage = pos / kPage;
    if (logicalPage >= maxPages) continue;
    const int32_t slot = pos - logicalPage * kPage;

    const int64_t src = (token * hkv + head) * headDim + d;
    const uint16_t v = __ldg(vBits + src);
    uint16_t k = __ldg(kBits + src);
    const int32_t* tableRow = pageTable + int64_t{b} * 2 * maxPages;
    const int32_t kPageId = __ldg(tableRow + logicalPage);
    const int32_t vPageId = __ldg(tableRow + maxPages + logicalPage);

    if (kPageId >= 0 && kPageId < numPages) {
      if (d < rotaryDim) {
        const bool firstHalf = d < half;
        const int32_t j = firstHalf ? d : d - half;
        const uint16_t partner = __ldg(kBits + src + (firstHalf ? half : -half));
        const float* row = cosSin + token * rotaryDim;
        const float c = __ldg(row + j);
        const float s = __ldg(row + half + j);
        const float x = __fmul_rn(toF32(k, T{}), c);
        const float y = __fmul_rn(toF32(partner, T{}), s);
        k = fromF32(firstHalf ? __fsub_rn(x, y) : __fadd_rn(x, y), T{});
      }
      cacheBits[((int64_t{kPageId} * kPage + slot) * hkv + head) * headDim + d] = k;
    }
    if (vPageId >= numPages && int64_t{vPageId} < 2 * int64_t{numPages}) {
      cacheBits[((int64_t{vPageId} * kPage + slot) * hkv + head) * headDim + d] = v;
    }
  }
}

// ---- launch helpers -----------------------------------------------------------------------------
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether the 16-byte pair kernel applies: whole 8-element chunks in D and in each rotary half,
// and 16-byte aligned bases (cos/sin rows are then 64-byte multiples, float4 aligned).
template <typename T>
bool pairPathApplies(const DFlashTargetKVCacheUpdateParams<T>& p) {
  return p.headDim % 8 == 0 && p.rotaryDim % 16 == 0 && aligned16(p.kDelta) &&
         aligned16(p.vDelta) && aligned16(p.kvCache) && aligned16(p.tokenAlignedCosSin);
}

// Launches the pair kernel with TOK tokens per thread; p must be validated, non-empty, and
// pairPathApplies(p).
template <int TOK, bool STREAM, typename T>
void launchPair(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  const int32_t unitsPerHead = p.rotaryDim / 16 + (p.headDim - p.rotaryDim) / 8;
  const int32_t items = p.numKVHeads * unitsPerHead;  // <= Hkv·D/8, validated to fit int32
  const int32_t groupsPerCta = items >= kThreads ? 1 : kThreads / items;
  const int64_t tokensPerCta = int64_t{groupsPerCta} * TOK;
  const int64_t grid = (int64_t{p.numDeltaTokens} + tokensPerCta - 1) / tokensPerCta;
  pairKernel<T, TOK, STREAM><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin, p.deltaPositions, p.deltaTokenToSequence,
      p.pageTable, p.numDeltaTokens, p.batchSize, p.numKVHeads, p.headDim, p.rotaryDim, p.numPages,
      p.maxPagesPerSeq, unitsPerHead, groupsPerCta);
}

// Launches the scalar fallback; p must be validated and non-empty.
template <typename T>
void launchScalar(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  const int32_t items = p.numKVHeads * p.headDim;
  const int32_t tokensPerCta = items >= kThreads ? 1 : kThreads / items;
  const int64_t grid = (int64_t{p.numDeltaTokens} + tokensPerCta - 1) / tokensPerCta;
  scalarKernel<T><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin, p.deltaPositions, p.deltaTokenToSequence,
      p.pageTable, p.numDeltaTokens, p.batchSize, p.numKVHeads, p.headDim, p.rotaryDim, p.numPages,
      p.maxPagesPerSeq, tokensPerCta);
}

}  // namespace es::kernel::kvupdate
