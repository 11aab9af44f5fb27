#pragma once
// Device building blocks of the sampling kernels (CUDA only: include from .cu files).
// Every function here is called by all kSamplingThreads threads of a CTA (block-uniform control
// flow) unless it says "warp 0"; those that use shared scratch end with a __syncthreads so the
// caller can reuse it.
#include <cstdint>

#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es::sampling::dev {

inline constexpr int kWarps = kThreads / 32;
inline constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }

__device__ __forceinline__ int pow2_ceil(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Scratch for the block-wide reductions and scans: one 8-byte slot per warp plus a broadcast.
struct BlockScratch {
  uint64_t slot[kWarps];
  uint64_t out[2];
};

__device__ __forceinline__ uint64_t umax64(uint64_t a, uint64_t b) { return a > b ? a : b; }

template <typename T>
__device__ __forceinline__ T shfl_xor(T v, int o) { return __shfl_xor_sync(kFull, v, o); }

__device__ __forceinline__ uint64_t block_max_u64(uint64_t v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v = umax64(v, shfl_xor(v, o));
  if (lane_id() == 0) sh.slot[warp_id()] = v;
  __syncthreads();
  uint64_t r = sh.slot[0];
  for (int w = 1; w < kWarps; ++w) r = umax64(r, sh.slot[w]);
  __syncthreads();
  return r;
}
__device__ __forceinline__ uint64_t block_sum_u64(uint64_t v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v += shfl_xor(v, o);
  if (lane_id() == 0) sh.slot[warp_id()] = v;
  __syncthreads();
  uint64_t r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh.slot[w];
  __syncthreads();
  return r;
}
__device__ __forceinline__ int block_min_int(int v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v = min(v, shfl_xor(v, o));
  if (lane_id() == 0) sh.slot[warp_id()] = static_cast<uint64_t>(static_cast<uint32_t>(v));
  __syncthreads();
  int r = static_cast<int>(static_cast<uint32_t>(sh.slot[0]));
  for (int w = 1; w < kWarps; ++w) r = min(r, static_cast<int>(static_cast<uint32_t>(sh.slot[w])));
  __syncthreads();
  return r;
}
__device__ __forceinline__ int block_max_int(int v, BlockScratch& sh) { return -block_min_int(-v, sh); }

// Exclusive scan of unsigned 64-bit values in thread order (exact: integer). Returns the
// exclusive prefix; *total gets the block sum.
__device__ __forceinline__ uint64_t block_exclusive_scan_u64(uint64_t v, BlockScratch& sh,
                                                             uint64_t* total) {
  uint64_t x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t y = __shfl_up_sync(kFull, x, o);
    if (lane_id() >= o) x += y;
  }
  if (lane_id() == 31) sh.slot[warp_id()] = x;
  __syncthreads();
  uint64_t offset = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp_id()) offset += sh.slot[w];
    sum += sh.slot[w];
  }
  __syncthreads();
  *total = sum;
  return offset + x - v;
}

// The canonical fp32 block scan of the full-row inverse CDF. Both GPU paths call exactly this
// (same block size, same association), so they agree bit for bit; it differs from the
// reference's sequential sum only by rounding (the documented CDF-boundary tolerance).
// Returns the exclusive prefix of `v`; *total = ((w0 + w1) + w2) + ... over warp totals.
__device__ __forceinline__ float block_exclusive_scan_f32(float v, BlockScratch& sh,
                                                          float* total) {
  float x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(kFull, x, o);
    if (lane_id() >= o) x = fadd_rn(y, x);
  }
  float excl_in_warp = __shfl_up_sync(kFull, x, 1);
  if (lane_id() == 0) excl_in_warp = 0.0f;
  float* slots = reinterpret_cast<float*>(sh.slot);
  if (lane_id() == 31) slots[warp_id()] = x;
  __syncthreads();
  float offset = 0.0f, sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp_id()) offset = fadd_rn(offset, slots[w]);
    sum = fadd_rn(sum, slots[w]);
  }
  __syncthreads();
  *total = sum;
  return fadd_rn(offset, excl_in_warp);
}

// Bitonic sort of n (power of two) 64-bit keys in shared memory.
__device__ inline void bitonic_sort(uint64_t* s, int n, bool descending) {
  __syncthreads();
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const uint64_t a = s[i], b = s[ixj];
          const bool ascending = ((i & k) == 0) != descending;
          if (ascending ? (a > b) : (a < b)) {
            s[i] = b;
            s[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

struct SelectShared {
  uint32_t hist[256];
  uint32_t bin;
  uint32_t gt;
  int count;
  int pad;
};

// Top-k candidates of n entries (spec §3.8): MSB radix select on the 32-bit order key, 8-bit
// digits, warp-aggregated histograms, early stop once <= 128 candidates remain; then the
// candidates (<= 512) are bitonic-sorted by composite rank (key desc, index asc).
// comp_at(i) gives the composite rank of entry i; among entries with equal keys, array order
// must be index order (true for a row, and for concatenated per-chunk sorted lists).
// 1 <= k <= kMaxCandidateTopK. Result: cand[0, m) sorted descending, m >= k (the first k are
// the top-k), cand[m, pow2(m)) = 0. Returns m.
template <typename CompAt>
__device__ int select_top_candidates(CompAt comp_at, int n, int k, uint64_t* cand,
                                     SelectShared& sh, BlockScratch& scratch) {
  if (n <= kMaxCandidateTopK) {
    const int np = pow2_ceil(n);
    for (int i = threadIdx.x; i < np; i += kThreads) cand[i] = i < n ? comp_at(i) : 0;
    bitonic_sort(cand, np, true);
    return n;
  }
  uint32_t prefix = 0;
  int above = 0, level = 0;
  uint32_t bin_count = static_cast<uint32_t>(n);
  for (int d = 0; d < 4; ++d) {
    const int shift = 24 - 8 * d;
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + threadIdx.x;
      bool valid = false;
      uint32_t digit = 0x100u;
      if (i < n) {
        const uint32_t key = composite_key(comp_at(i));
        valid = (d == 0) || ((key >> (shift + 8)) == prefix);
        if (valid) digit = (key >> shift) & 0xffu;
      }
      const unsigned peers = __match_any_sync(kFull, digit);
      if (valid && (__ffs(peers) - 1) == lane_id()) atomicAdd(&sh.hist[digit], static_cast<uint32_t>(__popc(peers)));
    }
    __syncthreads();
    if (warp_id() == 0) {
      // Lane l owns bins 255-8l .. 248-8l (descending). Find the bin holding rank `need`.
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = sh.hist[255 - 8 * lane_id() - j];
        sum += c[j];
      }
      uint32_t incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(kFull, incl, o);
        if (lane_id() >= o) incl += y;
      }
      uint32_t run = incl - sum;
      const uint32_t need = static_cast<uint32_t>(k - above);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (run < need && need <= run + c[j]) {
          sh.bin = 255 - 8 * lane_id() - j;
          sh.gt = run;
        }
        run += c[j];
      }
    }
    __syncthreads();
    above += static_cast<int>(sh.gt);
    prefix = (prefix << 8) | sh.bin;
    bin_count = sh.hist[sh.bin];
    level = d + 1;
    __syncthreads();  // everyone has read hist/bin before the next pass clears them
    if (above + static_cast<int>(bin_count) <= kEarlyStopCandidates) break;
  }
  const int shift = 32 - 8 * level;
  const bool take_all = above + static_cast<int>(bin_count) <= kMaxCandidateTopK;
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  if (take_all) {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint64_t c = comp_at(i);
      const uint32_t key = composite_key(c);
      const uint32_t top = shift == 0 ? key : (key >> shift);
      if (top >= prefix) cand[atomicAdd(&sh.count, 1)] = c;
    }
  } else {
    // level == 4: prefix is the exact k-th key and too many entries tie on it. Take all larger
    // keys and the first (k - above) ties in array (= index) order.
    const int need_ties = k - above;
    int carry = 0;
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + threadIdx.x;
      uint64_t c = 0;
      uint32_t key = 0;
      if (i < n) {
        c = comp_at(i);
        key = composite_key(c);
      }
      const bool tie = i < n && key == prefix;
      uint64_t tile_ties = 0;
      const int rank = carry + static_cast<int>(block_exclusive_scan_u64(tie ? 1 : 0, scratch, &tile_ties));
      if (i < n && (key > prefix || (tie && rank < need_ties))) cand[atomicAdd(&sh.count, 1)] = c;
      carry += static_cast<int>(tile_ties);
    }
  }
  __syncthreads();
  const int m = sh.count;
  const int np = pow2_ceil(m);
  for (int i = m + threadIdx.x; i < np; i += kThreads) cand[i] = 0;
  bitonic_sort(cand, np, true);
  return m;
}

struct FinalizeResult {
  int cut;  // entries [0, cut) of the sorted order survive
};

// Weights and probabilities of the first `kept` entries of a descending-sorted composite list
// (the top-k set): exact fixed-point prefix masses, top-p cut, renormalisation (spec §3.3-3.4).
// mass: scratch [>= kept] u64; prob: out [>= cut] f32 by sorted position.
__device__ inline int finalize_sorted(const uint64_t* sorted, int kept, const RowParams& rp,
                                      TopPMode mode, uint64_t* mass, float* prob,
                                      BlockScratch& scratch) {
  const float row_max = key_value(composite_key(sorted[0]));
  const int per = (kept + kThreads - 1) / kThreads;
  const int begin = min(kept, static_cast<int>(threadIdx.x) * per);
  const int end = min(kept, begin + per);
  uint64_t local = 0;
  for (int j = begin; j < end; ++j) {
    const float d = fsub_rn(key_value(composite_key(sorted[j])), row_max);
    local += mass_of(exp_nonpos(d));
    mass[j] = local;  // partial, completed below
  }
  uint64_t total = 0;
  const uint64_t offset = block_exclusive_scan_u64(local, scratch, &total);
  for (int j = begin; j < end; ++j) mass[j] += offset;  // inclusive prefix mass
  __syncthreads();
  int cut = kept;
  uint64_t norm = total, last = 0;
  bool partial_last = false;
  if (rp.top_p_on) {
    const uint64_t budget = top_p_budget(rp.top_p, total);
    uint64_t below = 0;
    for (int j = threadIdx.x; j < kept; j += kThreads) below += mass[j] < budget ? 1 : 0;
    cut = static_cast<int>(block_sum_u64(below, scratch)) + 1;
    if (mode == TopPMode::kNucleus) {
      norm = mass[cut - 1];
    } else {
      norm = budget;
      last = budget - (cut >= 2 ? mass[cut - 2] : 0);
      partial_last = true;
    }
  }
  for (int j = threadIdx.x; j < cut; j += kThreads) {
    uint64_t w = mass[j] - (j > 0 ? mass[j - 1] : 0);
    if (partial_last && j == cut - 1) w = last;
    prob[j] = prob_of(w, norm);
  }
  __syncthreads();
  return cut;
}

// Inverse CDF of spec §3.5 over a short list sorted by index (warp 0 only; other warps return
// -1). The running sum is the same sequential fp32 sum as the reference: exact agreement.
__device__ inline int sample_sorted_list_warp(const int32_t* idx, const float* val, int m, float u) {
  float total = 0.0f;
  for (int base = 0; base < m; base += 32) {
    const float v = base + lane_id() < m ? val[base + lane_id()] : 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float x = __shfl_sync(kFull, v, j);
      if (x > 0.0f) total = fadd_rn(total, x);
    }
  }
  const float threshold = fmul_rn(u, total);
  float running = 0.0f;
  int found = -1, last = -1;
  for (int base = 0; base < m; base += 32) {
    const float v = base + lane_id() < m ? val[base + lane_id()] : 0.0f;
    const int ix = base + lane_id() < m ? idx[base + lane_id()] : -1;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float x = __shfl_sync(kFull, v, j);
      const int xi = __shfl_sync(kFull, ix, j);
      if (x > 0.0f) {
        running = fadd_rn(running, x);
        last = xi;
        if (found < 0 && running > threshold) found = xi;
      }
    }
  }
  return found >= 0 ? found : last;
}

// Canonical full-row inverse CDF, pass 1: the fp32 total of the positive values.
template <typename ValAt>
__device__ float full_row_total(ValAt val_at, int n, BlockScratch& scratch) {
  float carry = 0.0f;
  for (int base = 0; base < n; base += kTile) {
    const int start = base + threadIdx.x * kItems;
    float local = 0.0f;
#pragma unroll
    for (int r = 0; r < kItems; ++r) {
      const float v = start + r < n ? val_at(start + r) : 0.0f;
      if (v > 0.0f) local = fadd_rn(local, v);
    }
    float tile_total;
    block_exclusive_scan_f32(local, scratch, &tile_total);
    carry = fadd_rn(carry, tile_total);
  }
  return carry;
}

// Pass 2: first index whose running sum is > threshold (skipping values <= 0), else the last
// positive index, else -1.
template <typename ValAt>
__device__ int full_row_search(ValAt val_at, int n, float threshold, BlockScratch& scratch) {
  float carry = 0.0f;
  int last = -1;
  for (int base = 0; base < n; base += kTile) {
    const int start = base + threadIdx.x * kItems;
    float v[kItems];
    float local = 0.0f;
#pragma unroll
    for (int r = 0; r < kItems; ++r) {
      v[r] = start + r < n ? val_at(start + r) : 0.0f;
      if (v[r] > 0.0f) local = fadd_rn(local, v[r]);
    }
    float tile_total;
    float running = fadd_rn(carry, block_exclusive_scan_f32(local, scratch, &tile_total));
    int found = 0x7fffffff, my_last = -1;
#pragma unroll
    for (int r = 0; r < kItems; ++r) {
      if (v[r] > 0.0f) {
        running = fadd_rn(running, v[r]);
        my_last = start + r;
        if (found == 0x7fffffff && running > threshold) found = start + r;
      }
    }
    found = block_min_int(found, scratch);
    if (found != 0x7fffffff) return found;
    last = max(last, block_max_int(my_last, scratch));
    carry = fadd_rn(carry, tile_total);
  }
  return last;
}

template <typename ValAt>
__device__ int full_row_sample(ValAt val_at, int n, float u, BlockScratch& scratch) {
  const float total = full_row_total(val_at, n, scratch);
  return full_row_search(val_at, n, fmul_rn(u, total), scratch);
}

}  // namespace es::sampling::dev
