#pragma once
// Row and page rules shared by the paged attention kernels (paged_attention.cu's simple and
// split-KV kernels, paged_attention_prefill.cu's wgmma kernel), as paged_attention.h states them:
// which keys a packed query row sees, the keys a CTA's rows see together, when a page pair may be
// read, and the zeros of rows that lie in no sequence.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/kv_page.h"
#include "kernels/forward_ops_device.cuh"

namespace es::kernel::attn {

// One packed query row of a (sequence, KV head) block: the q/out row-head index r * Hq + h and
// the visible keys [lo, hi) before any tree bits.
struct PackedRowKeys {
  int64_t rh = -1;         // -1: the packed row is padding (past the sequence or outside q)
  int32_t r = -1;          // the query row (token) index, when rh >= 0
  int32_t lo = 0, hi = 0;  // hi <= lo: no visible key
};

// Packed row m (query i = m / group, head hk * group + m % group) of the sequence whose queries
// are [q0, q0 + qLen) with kvLen keys. A row with a negative position sees no key; keys stop at
// kvLen, at the page table's reach and at the cache capacity; causal rows see keys <= pos, a
// sliding window keeps the last `window` of them.
__device__ __forceinline__ PackedRowKeys packedRowKeys(int32_t m, int32_t q0, int32_t qLen,
                                                       int32_t kvLen, int32_t hk,
                                                       const int32_t* qPos, int32_t totalQ,
                                                       int32_t maxQ, int32_t hq, int32_t group,
                                                       int32_t maxPages, bool causal,
                                                       int32_t window) {
  PackedRowKeys k;
  const int32_t i = m / group;
  if (i >= qLen || i >= maxQ) return k;
  const int32_t r = q0 + i;
  if (r < 0 || r >= totalQ) return k;
  k.r = r;
  k.rh = int64_t{r} * hq + int64_t{hk} * group + (m - i * group);
  const int32_t pos = qPos[r];
  if (pos < 0) return k;
  int64_t lo = 0;
  int64_t hi = min(int64_t{kvLen},
                   min(int64_t{maxPages} * kv::kTokensPerPage, int64_t{kv::kMaxKvCacheCapacity}));
  if (causal) hi = min(hi, int64_t{pos} + 1);
  if (window > 0) lo = max(lo, int64_t{pos} - window + 1);
  if (hi > lo) {
    k.lo = static_cast<int32_t>(lo);
    k.hi = static_cast<int32_t>(hi);
  }
  return k;
}

// The union [lo, hi) of a CTA's non-empty row ranges rows[0, n) (each with .lo and .hi; hi <= lo
// is empty), {INT32_MAX, 0} when all are empty: the keys the CTA must load. One warp computes it
// (every lane calls, every lane gets the result); the rows are in shared memory.
struct KeyRange {
  int32_t lo, hi;
};
template <typename Row>
__device__ __forceinline__ KeyRange rowsKeyUnion(const Row* rows, int n, int lane) {
  KeyRange u{INT32_MAX, 0};
  for (int m = lane; m < n; m += 32) {
    const Row x = rows[m];
    if (x.hi > x.lo) {
      u.lo = min(u.lo, x.lo);
      u.hi = max(u.hi, x.hi);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    u.lo = min(u.lo, __shfl_xor_sync(0xffffffffu, u.lo, o));
    u.hi = max(u.hi, __shfl_xor_sync(0xffffffffu, u.hi, o));
  }
  return u;
}

// A page-table entry pair may be read when the K page lies in [0, P) and the V page in [P, 2P)
// of the pool's 2P pages; any other pair masks its keys.
__device__ __forceinline__ bool pagePairValid(int32_t kp, int32_t vp, int32_t numPages) {
  return kp >= 0 && kp < numPages && vp >= numPages && int64_t{vp} < 2 * int64_t{numPages};
}

// Zeros of the output rows before cuQ[0] and from cuQ[batch] on ([totalQ, rowElems] output),
// written by one CTA (each sequence's CTAs write only their own rows).
template <typename T>
__device__ void zeroRowsOutsideSequences(T* out, const int32_t* cuQ, int32_t batch, int32_t totalQ,
                                         int64_t rowElems) {
  const int64_t first = min(max(cuQ[0], 0), totalQ);
  const int64_t last = min(max(cuQ[batch], 0), totalQ);
  const T zero = fwd::fromF<T>(0.0f);
  for (int64_t e = threadIdx.x; e < first * rowElems; e += blockDim.x) out[e] = zero;
  for (int64_t e = last * rowElems + threadIdx.x; e < int64_t{totalQ} * rowElems; e += blockDim.x) {
    out[e] = zero;
  }
}

// Raises Kernel's dynamic shared-memory limit to `bytes` on the current device, once per device
// (bit d: device d, the first 64; later devices every call).
template <auto Kernel>
void raiseDynamicSmemOnce(int bytes) {
  static std::atomic<uint64_t> raised{0};
  int device = 0;
  ES_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (raised.load(std::memory_order_acquire) & bit) == 0) {
    ES_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    raised.fetch_or(bit, std::memory_order_release);
  }
}

}  // namespace es::kernel::attn
