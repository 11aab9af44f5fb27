#pragma once
// GPU groups for fullrow::decideCut (kernels/sampling_fullrow_cut.h): the collectives of one
// CTA over a whole row (CtaGroup) and of a thread-block cluster whose CTAs own contiguous slices
// of the row (ClusterGroup). CUDA only: include from .cu files.
//
// Why a cluster (and not separate CTAs with a workspace and extra launches): the decision is ~14
// dependent collectives (max, 4 digit passes + a tie pass per select, the total); as launches
// that would be ~14 launch gaps of several µs each at batch 1. A cluster meets at a hardware
// barrier in about a microsecond, its CTAs read each other's partial histograms through
// distributed shared memory (no workspace, no global atomics, nothing to reset), and all its
// CTAs are co-scheduled by construction, so the barriers cannot wait for a CTA that never runs
// (no spin loops on global flags, so nothing can hang on a bug elsewhere). argmax.cu splits a row
// over a cluster the same way.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling_device.h"
#include "kernels/sampling_fullrow_cut.h"

namespace es::sampling::dev {

inline constexpr int kMaxClusterRanks = 16;

// Exchange buffers: a collective writes this CTA's part to x[p], meets the cluster at a barrier,
// reads every rank's x[p], and flips p. The next write to x[p] comes two collectives later,
// after another cluster barrier that every reader of x[p] had to pass first: no extra barrier.
struct FullXfer {
  uint64_t hist[256];
  uint64_t val;
};
struct FullGroupShared {
  FullXfer x[2];
  uint64_t merged[256];            // ClusterGroup: the cluster's histogram
  uint64_t all[kMaxClusterRanks];  // ClusterGroup: every rank's exchanged value
  uint64_t gt;
  uint32_t bin;
  int found;
};

// Adds f(i, &digit) over entries [begin, end) of this CTA (thread t: begin + t + r kThreads)
// to hist (zeroed, published before the call). Whole warps take part (warpAggregatedAdd).
template <typename F>
__device__ __forceinline__ void accumulateHist(F f, int begin, int end, uint64_t* hist) {
  for (int base = begin; base < end; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    uint32_t digit = 0x100u;
    uint64_t w = 0;
    if (i < end) w = f(i, &digit);
    warpAggregatedAdd(hist, digit, w);
  }
}

// fullrow::pickBin by warp 0 (lane l owns bins 255 - 8l ... 248 - 8l); result in sh.bin, sh.gt.
__device__ __forceinline__ void pickBinWarp(const uint64_t* hist, uint64_t need,
                                            FullGroupShared& sh) {
  if (warpId() != 0) return;
  uint64_t c[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    c[j] = hist[255 - 8 * laneId() - j];
    sum += c[j];
  }
  uint64_t incl = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t y = __shfl_up_sync(kFull, incl, o);
    if (laneId() >= o) incl += y;
  }
  uint64_t run = incl - sum;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    if (run < need && need <= run + c[j]) {
      sh.bin = 255 - 8 * laneId() - j;
      sh.gt = run;
    }
    run += c[j];
  }
}

// Index of the j-th (1-based) entry of [begin, end), in index order, for which match(i) holds,
// or -1 (a CTA collective: tiles of kTile, thread t owns kItems consecutive entries).
template <typename Match>
__device__ int jthInRange(Match match, int begin, int end, uint64_t j, FullGroupShared& sh,
                          BlockScratch& scratch) {
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  uint64_t carry = 0;
  for (int base = begin; base < end; base += kTile) {
    const int start = base + static_cast<int>(threadIdx.x) * kItems;
    uint64_t count = 0;
#pragma unroll
    for (int r = 0; r < kItems; ++r) count += (start + r < end && match(start + r)) ? 1 : 0;
    uint64_t tileTotal;
    const uint64_t before = carry + blockExclusiveScanU64(count, scratch, &tileTotal);
    if (before < j && j <= before + count) {
      uint64_t c = before;
      for (int r = 0; r < kItems; ++r) {
        if (start + r < end && match(start + r) && ++c == j) {
          sh.found = start + r;
          break;
        }
      }
    }
    carry += tileTotal;
    __syncthreads();
    if (sh.found >= 0) break;  // block-uniform: read after the barrier
  }
  const int found = sh.found;
  __syncthreads();
  return found;
}

template <typename F>
__device__ __forceinline__ uint64_t localMax(F f, int begin, int end) {
  uint64_t v = 0;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kThreads) v = umax64(v, f(i));
  return v;
}
template <typename F>
__device__ __forceinline__ uint64_t localSum(F f, int begin, int end) {
  uint64_t v = 0;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kThreads) v += f(i);
  return v;
}

// One CTA, the whole row.
struct CtaGroup {
  FullGroupShared& sh;
  BlockScratch& scratch;
  int begin, end;
  __device__ bool lead() const { return true; }
  __device__ void finish() const {}
  template <typename F>
  __device__ uint64_t reduceMax(F f) {
    return blockMaxU64(localMax(f, begin, end), scratch);
  }
  template <typename F>
  __device__ uint64_t reduceSum(F f) {
    return blockSumU64(localSum(f, begin, end), scratch);
  }
  template <typename F>
  __device__ void selectDigit(F f, uint64_t need, uint32_t* bin, uint64_t* gt) {
    uint64_t* hist = sh.x[0].hist;
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    accumulateHist(f, begin, end, hist);
    __syncthreads();
    pickBinWarp(hist, need, sh);
    __syncthreads();
    *bin = sh.bin;
    *gt = sh.gt;
    __syncthreads();  // read before the next pass clears hist / rewrites bin
  }
  template <typename Match>
  __device__ int jth(Match match, uint64_t j) {
    return jthInRange(match, begin, end, j, sh, scratch);
  }
};

// The CTAs of a cluster (grid x = cluster ranks, one cluster per row), rank r owning
// fullrow::sliceOf(r). Every collective is cluster-uniform: each CTA merges every rank's part
// itself (the same exact integers, so the same result everywhere) instead of waiting for a
// broadcast. Call finish() before the CTA exits (no CTA may leave while another can still read
// its shared memory).
struct ClusterGroup {
  FullGroupShared& sh;
  BlockScratch& scratch;
  int begin, end;
  int rank, ranks;
  int p = 0;
  __device__ ClusterGroup(FullGroupShared& s, BlockScratch& b, int n) : sh(s), scratch(b) {
    namespace cg = cooperative_groups;
    const cg::cluster_group cl = cg::this_cluster();
    rank = static_cast<int>(cl.block_rank());
    ranks = static_cast<int>(cl.num_blocks());
    fullrow::sliceOf(rank, ranks, n, &begin, &end);
  }
  __device__ bool lead() const { return rank == 0; }
  __device__ void finish() const { cooperative_groups::this_cluster().sync(); }
  // Every rank's block-uniform v, into sh.all[0, ranks) (visible to the whole CTA on return).
  __device__ void exchange(uint64_t v) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) sh.x[p].val = v;
    cl.sync();
    if (static_cast<int>(threadIdx.x) < ranks)
      sh.all[threadIdx.x] = *cl.map_shared_rank(&sh.x[p].val, threadIdx.x);
    __syncthreads();
    p ^= 1;
  }
  template <typename F>
  __device__ uint64_t reduceMax(F f) {
    exchange(blockMaxU64(localMax(f, begin, end), scratch));
    uint64_t r = 0;
    for (int q = 0; q < ranks; ++q) r = umax64(r, sh.all[q]);
    return r;
  }
  template <typename F>
  __device__ uint64_t reduceSum(F f) {
    exchange(blockSumU64(localSum(f, begin, end), scratch));
    uint64_t r = 0;
    for (int q = 0; q < ranks; ++q) r += sh.all[q];
    return r;
  }
  template <typename F>
  __device__ void selectDigit(F f, uint64_t need, uint32_t* bin, uint64_t* gt) {
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    uint64_t* hist = sh.x[p].hist;
    for (int i = threadIdx.x; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    accumulateHist(f, begin, end, hist);
    cl.sync();  // every rank's histogram complete
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      uint64_t s = 0;
      for (int q = 0; q < ranks; ++q) s += cl.map_shared_rank(hist, q)[b];
      sh.merged[b] = s;
    }
    __syncthreads();
    pickBinWarp(sh.merged, need, sh);
    __syncthreads();
    *bin = sh.bin;
    *gt = sh.gt;
    p ^= 1;  // merged / bin / gt are rewritten only after the next cluster barrier
  }
  // Counts per rank, then the owner of the j-th match scans its slice; its index is exchanged.
  template <typename Match>
  __device__ int jth(Match match, uint64_t j) {
    exchange(blockSumU64(
        localSum([&](int i) { return match(i) ? uint64_t{1} : uint64_t{0}; }, begin, end),
        scratch));
    uint64_t localJ = 0;
    const int owner = fullrow::rankOfJth([&](int q) { return sh.all[q]; }, ranks, j, &localJ);
    int found = -1;
    if (owner == rank) found = jthInRange(match, begin, end, localJ, sh, scratch);
    __syncthreads();  // sh.all read by everyone before the next exchange rewrites it
    exchange(static_cast<uint64_t>(found + 1));
    uint64_t r = 0;
    for (int q = 0; q < ranks; ++q) r = umax64(r, sh.all[q]);
    return static_cast<int>(r) - 1;
  }
};

}  // namespace es::sampling::dev
