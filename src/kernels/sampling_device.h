#pragma once
// Device building blocks of the sampling kernels (CUDA only: include from .cu files).
// Every function here is called by all kThreads threads of a CTA (block-uniform control
// flow) unless it says "warp 0"; those that use shared scratch end with a __syncthreads so the
// caller can reuse it.
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "common/cuda_check.h"
#include "kernels/pdl.cuh"
#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es::sampling::dev {

inline constexpr int kWarps = kThreads / 32;
inline constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ int laneId() { return threadIdx.x & 31; }
__device__ __forceinline__ int warpId() { return threadIdx.x >> 5; }

__device__ __forceinline__ int pow2Ceil(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Scratch for the block-wide reductions and scans: one 8-byte slot per warp plus a broadcast.
struct BlockScratch {
  uint64_t slot[kWarps];
  uint64_t slot2[kWarps];
  uint64_t out[2];
};

__device__ __forceinline__ uint64_t umax64(uint64_t a, uint64_t b) { return a > b ? a : b; }

template <typename T>
__device__ __forceinline__ T shflXor(T v, int o) {
  return __shfl_xor_sync(kFull, v, o);
}

__device__ __forceinline__ uint64_t blockMaxU64(uint64_t v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v = umax64(v, shflXor(v, o));
  if (laneId() == 0) sh.slot[warpId()] = v;
  __syncthreads();
  uint64_t r = sh.slot[0];
  for (int w = 1; w < kWarps; ++w) r = umax64(r, sh.slot[w]);
  __syncthreads();
  return r;
}
__device__ __forceinline__ uint64_t blockSumU64(uint64_t v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v += shflXor(v, o);
  if (laneId() == 0) sh.slot[warpId()] = v;
  __syncthreads();
  uint64_t r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh.slot[w];
  __syncthreads();
  return r;
}
__device__ __forceinline__ int blockMinInt(int v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v = min(v, shflXor(v, o));
  if (laneId() == 0) sh.slot[warpId()] = static_cast<uint64_t>(static_cast<uint32_t>(v));
  __syncthreads();
  int r = static_cast<int>(static_cast<uint32_t>(sh.slot[0]));
  for (int w = 1; w < kWarps; ++w) r = min(r, static_cast<int>(static_cast<uint32_t>(sh.slot[w])));
  __syncthreads();
  return r;
}
__device__ __forceinline__ int blockMaxInt(int v, BlockScratch& sh) { return -blockMinInt(-v, sh); }

// Exclusive scan of unsigned 64-bit values in thread order (exact: integer). Returns the
// exclusive prefix; *total gets the block sum.
__device__ __forceinline__ uint64_t blockExclusiveScanU64(uint64_t v, BlockScratch& sh,
                                                          uint64_t* total) {
  uint64_t x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t y = __shfl_up_sync(kFull, x, o);
    if (laneId() >= o) x += y;
  }
  if (laneId() == 31) sh.slot[warpId()] = x;
  __syncthreads();
  uint64_t offset = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warpId()) offset += sh.slot[w];
    sum += sh.slot[w];
  }
  __syncthreads();
  *total = sum;
  return offset + x - v;
}

// Bitonic sort of n (power of two) 64-bit keys in shared memory.
__device__ inline void bitonicSort(uint64_t* s, int n, bool descending) {
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

// Adds w to hist[digit] for every lane of the warp, one shared atomic per distinct digit per
// warp (the warp's full-row histograms would otherwise serialise: the first digit of the order
// keys of real logits falls in 1-3 bins, so all 512 threads hit the same u64 shared atomic).
// Lanes with w == 0 or digit >= 256 add nothing. Peers (equal digits, from __match_any_sync) sum
// their weights by a shuffle tree over their relative positions (log2(group) rounds; NVIDIA's
// "reduce_peers"), then the lowest peer adds once. Exact: integer sums in any order.
// Must be called by all 32 lanes (warp-converged).
__device__ __forceinline__ void warpAggregatedAdd(uint64_t* hist, uint32_t digit, uint64_t w) {
  if (w == 0) digit = 0x100u;
  if (__all_sync(kFull, digit >= 0x100u)) return;  // nothing to add (common after digit 0)
  unsigned peers = __match_any_sync(kFull, digit);
  const int lane = laneId();
  const bool leader = (__ffs(peers) - 1) == lane;
  unsigned rel = __popc(peers & ((1u << lane) - 1u));  // peers below this lane
  peers &= ~((2u << lane) - 1u);                       // peers above this lane (lane 31: none)
  uint64_t x = w;
  while (__any_sync(kFull, peers != 0)) {
    const int next = __ffs(peers);  // 1-based lane of the next peer above, 0 if none
    const uint64_t t = __shfl_sync(kFull, x, next > 0 ? next - 1 : lane);
    if ((rel & 1) == 0 && next > 0) x += t;
    const bool done = (rel & 1) != 0;
    peers &= __ballot_sync(kFull, !done);
    rel >>= 1;
  }
  if (leader && digit < 0x100u) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&hist[digit]),
              static_cast<unsigned long long>(x));
  }
}

struct alignas(16) SelectShared {
  uint64_t tmp[kMaxCandidateTopK + 2];  // unsorted candidates (+ padding for pair reads)
  uint32_t hist[256];
  uint32_t bin;
  uint32_t gt;
  int count;
  int pad;
};

// Sorts m (<= kMaxCandidateTopK) distinct nonzero 64-bit values src[0, m) descending into dst
// by counting ranks (one thread per value, O(m) broadcast shared reads each: no barrier per
// stage as in a bitonic sort). src needs a readable slot src[m] (set to 0 here when m is odd).
// Callers synchronise before (src complete); ends with a barrier.
__device__ inline void rankSortDesc(uint64_t* src, int m, uint64_t* dst) {
  if ((m & 1) && threadIdx.x == 0) src[m] = 0;  // 0 is never greater than a value
  __syncthreads();
  const ulonglong2* pairs = reinterpret_cast<const ulonglong2*>(src);
  const int np = (m + 1) >> 1;
  for (int i = threadIdx.x; i < m; i += kThreads) {
    const uint64_t v = src[i];
    int r = 0;
#pragma unroll 4
    for (int j = 0; j < np; ++j) {
      const ulonglong2 w = pairs[j];
      r += (w.x > v ? 1 : 0) + (w.y > v ? 1 : 0);
    }
    dst[r] = v;
  }
  __syncthreads();
}

// The warp's 32 values sorted ascending across lanes (lane l returns the (l+1)-th smallest):
// warp bitonic sort. All 32 lanes call.
__device__ __forceinline__ uint32_t warpSortAscending(uint32_t v) {
  const int lane = laneId();
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const uint32_t o = __shfl_xor_sync(kFull, v, stride);
      const bool asc = (lane & size) == 0 || size == 32;
      const bool low = (lane & stride) == 0;
      v = (asc == low) ? min(v, o) : max(v, o);
    }
  }
  return v;
}

// j-th largest (1 <= j <= 32) of the warp's 32 values (all lanes get it).
__device__ __forceinline__ uint32_t warpJthLargest(uint32_t v, int j) {
  return __shfl_sync(kFull, warpSortAscending(v), 32 - j);
}

// Top-k candidates of n entries (spec §3.8): MSB radix select on the 32-bit order key, 8-bit
// digits, warp-aggregated histograms, early stop once <= 128 candidates remain; then the
// candidates (<= 512) are bitonic-sorted by composite rank (key desc, index asc).
// compAt(i) gives the composite rank of entry i; among entries with equal keys, array order
// must be index order (true for a row, and for concatenated per-chunk sorted lists).
// 1 <= k <= kMaxCandidateTopK. Result: cand[0, m) sorted descending, m >= k (the first k are
// the top-k), cand[m, pow2(m)) = 0. Returns m.
template <typename CompAt>
__device__ int selectTopCandidates(CompAt compAt, int n, int k, uint64_t* cand, SelectShared& sh,
                                   BlockScratch& scratch) {
  if (n <= kMaxCandidateTopK) {
    const int np = pow2Ceil(n);
    for (int i = threadIdx.x; i < n; i += kThreads) sh.tmp[i] = compAt(i);
    rankSortDesc(sh.tmp, n, cand);
    for (int i = n + threadIdx.x; i < np; i += kThreads) cand[i] = 0;
    __syncthreads();
    return n;
  }
  // Pre-filter. n > kThreads, so every thread owns >= 1 entry (i = t mod kThreads) and every
  // warp has 32 thread maxima. With j = ceil(k / kWarps) <= 32, warp w has >= j distinct entries
  // with key >= thetaW (its j-th largest thread maximum), so >= kWarps * j >= k entries have
  // key >= theta = min_w thetaW: the k-th largest key is >= theta, and the entries with
  // key >= theta contain the top-k. If they are few, rank-sort them; else the radix select below.
  {
    uint32_t tmax = 0;
    for (int i = threadIdx.x; i < n; i += kThreads) tmax = max(tmax, compositeKey(compAt(i)));
    const int j = (k + kWarps - 1) / kWarps;
    const uint32_t thetaW = warpJthLargest(tmax, j);
    if (threadIdx.x == 0) sh.count = 0;
    const uint32_t theta = ~static_cast<uint32_t>(blockMaxU64(~thetaW, scratch));
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint64_t c = compAt(i);
      if (compositeKey(c) >= theta) {
        const int pos = atomicAdd(&sh.count, 1);
        if (pos < kMaxCandidateTopK) sh.tmp[pos] = c;
      }
    }
    __syncthreads();
    const int m = sh.count;
    if (m <= kMaxCandidateTopK) {
      rankSortDesc(sh.tmp, m, cand);
      const int np = pow2Ceil(m);
      for (int i = m + threadIdx.x; i < np; i += kThreads) cand[i] = 0;
      __syncthreads();
      return m;
    }
    __syncthreads();  // everyone has read sh.count before the select reuses it
  }
  uint32_t prefix = 0;
  int above = 0, level = 0;
  uint32_t binCount = static_cast<uint32_t>(n);
  for (int d = 0; d < 4; ++d) {
    const int shift = 24 - 8 * d;
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + threadIdx.x;
      bool valid = false;
      uint32_t digit = 0x100u;
      if (i < n) {
        const uint32_t key = compositeKey(compAt(i));
        valid = (d == 0) || ((key >> (shift + 8)) == prefix);
        if (valid) digit = (key >> shift) & 0xffu;
      }
      const unsigned peers = __match_any_sync(kFull, digit);
      if (valid && (__ffs(peers) - 1) == laneId())
        atomicAdd(&sh.hist[digit], static_cast<uint32_t>(__popc(peers)));
    }
    __syncthreads();
    if (warpId() == 0) {
      // Lane l owns bins 255-8l .. 248-8l (descending). Find the bin holding rank `need`.
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = sh.hist[255 - 8 * laneId() - j];
        sum += c[j];
      }
      uint32_t incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(kFull, incl, o);
        if (laneId() >= o) incl += y;
      }
      uint32_t run = incl - sum;
      const uint32_t need = static_cast<uint32_t>(k - above);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (run < need && need <= run + c[j]) {
          sh.bin = 255 - 8 * laneId() - j;
          sh.gt = run;
        }
        run += c[j];
      }
    }
    __syncthreads();
    above += static_cast<int>(sh.gt);
    prefix = (prefix << 8) | sh.bin;
    binCount = sh.hist[sh.bin];
    level = d + 1;
    __syncthreads();  // everyone has read hist/bin before the next pass clears them
    if (above + static_cast<int>(binCount) <= kEarlyStopCandidates) break;
  }
  const int shift = 32 - 8 * level;
  const bool takeAll = above + static_cast<int>(binCount) <= kMaxCandidateTopK;
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  if (takeAll) {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint64_t c = compAt(i);
      const uint32_t key = compositeKey(c);
      const uint32_t top = shift == 0 ? key : (key >> shift);
      if (top >= prefix) sh.tmp[atomicAdd(&sh.count, 1)] = c;
    }
  } else {
    // level == 4: prefix is the exact k-th key and too many entries tie on it. Take all larger
    // keys and the first (k - above) ties in array (= index) order.
    const int needTies = k - above;
    int carry = 0;
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + threadIdx.x;
      uint64_t c = 0;
      uint32_t key = 0;
      if (i < n) {
        c = compAt(i);
        key = compositeKey(c);
      }
      const bool tie = i < n && key == prefix;
      uint64_t tileTies = 0;
      const int rank =
          carry + static_cast<int>(blockExclusiveScanU64(tie ? 1 : 0, scratch, &tileTies));
      if (i < n && (key > prefix || (tie && rank < needTies))) sh.tmp[atomicAdd(&sh.count, 1)] = c;
      carry += static_cast<int>(tileTies);
    }
  }
  __syncthreads();
  const int m = sh.count;
  rankSortDesc(sh.tmp, m, cand);
  const int np = pow2Ceil(m);
  for (int i = m + threadIdx.x; i < np; i += kThreads) cand[i] = 0;
  __syncthreads();
  return m;
}

struct FinalizeResult {
  int cut;  // entries [0, cut) of the sorted order survive
};

// Weights and probabilities of the first `kept` entries of a descending-sorted composite list
// (the top-k set): exact fixed-point prefix masses, top-p cut, renormalisation (spec §3.3-3.4).
// mass: scratch [>= kept] u64; prob: out [>= cut] f32 by sorted position.
__device__ inline int finalizeSorted(const uint64_t* sorted, int kept, const RowParams& rp,
                                     TopPMode mode, uint64_t* mass, float* prob,
                                     BlockScratch& scratch) {
  const float rowMax = keyValue(compositeKey(sorted[0]));
  const int per = (kept + kThreads - 1) / kThreads;
  const int begin = min(kept, static_cast<int>(threadIdx.x) * per);
  const int end = min(kept, begin + per);
  uint64_t local = 0;
  for (int j = begin; j < end; ++j) {
    const float d = fsubRn(keyValue(compositeKey(sorted[j])), rowMax);
    local += massOf(expNonpos(d));
    mass[j] = local;  // partial, completed below
  }
  uint64_t total = 0;
  const uint64_t offset = blockExclusiveScanU64(local, scratch, &total);
  for (int j = begin; j < end; ++j) mass[j] += offset;  // inclusive prefix mass
  __syncthreads();
  int cut = kept;
  uint64_t norm = total, last = 0;
  bool partialLast = false;
  if (rp.topPOn) {
    const uint64_t budget = topPBudget(rp.topP, total);
    uint64_t below = 0;
    for (int j = threadIdx.x; j < kept; j += kThreads) below += mass[j] < budget ? 1 : 0;
    cut = static_cast<int>(blockSumU64(below, scratch)) + 1;
    if (mode == TopPMode::kNucleus) {
      norm = mass[cut - 1];
    } else {
      norm = budget;
      last = budget - (cut >= 2 ? mass[cut - 2] : 0);
      partialLast = true;
    }
  }
  for (int j = threadIdx.x; j < cut; j += kThreads) {
    uint64_t w = mass[j] - (j > 0 ? mass[j - 1] : 0);
    if (partialLast && j == cut - 1) w = last;
    prob[j] = probOf(w, norm);
  }
  __syncthreads();
  return cut;
}

// Inverse CDF of spec §3.5 over a short list (m <= kMaxCandidateTopK entries sorted by index),
// by one warp (all 32 lanes call; the result is the same in every lane). The running sums are
// the reference's sequential fp32 sums in index order: exact agreement.

// The list's total: the positive values summed in list order.
__device__ inline float sortedListMassWarp(const float* val, int m) {
  float total = 0.0f;
  for (int base = 0; base < m; base += 32) {
    const float v = base + laneId() < m ? val[base + laneId()] : 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float x = __shfl_sync(kFull, v, j);
      if (x > 0.0f) total = faddRn(total, x);
    }
  }
  return total;
}

// The index of the first entry whose running sum is > threshold (skipping values <= 0), else
// the last positive entry's, else -1.
__device__ inline int sortedListSearchWarp(const int32_t* idx, const float* val, int m,
                                           float threshold) {
  float running = 0.0f;
  int found = -1, last = -1;
  for (int base = 0; base < m; base += 32) {
    const float v = base + laneId() < m ? val[base + laneId()] : 0.0f;
    const int ix = base + laneId() < m ? idx[base + laneId()] : -1;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float x = __shfl_sync(kFull, v, j);
      const int xi = __shfl_sync(kFull, ix, j);
      if (x > 0.0f) {
        running = faddRn(running, x);
        last = xi;
        if (found < 0 && running > threshold) found = xi;
      }
    }
  }
  return found >= 0 ? found : last;
}

// The sample with uniform u: threshold u * total.
__device__ inline int sampleSortedListWarp(const int32_t* idx, const float* val, int m, float u) {
  return sortedListSearchWarp(idx, val, m, fmulRn(u, sortedListMassWarp(val, m)));
}

// ---------------------------------------------------------------------------------------------
// Exact parallel evaluation of the spec's sequential fp32 running sum (spec §3.5).
//
// The reference sums r <- fl(r + x_i) over the positive entries in index order. A parallel scan
// in another association would round differently (a block-wide float scan drifts ~2e-5 relative
// from the reference on 128k-entry rows and picks other tokens), so instead we reproduce the
// sequential rounding exactly:
//  * while r stays in one binade [2^e, 2^(e+1)) (or the subnormal range), r is an integer n of
//    ulps u, and fl(r + x) = (n + c) u with c = round-half-even(x / u) where the tie goes to the
//    even value of n + c: the step is the function n -> n + c[n & 1], and such functions compose
//    (a pair of offsets), so a block scan of them gives every running sum of the binade exactly;
//  * this is valid while the result stays below 2^(e+1), i.e. n_after < N (N = 2^24, or 2^23 for
//    the subnormal range); the first step reaching N is done as the real faddRn by its owner,
//    then the scan restarts after it in the new binade. r only grows, so that happens at most
//    once per binade (~20-40 times per row, a handful per tile at most).

struct SeqStep {  // n -> n + (n even ? c0 : c1)
  int64_t c0, c1;
};
__device__ __forceinline__ SeqStep seqThen(SeqStep f, SeqStep g) {  // f first, then g
  return {f.c0 + ((f.c0 & 1) ? g.c1 : g.c0), f.c1 + ((f.c1 & 1) ? g.c0 : g.c1)};
}
__device__ __forceinline__ int64_t seqApply(SeqStep f, int64_t n) {
  return n + ((n & 1) ? f.c1 : f.c0);
}

// Step of adding x (> 0) on the grid of ulp 2^ue. Offsets above 2^40 are capped (they cross).
__device__ __forceinline__ SeqStep seqStep(float x, int ue) {
  const double q =
      static_cast<double>(x) * __longlong_as_double(static_cast<long long>(1023 - ue) << 52);
  if (q >= 1099511627776.0) return {int64_t{1} << 40, int64_t{1} << 40};
  const double m = floor(q);
  const double f = q - m;  // exact
  const int64_t mi = static_cast<int64_t>(m);
  if (f < 0.5) return {mi, mi};
  if (f > 0.5) return {mi + 1, mi + 1};
  return {mi + (mi & 1), mi + ((mi + 1) & 1)};  // tie: the even one of n + m, n + m + 1
}

// Exclusive block scan of steps in thread order; *all gets the composition of every thread's.
__device__ __forceinline__ SeqStep blockExclusiveScanSteps(SeqStep v, BlockScratch& sh,
                                                           SeqStep* all) {
  SeqStep x = v;
  for (int o = 1; o < 32; o <<= 1) {
    SeqStep y;
    y.c0 = __shfl_up_sync(kFull, x.c0, o);
    y.c1 = __shfl_up_sync(kFull, x.c1, o);
    if (laneId() >= o) x = seqThen(y, x);
  }
  SeqStep excl;
  excl.c0 = __shfl_up_sync(kFull, x.c0, 1);
  excl.c1 = __shfl_up_sync(kFull, x.c1, 1);
  if (laneId() == 0) excl = {0, 0};
  if (laneId() == 31) {
    sh.slot[warpId()] = static_cast<uint64_t>(x.c0);
    sh.slot2[warpId()] = static_cast<uint64_t>(x.c1);
  }
  __syncthreads();
  SeqStep before = {0, 0}, total = {0, 0};
  for (int w = 0; w < kWarps; ++w) {
    const SeqStep t = {static_cast<int64_t>(sh.slot[w]), static_cast<int64_t>(sh.slot2[w])};
    if (w < warpId()) before = seqThen(before, t);
    total = seqThen(total, t);
  }
  __syncthreads();
  *all = total;
  return seqThen(before, excl);
}

// Block min of two ints at once.
__device__ __forceinline__ void blockMin2(int* a, int* b, BlockScratch& sh) {
  int x = *a, y = *b;
  for (int o = 16; o; o >>= 1) {
    x = min(x, shflXor(x, o));
    y = min(y, shflXor(y, o));
  }
  if (laneId() == 0) {
    sh.slot[warpId()] = static_cast<uint32_t>(x);
    sh.slot2[warpId()] = static_cast<uint32_t>(y);
  }
  __syncthreads();
  int rx = 0x7fffffff, ry = 0x7fffffff;
  for (int w = 0; w < kWarps; ++w) {
    rx = min(rx, static_cast<int>(static_cast<uint32_t>(sh.slot[w])));
    ry = min(ry, static_cast<int>(static_cast<uint32_t>(sh.slot2[w])));
  }
  __syncthreads();
  *a = rx;
  *b = ry;
}

// The sequential fp32 sum of the positive valAt(i), i in [0, n), in index order, bit for bit,
// starting from r0 (>= 0; 0 for a whole row, a chunk's exact start for the split CDF).
// search: returns the first index whose running sum is > threshold (or the last positive index,
// or -1); otherwise returns -1 and *total gets the full sum.
//
// A collective: n and search must be block-uniform; r0 and threshold are taken from thread 0
// (broadcast below), because the loop's exits compare the shared running sum against them: a
// thread with another threshold would return while the others wait at the next barrier forever.
// The loop is bounded: each round returns, ends
// the tile, or moves `from` past a crossing (at most kTile rounds per tile, in practice one per
// binade passed).
template <typename ValAt>
__device__ int sequentialCdf(ValAt valAt, int n, bool search, float threshold, float* total,
                             BlockScratch& scratch, float r0 = 0.0f) {
  constexpr int kNone = 0x7fffffff;
  // scratch.out is free here: its last reader (a crossing below, in an earlier call) passed a
  // barrier after reading, and its next writer (a crossing) comes after the scan's barriers.
  if (threadIdx.x == 0) {
    scratch.out[0] = f2u(r0);
    scratch.out[1] = f2u(threshold);
  }
  __syncthreads();
  float r = u2f(static_cast<uint32_t>(scratch.out[0]));
  threshold = u2f(static_cast<uint32_t>(scratch.out[1]));
  int myLast = -1;
  for (int base = 0; base < n; base += kTile) {
    const int start = base + threadIdx.x * kItems;
    float v[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      v[k] = start + k < n ? valAt(start + k) : 0.0f;
      if (v[k] > 0.0f) myLast = start + k;
    }
    int from = base;  // entries before `from` are already in r
    for (;;) {
      const uint32_t bits = f2u(r);  // r >= 0
      const int e = static_cast<int>(bits >> 23);
      const int ue = e == 0 ? -149 : e - 150;
      const int64_t limit = e == 0 ? (int64_t{1} << 23) : (int64_t{1} << 24);
      const int64_t n0 = e == 0 ? bits : ((bits & 0x7fffffu) | 0x800000u);
      SeqStep st[kItems];
      SeqStep mine = {0, 0};
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        st[k] = (start + k >= from && v[k] > 0.0f) ? seqStep(v[k], ue) : SeqStep{0, 0};
        mine = seqThen(mine, st[k]);
      }
      SeqStep all;
      int64_t cur = seqApply(blockExclusiveScanSteps(mine, scratch, &all), n0);
      int found = kNone, cross = kNone;
      int64_t beforeCross = 0;
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if (cross == kNone && start + k >= from && v[k] > 0.0f) {
          const int64_t next = seqApply(st[k], cur);
          if (next >= limit) {
            cross = start + k;
            beforeCross = cur;
          } else {
            if (search && found == kNone &&
                u2f((static_cast<uint32_t>(e) << 23) | (static_cast<uint32_t>(next) & 0x7fffffu)) >
                    threshold) {
              found = start + k;
            }
            cur = next;
          }
        }
      }
      int firstFound = found, firstCross = cross;
      blockMin2(&firstFound, &firstCross, scratch);
      if (firstFound < firstCross) return firstFound;
      if (firstCross == kNone) {
        const int64_t end = seqApply(all, n0);  // no crossing: every step of the tile is exact
        r = u2f((static_cast<uint32_t>(e) << 23) | (static_cast<uint32_t>(end) & 0x7fffffu));
        break;
      }
      if (cross == firstCross) {  // the owner performs the crossing step as the real fadd
        const float before = u2f((static_cast<uint32_t>(e) << 23) |
                                 (static_cast<uint32_t>(beforeCross) & 0x7fffffu));
        scratch.out[0] = f2u(faddRn(before, v[cross - start]));
      }
      __syncthreads();
      r = u2f(static_cast<uint32_t>(scratch.out[0]));
      __syncthreads();
      if (search && r > threshold) return firstCross;
      from = firstCross + 1;
    }
  }
  if (total) *total = r;
  if (!search) return -1;
  return blockMaxInt(myLast, scratch);
}

// Canonical full-row inverse CDF, pass 1: the fp32 total of the positive values (exactly the
// reference's sequential sum).
template <typename ValAt>
__device__ float fullRowTotal(ValAt valAt, int n, BlockScratch& scratch) {
  float total = 0.0f;
  sequentialCdf(valAt, n, false, 0.0f, &total, scratch);
  return total;
}

// Pass 2: first index whose running sum is > threshold (skipping values <= 0), else the last
// positive index, else -1. Identical to the reference's loop.
template <typename ValAt>
__device__ int fullRowSearch(ValAt valAt, int n, float threshold, BlockScratch& scratch) {
  return sequentialCdf(valAt, n, true, threshold, nullptr, scratch);
}

template <typename ValAt>
__device__ int fullRowSample(ValAt valAt, int n, float u, BlockScratch& scratch) {
  const float total = fullRowTotal(valAt, n, scratch);
  return fullRowSearch(valAt, n, fmulRn(u, total), scratch);
}

}  // namespace es::sampling::dev
