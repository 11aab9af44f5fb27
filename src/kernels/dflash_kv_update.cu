// DFlash target KV update kernel (spec §2.1).
//
// Memory bound: per token and head it reads K and V (2·D elements) and writes them to the pool.
// One thread owns one VEC-element chunk of one (token, head) for both planes, so each thread has
// two independent 16-byte loads (K, V) plus the RoPE partner chunk and cos/sin (L1 hits: the
// partner is loaded by a neighbouring thread, cos/sin are shared by all heads of the token) in
// flight before its two 16-byte stores. A 256-thread CTA covers 256 / (Hkv·D/VEC) tokens
// (2 tokens for Hkv 8, D 128). Offsets into the pool are int64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dflash_kv_update.h"

namespace es::kernel {
namespace {

constexpr int kThreads = 256;

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

// VEC elements of 16 bits: one 16-byte vector (VEC = 8) or one element (VEC = 1, fallback for
// head/rotary dims that are not multiples of 8/16 or unaligned pointers).
template <int VEC>
struct Chunk {
  uint16_t e[VEC];
};
template <>
struct alignas(16) Chunk<8> {
  uint16_t e[8];
};

template <int VEC>
__device__ __forceinline__ Chunk<VEC> load_chunk(const void* base, int64_t element_offset) {
  return *(reinterpret_cast<const Chunk<VEC>*>(static_cast<const uint16_t*>(base) + element_offset));
}
template <int VEC>
__device__ __forceinline__ void store_chunk(void* base, int64_t element_offset, const Chunk<VEC>& c) {
  *(reinterpret_cast<Chunk<VEC>*>(static_cast<uint16_t*>(base) + element_offset)) = c;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    kv_update_kernel(const T* __restrict__ k_delta, const T* __restrict__ v_delta,
                     T* __restrict__ kv_cache, const float* __restrict__ cos_sin,
                     const int32_t* __restrict__ positions, const int32_t* __restrict__ owners,
                     const int32_t* __restrict__ page_table, int32_t num_tokens, int32_t batch,
                     int32_t hkv, int32_t head_dim, int32_t rotary_dim, int32_t num_pages,
                     int32_t max_pages, int32_t chunks_per_head, int32_t tokens_per_cta) {
  const int32_t items_per_token = hkv * chunks_per_head;
  const int32_t span = tokens_per_cta * items_per_token;
  const int32_t half = rotary_dim / 2;
  for (int32_t w = threadIdx.x; w < span; w += kThreads) {
    const int32_t local = w / items_per_token;
    const int32_t item = w - local * items_per_token;
    const int64_t token = int64_t{blockIdx.x} * tokens_per_cta + local;
    if (token >= num_tokens) return;
    const int32_t head = item / chunks_per_head;
    const int32_t d0 = (item - head * chunks_per_head) * VEC;

    const int32_t pos = __ldg(positions + token);
    const int32_t b = __ldg(owners + token);
    if (b < 0 || b >= batch || pos < 0) continue;
    const int32_t logical_page = pos / kDFlashTokensPerPage;
    if (logical_page >= max_pages) continue;
    const int32_t slot = pos - logical_page * kDFlashTokensPerPage;

    // Input loads do not depend on the page table: issue them before the table lookups.
    const int64_t src = (token * hkv + head) * head_dim + d0;
    const Chunk<VEC> v = load_chunk<VEC>(v_delta, src);
    Chunk<VEC> k = load_chunk<VEC>(k_delta, src);
    const bool rotary = d0 < rotary_dim;
    Chunk<VEC> partner{};
    float c[VEC];
    float s[VEC];
    if (rotary) {
      const bool first_half = d0 < half;
      const int32_t j = first_half ? d0 : d0 - half;
      partner = load_chunk<VEC>(k_delta, src + (first_half ? half : -half));
      const float* row = cos_sin + token * rotary_dim;
      if constexpr (VEC == 8) {
        // 32-byte aligned: rotary_dim % 16 == 0 and j % 8 == 0 on this path.
        const float4 c0 = __ldg(reinterpret_cast<const float4*>(row + j));
        const float4 c1 = __ldg(reinterpret_cast<const float4*>(row + j + 4));
        const float4 s0 = __ldg(reinterpret_cast<const float4*>(row + half + j));
        const float4 s1 = __ldg(reinterpret_cast<const float4*>(row + half + j + 4));
        c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
        s[0] = s0.x, s[1] = s0.y, s[2] = s0.z, s[3] = s0.w, s[4] = s1.x, s[5] = s1.y, s[6] = s1.z, s[7] = s1.w;
      } else {
        for (int e = 0; e < VEC; ++e) {
          c[e] = __ldg(row + j + e);
          s[e] = __ldg(row + half + j + e);
        }
      }
    }

    const int32_t* table_row = page_table + int64_t{b} * 2 * max_pages;
    const int32_t k_page = __ldg(table_row + logical_page);
    const int32_t v_page = __ldg(table_row + max_pages + logical_page);

    if (k_page >= 0 && k_page < num_pages) {
      if (rotary) {
        const float sign = d0 < half ? -1.0f : 1.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          // Explicit _rn ops: no FMA contraction, so the result matches the CPU reference's
          // x*cos ± y*sin in fp32 (two products, one add) before the one rounding to T.
          const float x = __fmul_rn(to_f32(k.e[e], T{}), c[e]);
          const float y = __fmul_rn(to_f32(partner.e[e], T{}), s[e]);
          k.e[e] = from_f32(__fadd_rn(x, sign * y), T{});
        }
      }
      const int64_t dst = ((int64_t{k_page} * kDFlashTokensPerPage + slot) * hkv + head) * head_dim + d0;
      store_chunk<VEC>(kv_cache, dst, k);
    }
    if (v_page >= num_pages && int64_t{v_page} < 2 * int64_t{num_pages}) {
      const int64_t dst = ((int64_t{v_page} * kDFlashTokensPerPage + slot) * hkv + head) * head_dim + d0;
      store_chunk<VEC>(kv_cache, dst, v);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
void launch(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  if (!validate(p)) return;
  // The 16-byte path needs whole 8-element chunks in D and in each rotary half, and aligned bases.
  const bool vec8 = p.headDim % 8 == 0 && p.rotaryDim % 16 == 0 && aligned16(p.kDelta) &&
                    aligned16(p.vDelta) && aligned16(p.kvCache) && aligned16(p.tokenAlignedCosSin);
  const int32_t vec = vec8 ? 8 : 1;
  const int32_t chunks_per_head = p.headDim / vec;
  const int32_t items_per_token = p.numKVHeads * chunks_per_head;  // validated to fit int32
  const int32_t tokens_per_cta = items_per_token >= kThreads ? 1 : kThreads / items_per_token;
  const int32_t grid = static_cast<int32_t>(
      (int64_t{p.numDeltaTokens} + tokens_per_cta - 1) / tokens_per_cta);
  if (vec8) {
    kv_update_kernel<T, 8><<<grid, kThreads, 0, stream>>>(
        p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin, p.deltaPositions,
        p.deltaTokenToSequence, p.pageTable, p.numDeltaTokens, p.batchSize, p.numKVHeads,
        p.headDim, p.rotaryDim, p.numPages, p.maxPagesPerSeq, chunks_per_head, tokens_per_cta);
  } else {
    kv_update_kernel<T, 1><<<grid, kThreads, 0, stream>>>(
        p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin, p.deltaPositions,
        p.deltaTokenToSequence, p.pageTable, p.numDeltaTokens, p.batchSize, p.numKVHeads,
        p.headDim, p.rotaryDim, p.numPages, p.maxPagesPerSeq, chunks_per_head, tokens_per_cta);
  }
  ES_CUDA_CHECK_LAUNCH();
}

template <typename T>
DFlashTargetKVCacheUpdateParams<T> make_params(const T* kDelta, const T* vDelta, T* kvCache,
                                               const float* cosSin, const int32_t* positions,
                                               const int32_t* owners, const int32_t* pageTable,
                                               int32_t T_, int32_t B, int32_t hkv, int32_t d,
                                               int32_t rot, int32_t numPages, int32_t maxPages) {
  DFlashTargetKVCacheUpdateParams<T> p;
  p.kDelta = kDelta;
  p.vDelta = vDelta;
  p.kvCache = kvCache;
  p.tokenAlignedCosSin = cosSin;
  p.deltaPositions = positions;
  p.deltaTokenToSequence = owners;
  p.pageTable = pageTable;
  p.numDeltaTokens = T_;
  p.batchSize = B;
  p.numKVHeads = hkv;
  p.headDim = d;
  p.rotaryDim = rot;
  p.numPages = numPages;
  p.maxPagesPerSeq = maxPages;
  return p;
}

}  // namespace

void launchDFlashTargetKVCacheUpdate(const DFlashKvUpdateParamsF16& p, cudaStream_t stream) {
  launch(p, stream);
}
void launchDFlashTargetKVCacheUpdate(const DFlashKvUpdateParamsBF16& p, cudaStream_t stream) {
  launch(p, stream);
}

void launchDFlashTargetKVCacheUpdate(const fp16* kDelta, const fp16* vDelta, fp16* kvCache,
                                     const float* tokenAlignedCosSin,
                                     const int32_t* deltaPositions,
                                     const int32_t* deltaTokenToSequence, const int32_t* pageTable,
                                     int32_t numDeltaTokens, int32_t batchSize, int32_t numKVHeads,
                                     int32_t headDim, int32_t rotaryDim, int32_t numPages,
                                     int32_t maxPagesPerSeq, cudaStream_t stream) {
  launch(make_params(kDelta, vDelta, kvCache, tokenAlignedCosSin, deltaPositions,
                     deltaTokenToSequence, pageTable, numDeltaTokens, batchSize, numKVHeads,
                     headDim, rotaryDim, numPages, maxPagesPerSeq),
         stream);
}

void launchDFlashTargetKVCacheUpdate(const bf16* kDelta, const bf16* vDelta, bf16* kvCache,
                                     const float* tokenAlignedCosSin,
                                     const int32_t* deltaPositions,
                                     const int32_t* deltaTokenToSequence, const int32_t* pageTable,
                                     int32_t numDeltaTokens, int32_t batchSize, int32_t numKVHeads,
                                     int32_t headDim, int32_t rotaryDim, int32_t numPages,
                                     int32_t maxPagesPerSeq, cudaStream_t stream) {
  launch(make_params(kDelta, vDelta, kvCache, tokenAlignedCosSin, deltaPositions,
                     deltaTokenToSequence, pageTable, numDeltaTokens, batchSize, numKVHeads,
                     headDim, rotaryDim, numPages, maxPagesPerSeq),
         stream);
}

}  // namespace es::kernel
