#pragma once
// Device kernels of launchDFlashTargetKVCacheUpdate (spec §2.1). CUDA-only header, included by
// the launcher (dflash_kv_update.cu) and by bench/bench_dflash_kernels_gpu.cu, which times the
// variants side by side; the launcher picks the default one.
//
// 16-byte path (`pair_kernel`, D % 8 == 0, rotaryDim % 16 == 0, 16-byte aligned bases): per
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
// Fallback (`scalar_kernel`): one element per thread-iteration, any even rotaryDim, any alignment.
//
// Arithmetic (both paths): two fp32 products and one add/sub with explicit _rn intrinsics (no FMA
// contraction) and one round-to-nearest-even to the cache type, as the CPU reference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/dflash_kv_update.h"
#include "common/kv_page.h"

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
__device__ __forceinline__ void rope_pair(uint4& lo, uint4& hi, const float4& c0, const float4& c1,
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
// Grid: blockIdx.x covers groups_per_cta * TOK consecutive tokens; thread w (and w + kThreads, ...
// when one token has more than kThreads units) owns (group = w / items, item = w % items), i.e.
// tokens first + group + i·groups_per_cta for i < TOK, so each of the TOK load waves of a CTA reads
// groups_per_cta consecutive rows.
template <typename T, int TOK, bool STREAM>
__global__ void __launch_bounds__(kThreads)
    pair_kernel(const T* __restrict__ k_delta, const T* __restrict__ v_delta,
                T* __restrict__ kv_cache, const float* __restrict__ cos_sin,
                const int32_t* __restrict__ positions, const int32_t* __restrict__ owners,
                const int32_t* __restrict__ page_table, int32_t num_tokens, int32_t batch,
                int32_t hkv, int32_t head_dim, int32_t rotary_dim, int32_t num_pages,
                int32_t max_pages, int32_t units_per_head, int32_t groups_per_cta) {
  const int32_t items = hkv * units_per_head;
  const int32_t span = groups_per_cta * items;
  const int32_t half = rotary_dim / 2;
  const int32_t pairs = rotary_dim / 16;
  for (int32_t w = threadIdx.x; w < span; w += kThreads) {
    const int32_t group = w / items;
    const int32_t item = w - group * items;
    const int32_t head = item / units_per_head;
    const int32_t unit = item - head * units_per_head;
    const bool is_pair = unit < pairs;
    const int32_t off_a = is_pair ? unit * 8 : rotary_dim + (unit - pairs) * 8;
    const int32_t off_b = off_a + half;  // pairs only
    const int64_t first = int64_t{blockIdx.x} * groups_per_cta * TOK + group;

    // Phase 1: every load that does not depend on the page table, for all TOK tokens.
    uint4 ka[TOK], kb[TOK], va[TOK], vb[TOK];
    float4 c0[TOK], c1[TOK], s0[TOK], s1[TOK];
    int32_t pos[TOK], own[TOK];
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      const int64_t token = first + int64_t{i} * groups_per_cta;
      pos[i] = -1;
      own[i] = -1;
      if (token < num_tokens) {
        pos[i] = __ldg(positions + token);
        own[i] = __ldg(owners + token);
        const int64_t src = (token * hkv + head) * head_dim;
        ka[i] = ld16<STREAM>(k_delta + src + off_a);
        va[i] = ld16<STREAM>(v_delta + src + off_a);
        if (is_pair) {
          kb[i] = ld16<STREAM>(k_delta + src + off_b);
          vb[i] = ld16<STREAM>(v_delta + src + off_b);
          // rotary_dim % 16 == 0 and off_a % 8 == 0: 32-byte aligned float4 pairs.
          const float* row = cos_sin + token * rotary_dim + off_a;
          c0[i] = __ldg(reinterpret_cast<const float4*>(row));
          c1[i] = __ldg(reinterpret_cast<const float4*>(row + 4));
          s0[i] = __ldg(reinterpret_cast<const float4*>(row + half));
          s1[i] = __ldg(reinterpret_cast<const float4*>(row + half + 4));
        }
      }
    }

    // Phase 2: skip decision and page lookups (-1 = do not write that plane).
    int32_t k_page[TOK], v_page[TOK], slot[TOK];
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      k_page[i] = -1;
      v_page[i] = -1;
      slot[i] = 0;
      const int32_t b = own[i];
      const int32_t p = pos[i];
      if (b < 0 || b >= batch || p < 0) continue;
      const int32_t logical_page = p / kPage;
      if (logical_page >= max_pages) continue;
      slot[i] = p - logical_page * kPage;
      const int32_t* table_row = page_table + int64_t{b} * 2 * max_pages;
      const int32_t kp = __ldg(table_row + logical_page);
      const int32_t vp = __ldg(table_row + max_pages + logical_page);
      if (kp >= 0 && kp < num_pages) k_page[i] = kp;
      if (vp >= num_pages && int64_t{vp} < 2 * int64_t{num_pages}) v_page[i] = vp;
    }

    // Phase 3: rotate and store.
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      if (k_page[i] >= 0) {
        if (is_pair) rope_pair<T>(ka[i], kb[i], c0[i], c1[i], s0[i], s1[i]);
        T* dst = kv_cache + ((int64_t{k_page[i]} * kPage + slot[i]) * hkv + head) * head_dim;
        st16<STREAM>(dst + off_a, ka[i]);
        if (is_pair) st16<STREAM>(dst + off_b, kb[i]);
      }
      if (v_page[i] >= 0) {
        T* dst = kv_cache + ((int64_t{v_page[i]} * kPage + slot[i]) * hkv + head) * head_dim;
        st16<STREAM>(dst + off_a, va[i]);
        if (is_pair) st16<STREAM>(dst + off_b, vb[i]);
      }
    }
  }
}

// ---- scalar fallback --------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(uint16_t bits, fp16) {
  return __half2float(__ushort_as_half(bits));
}
__device__ __forceinline__ float to_f32(uint16_t bits, bf16) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
__device__ __forceinline__ uint16_t from_f32(float v, fp16) {
  return __half_as_ushort(__float2half_rn(v));
}
__device__ __forceinline__ uint16_t from_f32(float v, bf16) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// One thread per element of one (token, head) for both planes; tokens_per_cta tokens per CTA.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    scalar_kernel(const T* __restrict__ k_delta, const T* __restrict__ v_delta,
                  T* __restrict__ kv_cache, const float* __restrict__ cos_sin,
                  const int32_t* __restrict__ positions, const int32_t* __restrict__ owners,
                  const int32_t* __restrict__ page_table, int32_t num_tokens, int32_t batch,
                  int32_t hkv, int32_t head_dim, int32_t rotary_dim, int32_t num_pages,
                  int32_t max_pages, int32_t tokens_per_cta) {
  const uint16_t* k_bits = reinterpret_cast<const uint16_t*>(k_delta);
  const uint16_t* v_bits = reinterpret_cast<const uint16_t*>(v_delta);
  uint16_t* cache_bits = reinterpret_cast<uint16_t*>(kv_cache);
  const int32_t items_per_token = hkv * head_dim;
  const int32_t span = tokens_per_cta * items_per_token;
  const int32_t half = rotary_dim / 2;
  for (int32_t w = threadIdx.x; w < span; w += kThreads) {
    const int32_t local = w / items_per_token;
    const int32_t item = w - local * items_per_token;
    const int64_t token = int64_t{blockIdx.x} * tokens_per_cta + local;
    if (token >= num_tokens) return;
    const int32_t head = item / head_dim;
    const int32_t d = item - head * head_dim;

    const int32_t pos = __ldg(positions + token);
    const int32_t b = __ldg(owners + token);
    if (b < 0 || b >= batch || pos < 0) continue;
    const int32_t logical_page = pos / kPage;
    if (logical_page >= max_pages) continue;
    const int32_t slot = pos - logical_page * kPage;

    const int64_t src = (token * hkv + head) * head_dim + d;
    const uint16_t v = __ldg(v_bits + src);
    uint16_t k = __ldg(k_bits + src);
    const int32_t* table_row = page_table + int64_t{b} * 2 * max_pages;
    const int32_t k_page = __ldg(table_row + logical_page);
    const int32_t v_page = __ldg(table_row + max_pages + logical_page);

    if (k_page >= 0 && k_page < num_pages) {
      if (d < rotary_dim) {
        const bool first_half = d < half;
        const int32_t j = first_half ? d : d - half;
        const uint16_t partner = __ldg(k_bits + src + (first_half ? half : -half));
        const float* row = cos_sin + token * rotary_dim;
        const float c = __ldg(row + j);
        const float s = __ldg(row + half + j);
        const float x = __fmul_rn(to_f32(k, T{}), c);
        const float y = __fmul_rn(to_f32(partner, T{}), s);
        k = from_f32(first_half ? __fsub_rn(x, y) : __fadd_rn(x, y), T{});
      }
      cache_bits[((int64_t{k_page} * kPage + slot) * hkv + head) * head_dim + d] = k;
    }
    if (v_page >= num_pages && int64_t{v_page} < 2 * int64_t{num_pages}) {
      cache_bits[((int64_t{v_page} * kPage + slot) * hkv + head) * head_dim + d] = v;
    }
  }
}

// ---- launch helpers -----------------------------------------------------------------------------
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether the 16-byte pair kernel applies: whole 8-element chunks in D and in each rotary half,
// and 16-byte aligned bases (cos/sin rows are then 64-byte multiples, float4 aligned).
template <typename T>
bool pair_path_applies(const DFlashTargetKVCacheUpdateParams<T>& p) {
  return p.headDim % 8 == 0 && p.rotaryDim % 16 == 0 && aligned16(p.kDelta) &&
         aligned16(p.vDelta) && aligned16(p.kvCache) && aligned16(p.tokenAlignedCosSin);
}

// Launches the pair kernel with TOK tokens per thread; p must be validated, non-empty, and
// pair_path_applies(p).
template <int TOK, bool STREAM, typename T>
void launch_pair(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  const int32_t units_per_head = p.rotaryDim / 16 + (p.headDim - p.rotaryDim) / 8;
  const int32_t items = p.numKVHeads * units_per_head;  // <= Hkv·D/8, validated to fit int32
  const int32_t groups_per_cta = items >= kThreads ? 1 : kThreads / items;
  const int64_t tokens_per_cta = int64_t{groups_per_cta} * TOK;
  const int64_t grid = (int64_t{p.numDeltaTokens} + tokens_per_cta - 1) / tokens_per_cta;
  pair_kernel<T, TOK, STREAM><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin, p.deltaPositions,
      p.deltaTokenToSequence, p.pageTable, p.numDeltaTokens, p.batchSize, p.numKVHeads, p.headDim,
      p.rotaryDim, p.numPages, p.maxPagesPerSeq, units_per_head, groups_per_cta);
}

// Launches the scalar fallback; p must be validated and non-empty.
template <typename T>
void launch_scalar(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  const int32_t items = p.numKVHeads * p.headDim;
  const int32_t tokens_per_cta = items >= kThreads ? 1 : kThreads / items;
  const int64_t grid = (int64_t{p.numDeltaTokens} + tokens_per_cta - 1) / tokens_per_cta;
  scalar_kernel<T><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
      p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin, p.deltaPositions,
      p.deltaTokenToSequence, p.pageTable, p.numDeltaTokens, p.batchSize, p.numKVHeads, p.headDim,
      p.rotaryDim, p.numPages, p.maxPagesPerSeq, tokens_per_cta);
}

}  // namespace es::kernel::kvupdate
