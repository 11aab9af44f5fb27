// Sampling kernels (spec §3.1-3.6, §3.8) and their launcher.
//
//  smallVocabKernel  V <= 4096: one CTA per row, the row's order keys in shared memory.
//                      k <= 512: radix select + candidate bitonic sort; else a full bitonic sort.
//  chunkFastKernel   general path, k <= kcap: the rows are split into (row, chunk) items of
//                      2048-8192 entries, walked row-major in contiguous runs by persistent CTAs
//                      (as many as are resident) that prefetch their next chunk (f32: cp.async
//                      into a two-stage shared-memory ring; else into registers); each CTA keeps
//                      the top-k of the chunks it has seen of a row, merged in groups of items,
//                      whose k-th key filters the next chunks; each run of one row's chunks
//                      writes one record (sorted composites), or, when every CTA walks whole
//                      rows, the CTA finalizes its rows itself (no final kernel).
//  finalFastKernel   one CTA per row merges the row's records (in registers, a pre-filter
//                      threshold), then the same finalisation and emission as the small-vocab
//                      candidate mode.
//  fullRowKernel     general path, top-k off or k > kcap: one CTA per row, or for up to 64
//                      long rows (plan.fullrowSplit) one cluster of 2-16 CTAs per row; radix
//                      threshold searches over the row (4 passes each, by count for top-k and by
//                      exact fixed-point mass for top-p), never O(k) passes.
// All paths share kernels/sampling_device.h, so they produce bit-identical probabilities.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "common/rng.h"
#include "kernels/cluster_launch.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/sampling.h"
#include "kernels/sampling_cdf_split.h"
#include "kernels/sampling_chunk_prefilter.h"
#include "kernels/sampling_device.h"
#include "kernels/sampling_fullrow_cut.h"
#include "kernels/sampling_fullrow_groups.cuh"
#include "kernels/sampling_rows.h"
#include "kernels/spec_verify_device.cuh"

namespace es::sampling {
namespace {

using namespace es::sampling::dev;
using kernel::cpAsync16;
using kernel::cpAsyncCommit;
using kernel::cpAsyncWait;

__device__ __forceinline__ float loadLogit(const float* x, int i) { return x[i]; }
__device__ __forceinline__ float loadLogit(const fp16* x, int i) { return to_float(x[i]); }

// Loads entries [0, len) (len <= kN) of x into v[kN / kThreads], every load of the thread issued
// before any is used. fp32 rows that are 16-byte aligned use 16-byte loads (layout: slot
// j = 4r + e holds entry 4 (t + r kThreads) + e); otherwise scalar loads (slot j holds entry
// t + j kThreads). Absent entries read 0. Returns the layout (block-uniform) for entryIndex().
template <int kN, typename T>
__device__ __forceinline__ bool loadEntries(const T* x, int len, float (&v)[kN / kThreads]) {
  constexpr int kPer = kN / kThreads;
  if constexpr (std::is_same_v<T, float>) {
    if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
      float4 w[kPer / 4];
#pragma unroll
      for (int r = 0; r < kPer / 4; ++r) {
        const int b = 4 * (static_cast<int>(threadIdx.x) + r * kThreads);
        if (b + 4 <= len) {
          w[r] = __ldg(reinterpret_cast<const float4*>(x + b));
        } else {
          w[r].x = b < len ? __ldg(x + b) : 0.0f;
          w[r].y = b + 1 < len ? __ldg(x + b + 1) : 0.0f;
          w[r].z = b + 2 < len ? __ldg(x + b + 2) : 0.0f;
          w[r].w = b + 3 < len ? __ldg(x + b + 3) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < kPer / 4; ++r) {
        v[4 * r] = w[r].x;
        v[4 * r + 1] = w[r].y;
        v[4 * r + 2] = w[r].z;
        v[4 * r + 3] = w[r].w;
      }
      return true;
    }
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = threadIdx.x + r * kThreads;
    v[r] = i < len ? loadLogit(x, i) : 0.0f;
  }
  return false;
}
__device__ __forceinline__ int entryIndex(int j, bool vec) {
  return vec ? 4 * (static_cast<int>(threadIdx.x) + (j >> 2) * kThreads) + (j & 3)
             : static_cast<int>(threadIdx.x) + j * kThreads;
}

__device__ __forceinline__ RowParams rowParams(const RowsArgs& a, int row) {
  if (a.scalarOnly) return a.scalarParams;  // the same makeRowParams, once on the host
  const int pi = row / a.rowsPerParam;
  const float t = a.temperatures ? a.temperatures[pi] : a.temperature;
  const int32_t k = a.topKs ? a.topKs[pi] : a.topK;
  const float p = a.topPs ? a.topPs[pi] : a.topP;
  return makeRowParams(t, k, p, a.vocab);
}

__device__ __forceinline__ float rowUniform(const RowsArgs& a, int row) {
  const int q = row / a.rowsPerParam;
  return a.uniforms ? a.uniforms[row]
                    : request_uniform(a.seeds[q], a.positions[q], a.purpose,
                                      static_cast<uint32_t>(row - q * a.rowsPerParam));
}

constexpr uint32_t kMinusInfKey = fullrow::kMinusInfKey;

// Shared memory of the candidate modes.
struct alignas(16) CandShared {
  uint64_t cand[kMaxCandidateTopK];      // sorted composites
  uint64_t aux[kMaxCandidateTopK];       // prefix masses, then (index, prob) packs
  float prob[kMaxCandidateTopK];         // by sorted position
  int32_t idxSorted[kMaxCandidateTopK];  // kept entries by index
  float valSorted[kMaxCandidateTopK];
};

__device__ void emitUniform(const RowsArgs& a, int row) {
  // A verification's chain inputs (stageChainInputs) are not needed here; their copies are
  // waited for all the same, so that no CTA ends with copies into its shared memory in flight.
  if (a.verifyRows) cpAsyncWait<0>();
  const int V = a.vocab;
  if (a.probs) {
    const float pu = fdivRn(1.0f, static_cast<float>(V));
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) out[i] = pu;
  }
  if (threadIdx.x == 0) {
    if (a.tokens) {
      a.tokens[row] = a.flagNonFinite ? kNonFiniteToken : uniformRowToken(rowUniform(a, row), V);
    }
    if (a.verifyRows) {
      a.verifyRows[row].status = kUniform;
      a.verifyRows[row].count = 0;
    }
  }
}

// A verification's list row (one warp): its inputs from its landed ChainStage, then its
// VerifyRow from the kept list idx/val[0, cut). Not inlined: inlined into chunkFastKernel, it
// would crowd the item loop's register allocation even where it never runs (sampleRows).
__device__ __noinline__ specVerify::dev::ListRowInputs listRowInputsNotInlined(
    specVerify::ChainInputs chain, int row, const specVerify::dev::ChainStage& stage) {
  return specVerify::dev::stagedListRowInputs(chain, row, stage);
}
__device__ __noinline__ void verifyListRow(specVerify::dev::ListRowInputs in,
                                           specVerify::VerifyRow* rows, int row, const int32_t* idx,
                                           const float* val, int cut, float* res) {
  const int2 v = specVerify::dev::verifyListRowWarp(in, idx, val, cut, res);
  if (laneId() == 0) rows[row] = specVerify::VerifyRow{kSparse, cut, v.x, v.y};
}

// A verification's list row: warp 0 issues the copies of its chain inputs (as a commit group of
// its own or as part of the caller's next one), which the caller waits for before emitCandidates.
__device__ __forceinline__ void stageChainInputs(const RowsArgs& a, int row,
                                                 specVerify::dev::ChainStage& stage) {
  if (a.verifyRows && warpId() == 0) specVerify::dev::stageListRowInputs(a.chain, row, stage);
}

// Outputs of a candidate-mode row: entries [0, cut) of `sorted` with probabilities prob[]. A
// verification's row: warp 0's lanes have waited for the copies of `stage` (stageChainInputs).
__device__ void emitCandidates(const RowsArgs& a, int row, const uint64_t* sorted, int cut,
                               CandShared& cs, const specVerify::dev::ChainStage& stage) {
  specVerify::dev::ListRowInputs chainIn{};
  if (a.verifyRows && warpId() == 0) {
    __syncwarp();  // every lane's landed copies are visible to the whole warp
    chainIn = listRowInputsNotInlined(a.chain, row, stage);
  }
  // Sort the kept entries by index: each entry's position is the number of kept entries with a
  // lower index (indices are distinct), counted over the composites (lower index = larger ~index).
  for (int i = threadIdx.x; i < cut; i += kThreads) cs.aux[i] = sorted[i];
  if ((cut & 1) && threadIdx.x == 0) cs.aux[cut] = 0;  // never counted: ~0u index is impossible
  __syncthreads();
  {
    const uint2* lo = reinterpret_cast<const uint2*>(cs.aux);  // .x: ~index (low word)
    const int np = (cut + 1) >> 1;
    for (int i = threadIdx.x; i < cut; i += kThreads) {
      const uint32_t ni = static_cast<uint32_t>(cs.aux[i]);  // ~index of entry i
      int r = 0;
#pragma unroll 4
      for (int j = 0; j < np; ++j) {
        const uint4 w = reinterpret_cast<const uint4*>(lo)[j];
        r += (w.x > ni ? 1 : 0) + (w.z > ni ? 1 : 0);
      }
      cs.idxSorted[r] = static_cast<int32_t>(~ni);
      cs.valSorted[r] = cs.prob[i];
    }
  }
  __syncthreads();
  const int V = a.vocab;
  if (a.probs && a.denseForSparseRows) {
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) out[i] = 0.0f;
    __syncthreads();  // zeros before the scatter (same addresses, other threads)
    for (int i = threadIdx.x; i < cut; i += kThreads) out[cs.idxSorted[i]] = cs.valSorted[i];
  }
  if (a.verifyRows && warpId() == 0) {  // the row's draft test and stop token, from the list
    // cs.aux (the index sort's packs) is free since the barrier above: the residual's values.
    verifyListRow(chainIn, a.verifyRows, row, cs.idxSorted, cs.valSorted, cut,
                  reinterpret_cast<float*>(cs.aux));
  }
  if (a.tokens && warpId() == 0) {
    const int token = sampleSortedListWarp(cs.idxSorted, cs.valSorted, cut, rowUniform(a, row));
    if (laneId() == 0) a.tokens[row] = token;
  }
}

// ---------------------------------------------------------------------------------------------
// Small-vocab path.

__host__ __device__ inline size_t align8(size_t x) { return (x + 7) & ~size_t{7}; }

template <typename T>
__global__ void __launch_bounds__(kThreads) smallVocabKernel(RowsArgs a, int fullCap) {
  extern __shared__ __align__(16) uint8_t dyn[];
  __shared__ CandShared cs;
  __shared__ SelectShared ss;
  __shared__ BlockScratch scratch;
  __shared__ specVerify::dev::ChainStage chainStage;
  const int row = blockIdx.x, V = a.vocab;
  const RowParams rp = rowParams(a, row);
  const T* x = static_cast<const T*>(a.logits) + static_cast<size_t>(row) * V;
  uint32_t* keys = reinterpret_cast<uint32_t*>(dyn);  // [V]
  kernel::pdl::trigger();
  stageChainInputs(a, row, chainStage);
  cpAsyncCommit();
  uint64_t local = 0;
  constexpr int kPer = kSmallVocabMax / kThreads;  // all loads issued before any is used
  float raw[kPer];
  const bool vec = loadEntries<kSmallVocabMax>(x, V, raw);
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = entryIndex(r, vec);
    if (i < V) {
      const float s = scaleLogit(raw[r], rp.invT, rp.greedy);
      const uint32_t key = orderKey(s);
      keys[i] = key;
      local = umax64(local, (poisonsRow(s) ? (1ull << 32) : 0ull) | key);
    }
  }
  const uint64_t red = blockMaxU64(local, scratch);  // also publishes keys[]
  if ((red >> 32) != 0 || static_cast<uint32_t>(red) == kMinusInfKey) {
    emitUniform(a, row);
    return;
  }
  const int kept = rp.k;
  if (kept <= kMaxCandidateTopK) {
    selectTopCandidates([&](int i) { return composite(keys[i], static_cast<uint32_t>(i)); }, V,
                        kept, cs.cand, ss, scratch);
    const int cut = finalizeSorted(cs.cand, kept, rp, a.mode, cs.aux, cs.prob, scratch);
    cpAsyncWait<0>();
    emitCandidates(a, row, cs.cand, cut, cs, chainStage);
    return;
  }
  // Full sort of the row (top-k off or k > 512); fullCap = pow2 >= V was provisioned.
  uint64_t* sorted = reinterpret_cast<uint64_t*>(dyn + align8(static_cast<size_t>(V) * 4));
  uint64_t* mass = sorted + fullCap;
  float* prob = reinterpret_cast<float*>(mass + V);
  for (int i = threadIdx.x; i < fullCap; i += kThreads) {
    sorted[i] = i < V ? composite(keys[i], static_cast<uint32_t>(i)) : 0;
  }
  bitonicSort(sorted, fullCap, true);  // starts with a barrier: keys[] reads are done after it
  const int cut = finalizeSorted(sorted, kept, rp, a.mode, mass, prob, scratch);
  float* byIndex = reinterpret_cast<float*>(keys);
  for (int i = threadIdx.x; i < V; i += kThreads) byIndex[i] = 0.0f;
  __syncthreads();
  for (int j = threadIdx.x; j < cut; j += kThreads) byIndex[compositeIndex(sorted[j])] = prob[j];
  __syncthreads();
  if (a.probs) {
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) out[i] = byIndex[i];
  }
  if (a.verifyRows) {
    cpAsyncWait<0>();  // the chain inputs are not used (a dense row); see emitUniform
    if (threadIdx.x == 0) {
      a.verifyRows[row].status = kDense;
      a.verifyRows[row].count = cut;
    }
  }
  if (a.tokens) {
    const int token =
        fullRowSample([&](int i) { return byIndex[i]; }, V, rowUniform(a, row), scratch);
    if (threadIdx.x == 0) a.tokens[row] = token;
  }
}

// ---------------------------------------------------------------------------------------------
// General path, candidate mode.

__device__ __forceinline__ bool candidateRow(const RowsArgs& a, const RowParams& rp) {
  return a.plan.anyCandidate && rp.k <= a.plan.kcap;
}
// The candidate slots and headers of the chunk records (sampling_layout.h).
__device__ __forceinline__ uint64_t* recordSlots(const RowsArgs& a) {
  return static_cast<uint64_t*>(a.workspace);
}
__device__ __forceinline__ uint64_t* recordHeaders(const RowsArgs& a) {
  return static_cast<uint64_t*>(a.workspace) + recordHeadersOffset(a.plan, a.rows);
}

// ---------------------------------------------------------------------------------------------
// General path, candidate mode: the chunk stage (chunkFastKernel).
//
// Persistent CTAs (as many as are resident at once) walk the (row, chunk) items row-major, each
// a contiguous run, so a CTA sees consecutive chunks of a row (at 256 rows of 19 chunks: one row
// per CTA). Per "segment" (the items of one row one CTA walks) the CTA keeps the segment's top-k
// so far in shared memory (`best`, sorted descending) and writes it as the segment's record
// (sampling_layout.h) at its last item; finalFastKernel merges a row's records. When every CTA
// walks whole rows (RowsArgs::chunkFinalizesRows), the CTA finalizes each row itself from
// `best` instead (chunkFinalizeRow) and there is no record and no final kernel. How:
//  * each CTA issues the next item's loads as soon as the current item's survivors are stored,
//    so its next chunk's bytes are in flight while it merges (a CTA that loads, then computes
//    with nothing in flight, leaves DRAM idle for most of its time);
//  * the entries stay in registers (raw[]; the scaled values are recomputed where needed, which
//    keeps the f32 instances free of spills at 64 registers): the thread maximum, the threshold
//    and the survivors come from registers, in the float domain (one compare per entry; the
//    order keys of floats are monotone, -0 == +0 in both);
//  * the segment's first item takes a threshold from the item itself (kernels/
//    sampling_chunk_prefilter.h: the kc-th largest of each warp's largest thread maxima, ~55
//    survivors of 8192 for k = 50); every later item takes the running threshold, the k-th
//    largest key of `best`, known before its loads land: an entry below it cannot enter the
//    segment's top-k. Survivors of item j of a segment: ~k / j (i.i.d. entries), so after the
//    first item a chunk costs its compares and a short merge, not a threshold search and a sort
//    (a search and a sort per item make the stage issue-bound, mostly waiting at barriers);
//  * the survivors are merged into `best` by rank (each one's rank = the entries of `best` above
//    it, a binary search, + the survivors above it) in merge groups: after a segment's items 2,
//    4, 8, 16, then every 16, and its last (prefilter::mergeAfter), 2 block barriers each. The
//    items of a group run with no barrier between them, filtered by the threshold of the last
//    merge (the first item's until the first merge): ~k survivors per group for i.i.d. entries.
//    Merging after every item would put 2 block barriers on every item, and barriers dominate
//    the stage's stalls;
//  * the rare group with > 512 survivors (ties; every entry -inf) merges each of its chunks'
//    top-kc instead, from selectTopCandidates (radix select) over the chunk's keys staged in
//    shared memory.
template <int R>
struct alignas(16) ChunkFastShared {
  uint32_t
      uni[kThreads];   // the union U: warp w's jp largest thread maxima (keys) at [w jp, w jp + jp)
  uint32_t theta;      // a segment's first threshold (the kc-th largest of U)
  int count[2];        // the group's survivors (may exceed kMaxCandidateTopK: fallback), by phase
  uint32_t poison[2];  // the group's items' poison flags (bit item - groupFirst), by phase
  SelectShared ss;     // the fallback's select; ss.tmp holds the survivors' composites
  BlockScratch scratch;
  uint64_t cand[kMaxCandidateTopK];     // the fallback's sorted candidates
  uint64_t best[2][kMaxCandidateTopK];  // the segment's top-k so far, descending; by phase
  specVerify::dev::ChainStage
      chain[2];  // a finalized verification row's chain inputs, by row parity
};

// Whether thread t's value of the union uni[0, nu) (t < nu, nu a multiple of 4, 1 <= kc <= nu;
// kernels/sampling_chunk_prefilter.h) is its kc-th largest: it counts the values above and at its
// own. Exactly one distinct value qualifies; its holders write it as the threshold (equal values).
__device__ __forceinline__ bool isKthLargestOfUnion(const uint32_t* uni, int nu, int kc, int t) {
  const uint32_t v = uni[t];
  const uint4* u4 = reinterpret_cast<const uint4*>(uni);
  int gt = 0, ge = 0;
  for (int i = 0; i < nu / 4; ++i) {
    const uint4 w = u4[i];
    gt += (w.x > v ? 1 : 0) + (w.y > v ? 1 : 0) + (w.z > v ? 1 : 0) + (w.w > v ? 1 : 0);
    ge += (w.x >= v ? 1 : 0) + (w.y >= v ? 1 : 0) + (w.z >= v ? 1 : 0) + (w.w >= v ? 1 : 0);
  }
  return prefilter::isKthLargest(gt, ge, kc);
}

// max(a, b) with NaN propagation (PTX max.NaN, sm_80+): NaN if either is NaN; fmaxf ignores it.
__device__ __forceinline__ float fmaxNan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// A chunk of a row for the fallback (chunkFastFallback): entries [start, start + len) of the
// row, scaled with the row's parameters.
struct ChunkItem {
  int start, len;
  RowParams rp;
};

// Copies a chunk's len entries at x (16-byte aligned) into stage[0, 4 R kThreads) with cp.async,
// this thread's pieces only: piece r is entries 4 (t + r kThreads) + 0..3 (the vec layout of
// loadChunk). Absent entries read 0.
template <int R>
__device__ __forceinline__ void copyChunkAsync(const float* x, int len, float* stage) {
  const int t = threadIdx.x;
  if (len >= 4 * R * kThreads) {  // a whole chunk: constant offsets from one address (the
                                  // general case's clamps and 64-bit sums cost ~90 instructions
                                  // an item)
    const float* src = x + 4 * t;
    float* dst = stage + 4 * t;
#pragma unroll
    for (int r = 0; r < R; ++r) cpAsync16(dst + r * 4 * kThreads, src + r * 4 * kThreads, 16);
    return;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int b = 4 * (t + r * kThreads);
    const int bytes = 4 * max(0, min(4, len - b));
    cpAsync16(stage + b, bytes > 0 ? x + b : x, bytes);
  }
}

// Issues the loads of a chunk's len entries at x into raw[] (4 R slots, prefilter::slotOffset
// layout) and uses none of them, so they stay in flight while the previous chunk is processed.
// Absent entries (slot offset >= len) read 0. Returns the layout (block-uniform).
//   f32: raw[j] = the bits of slot j;
//   f16: vec (8-byte loads): raw[j / 2] holds slots j & ~1 (low half) and j | 1 (high half);
//        scalar: raw[j] holds slot j in its low half.
template <int R>
__device__ __forceinline__ bool loadChunk(const float* x, int len, uint32_t (&raw)[4 * R]) {
  const int t = threadIdx.x;
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int b = 4 * (t + r * kThreads);
      float4 w;
      if (b + 4 <= len) {
        w = __ldg(reinterpret_cast<const float4*>(x + b));
      } else {
        w.x = b < len ? __ldg(x + b) : 0.0f;
        w.y = b + 1 < len ? __ldg(x + b + 1) : 0.0f;
        w.z = b + 2 < len ? __ldg(x + b + 2) : 0.0f;
        w.w = b + 3 < len ? __ldg(x + b + 3) : 0.0f;
      }
      raw[4 * r] = __float_as_uint(w.x);
      raw[4 * r + 1] = __float_as_uint(w.y);
      raw[4 * r + 2] = __float_as_uint(w.z);
      raw[4 * r + 3] = __float_as_uint(w.w);
    }
    return true;
  }
#pragma unroll
  for (int j = 0; j < 4 * R; ++j) {
    const int i = t + j * kThreads;
    raw[j] = i < len ? __float_as_uint(__ldg(x + i)) : 0u;
  }
  return false;
}
template <int R>
__device__ __forceinline__ bool loadChunk(const fp16* x, int len, uint32_t (&raw)[4 * R]) {
  const unsigned short* h = reinterpret_cast<const unsigned short*>(x);
  const int t = threadIdx.x;
  if ((reinterpret_cast<uintptr_t>(x) & 7) == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int b = 4 * (t + r * kThreads);
      uint2 w;
      if (b + 4 <= len) {
        w = __ldg(reinterpret_cast<const uint2*>(h + b));
      } else {  // the tail of a row's last chunk: these combine (wait for) their loads
        const uint32_t h0 = b < len ? __ldg(h + b) : 0u, h1 = b + 1 < len ? __ldg(h + b + 1) : 0u;
        const uint32_t h2 = b + 2 < len ? __ldg(h + b + 2) : 0u,
                       h3 = b + 3 < len ? __ldg(h + b + 3) : 0u;
        w.x = h0 | (h1 << 16);
        w.y = h2 | (h3 << 16);
      }
      raw[2 * r] = w.x;
      raw[2 * r + 1] = w.y;
    }
    return true;
  }
#pragma unroll
  for (int j = 0; j < 4 * R; ++j) {
    const int i = t + j * kThreads;
    raw[j] = i < len ? static_cast<uint32_t>(__ldg(h + i)) : 0u;
  }
  return false;
}

// The logit in slot j (j a constant after unrolling) of raw[] as loadChunk left it.
template <typename T, int R>
__device__ __forceinline__ float slotLogit(const uint32_t (&raw)[4 * R], int j, bool vec) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(raw[j]);
  } else {
    // fp16 -> fp32 is exact (as to_float); a NaN's payload may differ, but a NaN poisons the row
    // whatever its bits.
    const uint32_t w = vec ? (raw[j >> 1] >> (16 * (j & 1))) : raw[j];
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(w & 0xffffu)));
    return f;
  }
}

// Writes the jp (1 <= jp <= 32, warp-uniform) largest of the warp's 32 values to dst[0, jp),
// descending (a value held by several lanes counts once per lane). The rounds mark a lane that
// dropped out with 0, the smallest value, so while fewer than 32 values were taken the maximum of
// the rest is still the next largest: exact for any values, 0 included. All 32 lanes call.
__device__ __forceinline__ void warpTopValues(uint32_t v, int jp, uint32_t* dst) {
  const int lane = laneId();
  if (jp <= 8) {  // jp rounds: the warp maximum, then its lowest holder drops out
    for (int r = 0; r < jp; ++r) {
      const uint32_t mx = __reduce_max_sync(kFull, v);
      if (lane == 0) dst[r] = mx;
      const unsigned holders = __ballot_sync(kFull, v == mx);
      if (lane == __ffs(holders) - 1) v = 0;
    }
    return;
  }
  v = warpSortAscending(v);
  if (lane >= 32 - jp) dst[31 - lane] = v;
}

// Fallback of one item (> kMaxCandidateTopK survivors: many ties, or a row of -inf): the radix
// select (selectTopCandidates) over the chunk's order keys, staged in shared memory (re-read
// from global memory, L2 after the first read: rare, and it keeps s[] out of the registers live
// here). Leaves the chunk's top-kc composites in sh.cand[0, kc), descending. keys: [it.len]
// shared words.
// Called by every thread; starts after a barrier that ends every read of sh.ss.tmp, keys and
// sh.cand of earlier items, and ends with one (selectTopCandidates').
template <typename T, int R>
__device__ __noinline__ void chunkFastFallback(const T* x, const ChunkItem& it, int kc,
                                               uint32_t* keys, ChunkFastShared<R>& sh) {
  for (int i = threadIdx.x; i < it.len; i += kThreads) {
    keys[i] = orderKey(scaleLogit(loadLogit(x, i), it.rp.invT, it.rp.greedy));
  }
  __syncthreads();
  const uint32_t start = static_cast<uint32_t>(it.start);
  selectTopCandidates([&](int i) { return composite(keys[i], start + static_cast<uint32_t>(i)); },
                      it.len, kc, sh.cand, sh.ss, sh.scratch);
}

// Entries of a[0, n) (distinct, descending) greater than v (not in a): a binary search.
__device__ __forceinline__ int countGreaterSorted(const uint64_t* a, int n, uint64_t v) {
  int lo = 0, hi = n;  // a[0, lo) > v, a[hi, n) < v
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] > v) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}
// Entries of b[0, n) greater than v (any order; b is 16-byte aligned).
__device__ __forceinline__ int countGreater(const uint64_t* b, int n, uint64_t v) {
  const ulonglong2* pairs = reinterpret_cast<const ulonglong2*>(b);
  int r = 0;
#pragma unroll 2
  for (int p = 0; p < (n >> 1); ++p) {
    const ulonglong2 w = pairs[p];
    r += (w.x > v ? 1 : 0) + (w.y > v ? 1 : 0);
  }
  if (n & 1) r += b[n - 1] > v ? 1 : 0;
  return r;
}

// dst[0, min(k, na + nb)) = the k largest of a[0, na) (distinct, descending) and b[0, nb)
// (distinct, any order, none in a), descending: each value's rank is the values above it in
// both lists. Every thread calls; no barrier (the caller's next one publishes dst).
__device__ __forceinline__ void mergeTopK(const uint64_t* a, int na, const uint64_t* b, int nb,
                                          int k, uint64_t* dst) {
  for (int i = threadIdx.x; i < na + nb; i += kThreads) {
    const bool inA = i < na;
    const uint64_t v = inA ? a[i] : b[i - na];
    const int rank = (inA ? i : countGreaterSorted(a, na, v)) + countGreater(b, nb, v);
    if (rank < k) dst[rank] = v;
  }
}

// A merge group's survivors overflowed ss.tmp (> kMaxCandidateTopK: ties, rows of -inf): merges
// the exact top-kc of each of the group's chunks c0..c1 of a row (chunkFastFallback) into the
// segment's top-k, sh.best[bp][0, nBest), one chunk at a time. Returns the new (nBest, bp).
// Called by every thread after a barrier that ends the group's appends; ends with a barrier.
// Not inlined: rare, and its live values would crowd the registers that keep raw[] in flight.
template <typename T, int R>
__device__ __noinline__ int2 chunkFastGroupFallback(const T* rowLogits, int vocab, int chunkLen,
                                                    RowParams rp, int c0, int c1, int nBest, int bp,
                                                    uint32_t* keys, ChunkFastShared<R>& sh) {
  for (int c = c0; c <= c1; ++c) {
    ChunkItem gi;
    gi.start = c * chunkLen;
    gi.len = min(chunkLen, vocab - gi.start);
    gi.rp = rp;
    const int gkc = min(rp.k, gi.len);
    chunkFastFallback<T, R>(rowLogits + gi.start, gi, gkc, keys, sh);
    mergeTopK(sh.best[bp], nBest, sh.cand, gkc, rp.k, sh.best[bp ^ 1]);
    nBest = min(rp.k, nBest + gkc);
    bp ^= 1;
    __syncthreads();  // best[bp] is complete; cand is read
  }
  return make_int2(nBest, bp);
}

// finalFastKernel's work for a row of one record (kernels/sampling_layout.h), done by the chunk
// CTA that walked the whole row (RowsArgs::chunkFinalizesRows): best[0, nBest) is the row's
// top-k, descending; poisoned: a chunk of the row was. Ends with a barrier (cs is read).
// stage: the row's chain inputs, landed for warp 0 (a verification's row).
__device__ __forceinline__ void chunkFinalizeRow(const RowsArgs& a, int row, const RowParams& rp,
                                                 const uint64_t* best, int nBest, bool poisoned,
                                                 CandShared& cs, BlockScratch& scratch,
                                                 const specVerify::dev::ChainStage& stage) {
  if (poisoned || compositeKey(best[0]) == kMinusInfKey) {  // block-uniform
    emitUniform(a, row);
  } else {
    const int cut = finalizeSorted(best, nBest, rp, a.mode, cs.aux, cs.prob, scratch);
    emitCandidates(a, row, best, cut, cs, stage);
  }
  __syncthreads();
}

// Whether chunkFastKernel<*, R, *> can finalize rows itself (RowsArgs::chunkFinalizesRows):
// a consumed chunk stage (or the register path's fallback keys) must hold a CandShared.
constexpr bool chunkCanFinalize(int R) {
  return sizeof(CandShared) <= size_t{4} * R * kThreads * sizeof(uint32_t);
}

// kAsync (f32 rows whose chunks all start 16-byte aligned, chunkAsyncOk): the chunks go through
// a ring of two stages in dynamic shared memory (2 kCap floats), filled by cp.async: each item's
// copies are issued before the previous item is computed, so a chunk's bytes are in flight while
// the one before is filtered and merged. Without it the loads go to registers (raw[]) and can
// only be issued once the previous item's entries are consumed: nothing of the CTA is in flight
// while it computes. Every thread copies the 16-byte pieces it reads itself (the register
// layout), so the stages need no barrier; the fallback stages its keys in the consumed stage.
template <typename T, int R, bool kAsync>
__global__ void __launch_bounds__(kThreads, 2) chunkFastKernel(RowsArgs a) {
  constexpr int kPer = 4 * R;            // entries per thread
  constexpr int kCap = kPer * kThreads;  // entries per chunk, at most (>= plan.chunkLen)
  constexpr bool kFinalizes = chunkCanFinalize(R);
  static_assert(!kAsync || std::is_same_v<T, float>, "the cp.async ring serves f32 rows");
  __shared__ ChunkFastShared<R> sh;
  __shared__ uint32_t keysStatic[kAsync ? 1 : kCap];  // the fallback's keys (kAsync: a ring stage)
  extern __shared__ __align__(16) uint8_t dyn[];      // kAsync: [2][kCap] f32, the ring
  // A programmatic dependent of the stream's previous kernel (the lm_head, or the last kernel of
  // the previous sampling call): the CTAs become resident during its tail and wait here before
  // touching memory. Then finalFastKernel / verifyKernel may be scheduled as CTAs of this grid
  // finish; as this grid has passed its wait by then, they may read early what kernels before it
  // wrote.
  kernel::pdl::enter();
  const int chunks = a.plan.chunks, chunkLen = a.plan.chunkLen;
  const int items = a.rows * chunks;
  const int begin = blockIdx.x * a.chunkItemsPerCta, end = min(items, begin + a.chunkItemsPerCta);
  const int cap = recordCap(a.plan);
  const T* logits = static_cast<const T*>(a.logits);
  const int t = threadIdx.x, lane = laneId(), warp = warpId();
  if (t < 2) {  // published by the first item's barriers
    sh.count[t] = 0;
    sh.poison[t] = 0;
  }
  if (begin >= end) return;  // block-uniform

  // raw[] holds the loads of the current item: in flight until decoded, or (kAsync) read from its
  // stage once its copies have landed. Only the loads and their layout are carried from one item
  // to the next (few registers: 2 CTAs per SM leave 64 a thread, and raw[] must stay in flight).
  uint32_t raw[kPer];
  bool vec = kAsync;
  float* ring = reinterpret_cast<float*>(dyn);
  auto stageOf = [&](int item) { return ring + ((item - begin) & 1) * kCap; };
  // The loads of item `item` = chunk c of row r: into raw[], or (kAsync) cp.async copies into its
  // stage, one commit group per item (empty for an inactive row's) so that wait_group counts items.
  // A row this CTA finalizes gets its chain inputs (a verification's) copied with its first chunk:
  // in that item's group (kAsync), or in a group of their own waited for before the finalize.
  auto issue = [&](int item, int r, int c, bool active) {
    const int start = c * chunkLen;
    const T* x = logits + static_cast<size_t>(r) * a.vocab + start;
    const int len = min(chunkLen, a.vocab - start);
    const bool stageChain = kFinalizes && active && c == 0 && a.chunkFinalizesRows;
    if (stageChain) stageChainInputs(a, r, sh.chain[r & 1]);
    if constexpr (kAsync) {
      if (active) copyChunkAsync<R>(reinterpret_cast<const float*>(x), len, stageOf(item));
      cpAsyncCommit();
    } else {
      if (stageChain) cpAsyncCommit();
      if (active) vec = loadChunk<R>(x, len, raw);
    }
  };

  // One segment per trip: the chunks [c0, c1) of row `row`, items [seg_first, seg_first + c1 - c0).
  // The row's parameters are the segment's (computed once: the item loop below only walks
  // chunks). The segment's top-k as of its last merge is sh.best[bp][0, nBest), and its
  // threshold thetaRun (block-uniform; +inf exactly when the segment is poisoned: it is
  // uniform, and no finite key gives +inf). The items between two merges form a group: their
  // survivors pile up in ss.tmp (count sh.count[gp]) and their poison flags in sh.poison[gp]
  // (bit = item - groupFirst), and are merged with no barrier between the items (the stage's
  // barriers were most of its stalls).
  int row = begin / chunks, c0 = begin - row * chunks, seg_first = begin;
  RowParams rp = rowParams(a, row);
  bool active = candidateRow(a, rp);
  issue(begin, row, c0, active);
  int bp = 0, gp = 0;
  for (;;) {
    const int c1 = min(chunks, c0 + (end - seg_first));
    // The loads of the item after chunk c of this segment: the next chunk, the next segment's
    // first, or (kAsync) an empty group, so that wait_group<1> waits for the last item's copies.
    auto prefetchNext = [&](int c) {
      const int item = seg_first + (c - c0);
      if (c + 1 < c1) {
        issue(item + 1, row, c + 1, active);
      } else if (item + 1 < end) {
        issue(item + 1, row + 1, 0, candidateRow(a, rowParams(a, row + 1)));
      } else if constexpr (kAsync) {
        cpAsyncCommit();
      }
    };
    if (!active) {  // block-uniform (the row's parameters): fullRowKernel's row; nothing loaded
      for (int c = c0; c < c1; ++c) prefetchNext(c);
    } else {
      const T* rowLogits = logits + static_cast<size_t>(row) * a.vocab;
      int nBest = 0, groupFirst = seg_first;
      int nextMerge = prefilter::nextMergeAfter(0);  // the item count (done) of the next merge
      float thetaRun = -INFINITY;
      for (int c = c0; c < c1; ++c) {  // block-uniform trip count
        const int item = seg_first + (c - c0);
        const int done = c - c0 + 1;  // the segment's items so far, this one included
        // kAsync: the next item's copies go out first; its stage's last reader was this thread
        // (item - 1), or the block before the barrier that ended the last fallback.
        if constexpr (kAsync) {
          prefetchNext(c);
          cpAsyncWait<1>();  // the item's copies have landed (the next item's may not)
          const float4* st = reinterpret_cast<const float4*>(stageOf(item));
#pragma unroll
          for (int r = 0; r < R; ++r) {  // this thread's pieces of the item, in the register layout
            const float4 w = st[t + r * kThreads];
            raw[4 * r] = __float_as_uint(w.x);
            raw[4 * r + 1] = __float_as_uint(w.y);
            raw[4 * r + 2] = __float_as_uint(w.z);
            raw[4 * r + 3] = __float_as_uint(w.w);
          }
        }
        const int start = c * chunkLen;
        const int len = min(chunkLen, a.vocab - start);
        // Scaled logit of register slot j (the same fmulRn as scaleLogit: greedy rows have
        // invT = 1 exactly); absent slots of a short chunk read 0 (never poison) and count as NaN
        // (never a survivor, ignored by fmaxf). Recomputed where needed instead of kept in
        // s[kPer]: registers are what keeps raw[] in flight.
        uint32_t present = ~0u;  // slot j holds an entry of the chunk
        if (len < kCap) {
          present = 0;
#pragma unroll
          for (int j = 0; j < kPer; ++j)
            present |= (prefilter::slotOffset(j, t, vec) < len ? 1u : 0u) << j;
        }
        auto product = [&](int j) { return fmulRn(slotLogit<T, R>(raw, j, vec), rp.invT); };
        auto scaled = [&](int j) {
          return (present >> j) & 1u ? product(j) : __uint_as_float(0x7fffffffu);
        };
        const bool segLast = c + 1 == c1;
        const bool merge = segLast || done == nextMerge;
        float thetaF = thetaRun;
        bool bad = false;
        uint32_t mask = 0;  // slots with scaled logit >= thetaF: the survivors
        if (done == 1) {    // a segment starts: its threshold from this item's thread maxima
          const int kc = min(rp.k, len);
          float tmax = -INFINITY;
#pragma unroll
          for (int j = 0; j < kPer; ++j) {
            bad |= poisonsRow(product(j));  // absent slots read 0: never poison
            tmax = fmaxf(tmax, scaled(j));
          }
          const int jp = prefilter::unionPerWarp(kc);
          const int nu = kWarps * jp;  // |U|, a multiple of 16, >= kc
          warpTopValues(orderKey(tmax), jp, sh.uni + warp * jp);
          const bool poisoned = __syncthreads_or(bad);  // B0: U is complete
          if (!poisoned && t < nu && isKthLargestOfUnion(sh.uni, nu, kc, t)) sh.theta = sh.uni[t];
          __syncthreads();  // B0': theta is set; U is read
          // Survivors: scaled logit >= keyValue(theta) <=> order key >= theta (monotone; NaN:
          // false). A poisoned row needs no candidates (finalFastKernel makes it uniform).
          thetaF = poisoned ? INFINITY : keyValue(sh.theta);
          // At least kc entries of this chunk are >= thetaF: with kc = k, no entry below it can
          // enter the segment's top-k, so it filters the group's next items too.
          thetaRun = poisoned || kc == rp.k ? thetaF : -INFINITY;
#pragma unroll
          for (int j = 0; j < kPer; ++j) mask |= (scaled(j) >= thetaF ? 1u : 0u) << j;
        } else {  // the running threshold: a few survivors per chunk, most threads have none
          // One max an entry decides both tests. For invT > 0, rounding x invT is monotone in
          // x, so the thread's largest scaled logit is top = fl(m invT), m the largest logit
          // (max.NaN: NaN if one is): some scaled logit is NaN or +inf exactly when top is (the
          // row is poisoned), and some is >= theta exactly when top is (the thread has
          // survivors). For invT = 0 (T = +inf) a scaled logit is NaN exactly when the logit is
          // not finite, which m = the largest |logit| shows the same way (m 0 = NaN; finite m
          // gives 0, as every finite entry does). Absent slots of a short chunk read 0: neutral
          // for both tests, except that top >= theta may then hold with no survivor, and the
          // exact mask below is empty.
          float m;
          if (rp.invT > 0.0f) {  // block-uniform
            m = -INFINITY;
#pragma unroll
            for (int j = 0; j < kPer; ++j) m = fmaxNan(m, slotLogit<T, R>(raw, j, vec));
          } else {
            m = 0.0f;
#pragma unroll
            for (int j = 0; j < kPer; ++j) m = fmaxNan(m, fabsf(slotLogit<T, R>(raw, j, vec)));
          }
          const float top = fmulRn(m, rp.invT);
          bad = poisonsRow(top);
          if (top >= thetaF) {  // the thread has survivors, or (short chunk) maybe none
            if (len == kCap) {  // a whole chunk: no absent slot to test
#pragma unroll
              for (int j = 0; j < kPer; ++j) mask |= (product(j) >= thetaF ? 1u : 0u) << j;
            } else {
#pragma unroll
              for (int j = 0; j < kPer; ++j) mask |= (scaled(j) >= thetaF ? 1u : 0u) << j;
            }
          }
        }
        if (__any_sync(kFull, bad) && lane == 0)
          atomicOr(&sh.poison[gp], 1u << (item - groupFirst));

        // Survivors appended to ss.tmp. kAsync: each thread with any takes its slots with one
        // shared atomic and re-reads its survivors' logits from the stage, so the work is per
        // survivor (a loop over the set bits of its mask); in registers, a slot must be a
        // constant after unrolling, and a warp with one survivor pays for all 16 slots.
        // Else one shared atomic per warp.
        if constexpr (kAsync) {
          if (mask != 0) {
            int pos = atomicAdd(&sh.count[gp], __popc(mask));
            const float* st = stageOf(item);
            const uint32_t first = static_cast<uint32_t>(start);
            for (uint32_t bits = mask; bits != 0; bits &= bits - 1) {
              const int off = prefilter::slotOffset(__ffs(bits) - 1, t, true);
              if (pos < kMaxCandidateTopK) {
                sh.ss.tmp[pos] = composite(orderKey(fmulRn(st[off], rp.invT)),
                                           first + static_cast<uint32_t>(off));
              }
              ++pos;
            }
          }
        } else if (__any_sync(kFull, mask != 0)) {
          const int n = __popc(mask);
          int incl = n;  // inclusive warp scan of the survivor counts
#pragma unroll
          for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(kFull, incl, o);
            if (lane >= o) incl += y;
          }
          int base = 0;
          if (lane == 31) base = atomicAdd(&sh.count[gp], incl);
          int pos = __shfl_sync(kFull, base, 31) + incl - n;
          if (mask != 0) {
            const uint32_t first = static_cast<uint32_t>(start);
#pragma unroll
            for (int j = 0; j < kPer; ++j) {
              if ((mask >> j) & 1u) {
                if (pos < kMaxCandidateTopK) {
                  sh.ss.tmp[pos] =
                      composite(orderKey(scaled(j)),
                                first + static_cast<uint32_t>(prefilter::slotOffset(j, t, vec)));
                }
                ++pos;
              }
            }
          }
        }
        // The next item's loads go out now (raw[] is consumed): they land while this item's
        // warps go on to the next item (or the merge below).
        if constexpr (!kAsync) prefetchNext(c);
        if (!merge) continue;  // block-uniform
        nextMerge = prefilter::nextMergeAfter(done);

        __syncthreads();  // B1: the group's survivors, their count and poison flags are complete
        const int m = sh.count[gp];
        const uint32_t poisonBits = sh.poison[gp];
        // The other group phase's words were last read before the previous B2; they are next
        // written after this merge's B2.
        if (t == 0) {
          sh.count[gp ^ 1] = 0;
          sh.poison[gp ^ 1] = 0;
        }
        const bool segPoisoned = thetaRun == INFINITY || poisonBits != 0;
        if (!segPoisoned) {  // block-uniform
          if (m <= kMaxCandidateTopK) {
            mergeTopK(sh.best[bp], nBest, sh.ss.tmp, m, rp.k, sh.best[bp ^ 1]);
            nBest = min(rp.k, nBest + m);
            bp ^= 1;
          } else {  // block-uniform: ss.tmp overflowed; each of the group's chunks' exact top-kc
            // The keys go to the consumed stage (kAsync: the next item's copies fill the other).
            uint32_t* keys = kAsync ? reinterpret_cast<uint32_t*>(stageOf(item)) : keysStatic;
            const int2 r = chunkFastGroupFallback<T, R>(
                rowLogits, a.vocab, chunkLen, rp, c - (item - groupFirst), c, nBest, bp, keys, sh);
            nBest = r.x;
            bp = r.y;
          }
        }
        __syncthreads();  // B2: best[bp] is the segment's top-k; ss.tmp, cand, best[bp ^ 1] are
                          // read
        const uint64_t* best = sh.best[bp];
        // The running threshold: an entry below the k-th largest kept key cannot enter the top-k.
        thetaRun = segPoisoned     ? INFINITY
                   : nBest >= rp.k ? keyValue(compositeKey(best[rp.k - 1]))
                                   : -INFINITY;
        if (segLast && a.chunkFinalizesRows) {  // block-uniform: the segment is the whole row
          // finalFastKernel's work for a row of one record, here: no record, no second launch.
          // CandShared goes in the consumed stage (or the fallback's keys), as those keys do.
          if constexpr (kFinalizes) {
            uint32_t* region = kAsync ? reinterpret_cast<uint32_t*>(stageOf(item)) : keysStatic;
            if constexpr (!kAsync)
              cpAsyncWait<0>();  // the chain inputs (kAsync: the row's first item's group)
            chunkFinalizeRow(a, row, rp, best, nBest, segPoisoned,
                             *reinterpret_cast<CandShared*>(region), sh.scratch, sh.chain[row & 1]);
          }
        } else if (segLast) {
          uint64_t* slots = recordSlots(a) + (static_cast<size_t>(row) * chunks + c0) * cap;
          for (int i = t; i < nBest; i += kThreads) slots[i] = best[i];
        }
        const int groupItems = item - groupFirst + 1;   // <= kMaxMergeGroup
        if (!a.chunkFinalizesRows && t < groupItems) {  // the records' headers, for finalFastKernel
          const int g = groupFirst + t;
          recordHeaders(a)[g] =
              encodeRecordHeader((poisonBits >> t) & 1u, c0, segLast && g == item ? nBest : 0);
        }
        gp ^= 1;
        groupFirst = item + 1;
      }
    }
    seg_first += c1 - c0;
    if (seg_first >= end) break;  // block-uniform
    ++row;
    c0 = 0;
    rp = rowParams(a, row);
    active = candidateRow(a, rp);
  }
}

// The final stage (after chunkFastKernel): one CTA per row merges the row's records (the
// row's top-k of their concatenated candidates: uniform if a chunk is poisoned or the row maximum
// is -inf), then finalizeSorted and emitCandidates as in the small-vocab candidate mode. The
// records are read in chunk order (index order within equal keys) into registers. A row one
// CTA walked whole has one record, already its top-k in order: nothing to merge (and when every
// row is such a row, e.g. verify's 256 rows of 19 chunks, the chunk CTAs finalize them and this
// kernel is not launched: RowsArgs::chunkFinalizesRows). Otherwise the candidates stay in
// registers (slot r of thread t = candidate t + r kThreads) and are filtered by the union
// threshold of kernels/sampling_chunk_prefilter.h rather than selectTopCandidates'
// min-over-warps one: merging 19 records of 50, the min-over-warps threshold keeps ~375 of 950
// (up to ~710, simulated), the union ~60 (at most ~80).
// Uniform rows are found from the same warp maxima (no separate block reduction). > 512
// survivors: the radix select (selectTopCandidates) over the staged records.
struct FinalFastShared {
  alignas(
      16) uint32_t uni[kThreads];  // the union U (keys); warp w's jp largest thread maxima first
  uint32_t theta;
  int count;
};

template <int kPer>
__global__ void __launch_bounds__(kThreads) finalFastKernel(RowsArgs a) {
  extern __shared__ __align__(16) uint8_t dyn[];  // [n] u64: the row's records, concatenated
  __shared__ CandShared cs;
  __shared__ SelectShared ss;  // the fallback's select; ss.tmp holds the survivors
  __shared__ BlockScratch scratch;
  __shared__ FinalFastShared fs;
  __shared__ specVerify::dev::ChainStage chainStage;
  const int row = blockIdx.x;
  const RowParams rp = rowParams(a, row);
  if (!candidateRow(a, rp)) return;  // block-uniform, before any barrier
  kernel::pdl::trigger();
  kernel::pdl::wait();  // launched as a dependent of the chunk stage: its records are visible after
                        // this
  stageChainInputs(a, row, chainStage);
  cpAsyncCommit();
  const int t = threadIdx.x, lane = laneId(), warp = warpId();
  const int chunks = a.plan.chunks;  // <= kThreads (planGeneral)
  // The row's records, concatenated in chunk order. The chunk stage's runs of per items cut the
  // row's chunks into segments: the first holds len0 chunks (to the first run boundary), the
  // others per (the last one fewer), and segment s's record holds min(k, its entries) candidates
  // from slot firstChunk(s) * cap on (sampling_layout.h). The layout follows from the plan, so
  // the candidate loads go out at once, next to the poison flags of the headers.
  const int kc = rp.k;  // <= n
  const int per = a.chunkItemsPerCta, chunkLen = a.plan.chunkLen;
  const int len0 = min(chunks, per - (row * chunks) % per);
  const int segments = len0 >= chunks ? 1 : 1 + (chunks - len0 + per - 1) / per;
  auto firstChunk = [&](int s) { return s == 0 ? 0 : len0 + (s - 1) * per; };
  auto recordCount = [&](int s) {  // min(k, the entries of segment s's chunks)
    const int c0 = firstChunk(s), c1 = min(chunks, c0 + (s == 0 ? len0 : per));
    const long long entries =
        ::min(static_cast<long long>(a.vocab), static_cast<long long>(c1) * chunkLen) -
        static_cast<long long>(c0) * chunkLen;
    return static_cast<int>(::min(static_cast<long long>(kc), entries));
  };
  const int count0 = recordCount(0);
  const int countMid = static_cast<int>(
      ::min(static_cast<long long>(kc), static_cast<long long>(per) * chunkLen));  // whole runs
  const int n =
      segments == 1 ? count0 : count0 + (segments - 2) * countMid + recordCount(segments - 1);
  const unsigned long long* slots = reinterpret_cast<const unsigned long long*>(recordSlots(a)) +
                                    static_cast<size_t>(row) * chunks * recordCap(a.plan);
  uint64_t v[kPer];  // candidate t + r kThreads, or 0 (absent: below every key of a non-NaN value)
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = t + r * kThreads;
    const int s = i < count0 ? 0 : min(segments - 1, 1 + (i - count0) / countMid);
    const int offset = s == 0 ? 0 : count0 + (s - 1) * countMid;
    v[r] =
        i < n
            ? __ldcg(slots + static_cast<size_t>(firstChunk(s)) * recordCap(a.plan) + (i - offset))
            : 0ull;
  }
  bool bad = false;
  const unsigned long long* headers =
      reinterpret_cast<const unsigned long long*>(recordHeaders(a)) +
      static_cast<size_t>(row) * chunks;
  for (int c = t; c < chunks; c += kThreads) bad |= headerPoisoned(__ldcg(headers + c));
  if (t == 0) fs.count = 0;
  if (__syncthreads_or(bad)) {  // B0 (block-uniform): the row is uniform
    emitUniform(a, row);
    return;
  }
  uint64_t* buf = reinterpret_cast<uint64_t*>(dyn);
  auto stage = [&] {  // buf[0, n) = the candidates; the caller's next barrier publishes them
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      if (t + r * kThreads < n) buf[t + r * kThreads] = v[r];
    }
  };
  const uint64_t* sorted = buf;  // the row's top-k first, descending
  if (segments == 1) {           // one CTA walked the whole row: its record is the top-k, sorted
    stage();
    __syncthreads();                             // B1: buf[0, n) is complete
    if (compositeKey(buf[0]) == kMinusInfKey) {  // block-uniform: the row is uniform
      emitUniform(a, row);
      return;
    }
  } else {
    sorted = cs.cand;
    uint32_t tmax = 0;
#pragma unroll
    for (int r = 0; r < kPer; ++r) tmax = max(tmax, compositeKey(v[r]));
    const int jp = prefilter::unionPerWarp(kc);
    const int nu = kWarps * jp;
    // A 0 maximum (a thread without candidates) stands for absent entries below every real key:
    // warpTopValues is exact for values >= 0, and the union argument holds (see the chunk stage).
    warpTopValues(tmax, jp, fs.uni + warp * jp);
    __syncthreads();  // B2: U is complete
    uint32_t rowMax = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) rowMax = max(rowMax, fs.uni[w * jp]);  // each warp's largest
    if (rowMax == kMinusInfKey) {  // block-uniform: the row is uniform
      emitUniform(a, row);
      return;
    }
    if (t < nu && isKthLargestOfUnion(fs.uni, nu, kc, t))
      fs.theta = fs.uni[t];  // theta = the kc-th largest of U
    __syncthreads();         // B3: theta is set
    const uint32_t theta = fs.theta;
    uint32_t mask = 0;
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      if (t + r * kThreads < n && compositeKey(v[r]) >= theta) mask |= 1u << r;
    }
    const int c = __popc(mask);
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += y;
    }
    int base = 0;
    if (lane == 31 && incl > 0) base = atomicAdd(&fs.count, incl);
    int pos = __shfl_sync(kFull, base, 31) + incl - c;
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      if ((mask >> r) & 1u) {
        if (pos < kMaxCandidateTopK) ss.tmp[pos] = v[r];
        ++pos;
      }
    }
    __syncthreads();  // B4: the survivors and their count are complete
    const int m = fs.count;
    if (m > kMaxCandidateTopK) {  // block-uniform: the radix select over the staged candidates
      stage();
      __syncthreads();
      selectTopCandidates([&](int i) { return buf[i]; }, n, kc, cs.cand, ss, scratch);
    } else {
      if (t < m) {  // rank sort of the m distinct composites into cs.cand (descending)
        const uint64_t x = ss.tmp[t];
        const ulonglong2* pairs = reinterpret_cast<const ulonglong2*>(ss.tmp);
        int r = 0;
#pragma unroll 2
        for (int p = 0; p < (m >> 1); ++p) {
          const ulonglong2 w = pairs[p];
          r += (w.x > x ? 1 : 0) + (w.y > x ? 1 : 0);
        }
        if (m & 1) r += ss.tmp[m - 1] > x ? 1 : 0;
        cs.cand[r] = x;
      }
      __syncthreads();  // B5: cs.cand[0, m) sorted, m >= kc
    }
  }
  const int cut = finalizeSorted(sorted, kc, rp, a.mode, cs.aux, cs.prob, scratch);
  cpAsyncWait<0>();
  emitCandidates(a, row, sorted, cut, cs, chainStage);
}

// ---------------------------------------------------------------------------------------------
// General path, full-row mode.

// One row's probabilities over a group (a CTA, or a cluster of CTAs with blockIdx.x = rank):
// the cut by fullrow::decideCut (kernels/sampling_fullrow_cut.h, the same template the CPU test
// runs on a model of the group), then each CTA writes its slice of the probabilities. The lead
// CTA (rank 0) writes the row's status, the split CDF's parameters, or draws the token itself.
template <typename T, bool kCluster>
__global__ void __launch_bounds__(kThreads) fullRowKernel(RowsArgs a) {
  __shared__ FullGroupShared gs;
  __shared__ BlockScratch scratch;
  const int row = kCluster ? blockIdx.y : blockIdx.x, V = a.vocab;
  const RowParams rp = rowParams(a, row);
  kernel::pdl::trigger();
  using Group = std::conditional_t<kCluster, ClusterGroup, CtaGroup>;
  Group g = [&] {
    if constexpr (kCluster) {
      return ClusterGroup(gs, scratch, V);
    } else {
      return CtaGroup{gs, scratch, 0, V};
    }
  }();
  // Split CDF (sampling_cdf_split.cu) draws the token: inactive unless this row reaches the draw.
  const bool splitCdf = a.plan.cdfSplit && a.tokens != nullptr;
  CdfRowParams* cdfParams =
      splitCdf
          ? reinterpret_cast<CdfRowParams*>(static_cast<uint8_t*>(a.workspace) + a.plan.cdfOffset) +
                row
          : nullptr;
  if (splitCdf && g.lead() && threadIdx.x == 0) cdfParams->active = 0;
  if (candidateRow(a, rp)) return;  // the same for every CTA of the row: before any cluster barrier
  const T* x = static_cast<const T*>(a.logits) + static_cast<size_t>(row) * V;
  auto scaled = [&](int i) { return scaleLogit(loadLogit(x, i), rp.invT, rp.greedy); };
  const fullrow::Cut cut = fullrow::decideCut(g, scaled, V, rp, a.mode);  // group-uniform
  if (cut.uniform) {
    if (g.lead()) emitUniform(a, row);
    g.finish();
    return;
  }
  auto probAt = [&](int i) { return fullrow::cutProb(cut, scaled(i), i); };
  if (a.probs) {
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = g.begin + threadIdx.x; i < g.end; i += kThreads) out[i] = probAt(i);
  }
  if (a.verifyRows && g.lead() && threadIdx.x == 0) {
    a.verifyRows[row].status = kDense;
    a.verifyRows[row].count = -1;
  }
  g.finish();      // after the last cluster collective; the draw below reads global memory only
  if (splitCdf) {  // probAt's inputs: the split CDF's kernels recompute fullRowProb from them
    if (g.lead() && threadIdx.x == 0) {
      *cdfParams =
          CdfRowParams{cut.cc,    cut.norm,    cut.last, rp.invT, cut.rowMax, rowUniform(a, row),
                       rp.greedy, cut.partial, 1,        {0, 0}};
    }
  } else if (a.tokens && g.lead()) {  // the lead CTA draws over the whole row (the others are done)
    const int token = fullRowSample(probAt, V, rowUniform(a, row), scratch);
    if (threadIdx.x == 0) a.tokens[row] = token;
  }
}

// SMs of the current device (cached per thread: a thread stays on one device here).
int deviceSmCount() {
  static thread_local const int sms = [] {
    int device = 0, n = 0;
    ES_CUDA_CHECK(cudaGetDevice(&device));
    ES_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return sms;
}

// The widest cluster a full-row row may be split over: 16 (non-portable) where the device can
// co-schedule such a cluster of this kernel, else 8 (portable), as argmax.cu does. Cached.
template <typename T>
int fullRowClusterRanks() {
  static thread_local const int ranks =
      kernel::cluster::widestSize(fullRowKernel<T, true>, kMaxClusterRanks, kThreads);
  return ranks;
}

template <typename T>
void launchFullRow(const RowsArgs& a, cudaStream_t stream) {
  if (!a.plan.fullrowSplit) {
    fullRowKernel<T, false><<<a.rows, kThreads, 0, stream>>>(a);
    ES_CUDA_CHECK_LAUNCH();
    return;
  }
  const int ranks = fullrowSplitRanks(a.rows, fullRowClusterRanks<T>(), deviceSmCount());
  kernel::cluster::launch(fullRowKernel<T, true>, dim3(ranks, a.rows, 1), dim3(kThreads), ranks,
                          stream, a);
}

// Prepares `kernel` for a launch with `bytes` of dynamic shared memory. Without the opt-in
// attribute a CTA gets at most 48 KB of static + dynamic shared memory together, so the
// attribute is needed whenever static + dynamic > 48 KB (not only when dynamic alone is); the
// opt-in ceiling (227 KB on sm_90) bounds static + dynamic. Checked here with a clear error
// instead of an invalid launch. The attribute is raised once per kernel and size (cached).
template <typename Kernel>
void allowDynamicSmem(Kernel kernel, size_t bytes, const char* name) {
  struct Entry {
    const void* func;
    int device;
    size_t staticBytes;
    int optin;
    size_t allowed;  // dynamic bytes currently allowed (default: 48 KB - static)
  };
  // One entry per kernel and device: smallVocab (2), final_fast (4), the chunk stage's ring (4).
  constexpr int kEntries = 16;
  static thread_local Entry cache[kEntries];
  static thread_local int used = 0;
  int device = 0;
  ES_CUDA_CHECK(cudaGetDevice(&device));
  const void* func = reinterpret_cast<const void*>(kernel);
  Entry* e = nullptr;
  for (int i = 0; i < used; ++i) {
    if (cache[i].func == func && cache[i].device == device) e = &cache[i];
  }
  if (e == nullptr) {
    cudaFuncAttributes attr{};
    ES_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    Entry fresh{func, device, attr.sharedSizeBytes, 0,
                static_cast<size_t>(attr.maxDynamicSharedSizeBytes)};
    ES_CUDA_CHECK(
        cudaDeviceGetAttribute(&fresh.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    e = &cache[used < kEntries ? used++ : kEntries - 1];
    *e = fresh;
  }
  ES_CHECK_ARG(e->staticBytes + bytes <= static_cast<size_t>(e->optin), "sample_rows",
               "shared memory", e->staticBytes + bytes, "bytes (", e->staticBytes, " static + ",
               bytes, " dynamic) for ", name, " must be <= ", e->optin,
               " (per-block opt-in limit)");
  if (bytes > e->allowed) {
    ES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
    e->allowed = bytes;
  }
}

// Whether chunkFastKernel streams the rows through its cp.async ring (kAsync): f32 rows whose
// every chunk starts 16-byte aligned (the logits, the row stride and the chunk length), as
// cp.async copies 16-byte pieces. Other rows (f16, misaligned f32) load into registers.
bool chunkAsyncOk(const RowsArgs& a) {
  return a.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0 &&
         a.vocab % 4 == 0 && a.plan.chunkLen % 4 == 0;
}

// chunkFastKernel's grid: the (row, chunk) items in contiguous runs of equal length, at most
// as many runs as CTAs are resident at once. Occupancy and SM count are cached per instance and
// device.
template <typename T, int R, bool kAsync>
void launchChunkFastR(RowsArgs& a, cudaStream_t stream) {
  const auto kernel = chunkFastKernel<T, R, kAsync>;
  const size_t ringBytes = kAsync ? size_t{2} * 4 * R * kThreads * sizeof(float) : 0;
  if (kAsync) allowDynamicSmem(kernel, ringBytes, "chunk_fast_kernel");
  static thread_local int cachedDevice = -1, resident = 0;
  int device = 0;
  ES_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cachedDevice) {
    int perSm = 0, sms = 0;
    ES_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, ringBytes));
    ES_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    resident = std::max(1, perSm) * std::max(1, sms);
    cachedDevice = device;
  }
  const int64_t items = static_cast<int64_t>(a.rows) * a.plan.chunks;
  ES_CHECK_ARG(items <= INT32_MAX, "sample_rows", "rows", a.rows, "times chunks must fit in int32");
  const int64_t perCta = (items + resident - 1) / resident;
  a.chunkItemsPerCta = static_cast<int32_t>(perCta);
  a.chunkFinalizesRows = chunkCanFinalize(R) && perCta % a.plan.chunks == 0;
  const int grid = static_cast<int>((items + perCta - 1) / perCta);
  kernel::pdl::launch(kernel, dim3(grid), dim3(kThreads), ringBytes, stream, a);
}

template <typename T, int R>
void launchChunkFastR(RowsArgs& a, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    if (chunkAsyncOk(a)) {
      launchChunkFastR<T, R, true>(a, stream);
      return;
    }
  }
  launchChunkFastR<T, R, false>(a, stream);
}

// Instantiates chunkFastKernel for the plan's chunk length: R groups of 4 entries per thread.
// Sets a.chunkItemsPerCta.
template <typename T>
void launchChunkFast(RowsArgs& a, cudaStream_t stream) {
  switch (prefilter::groupsFor(a.plan.chunkLen)) {
    case 1:
      launchChunkFastR<T, 1>(a, stream);
      break;
    case 2:
      launchChunkFastR<T, 2>(a, stream);
      break;
    case 3:
      launchChunkFastR<T, 3>(a, stream);
      break;
    default:
      launchChunkFastR<T, 4>(a, stream);
      break;
  }
}

// finalFastKernel with enough register slots per thread for the plan's largest merge
// (bytes / 8 = chunks * min(kcap, chunkLen) <= kMaxFinalCandidates candidates).
template <int kPer>
void launchFinalFastN(const RowsArgs& a, size_t bytes, cudaStream_t stream) {
  allowDynamicSmem(finalFastKernel<kPer>, bytes, "final_fast_kernel");
  kernel::pdl::launch(finalFastKernel<kPer>, dim3(a.rows), dim3(kThreads), bytes, stream, a);
}
void launchFinalFast(const RowsArgs& a, size_t bytes, cudaStream_t stream) {
  const size_t n = bytes / 8;
  static_assert(kMaxFinalCandidates == 16 * kThreads,
                "final_fast_kernel instantiates 2, 4, 8, 16 slots");
  if (n <= 2 * kThreads) {
    launchFinalFastN<2>(a, bytes, stream);
  } else if (n <= 4 * kThreads) {
    launchFinalFastN<4>(a, bytes, stream);
  } else if (n <= 8 * kThreads) {
    launchFinalFastN<8>(a, bytes, stream);
  } else {
    launchFinalFastN<16>(a, bytes, stream);
  }
}

template <typename T>
void launchTyped(const RowsArgs& a, cudaStream_t stream) {
  if (a.smallVocab) {
    const RowParams scalar = makeRowParams(1.0f, a.topK, 1.0f, a.vocab);
    const bool fullPossible = a.topKs != nullptr || scalar.k > kMaxCandidateTopK;
    int cap = 1;
    while (cap < a.vocab) cap <<= 1;
    const size_t bytes =
        align8(static_cast<size_t>(a.vocab) * 4) +
        (fullPossible ? static_cast<size_t>(cap) * 8 + static_cast<size_t>(a.vocab) * 12 : 0);
    allowDynamicSmem(smallVocabKernel<T>, bytes, "small_vocab_kernel");
    smallVocabKernel<T><<<a.rows, kThreads, bytes, stream>>>(a, fullPossible ? cap : 0);
    ES_CUDA_CHECK_LAUNCH();
    return;
  }
  if (a.plan.anyCandidate) {
    RowsArgs c = a;
    launchChunkFast<T>(c, stream);
    if (!c.chunkFinalizesRows) {
      const size_t bytes =
          static_cast<size_t>(a.plan.chunks) * std::min(a.plan.kcap, a.plan.chunkLen) * 8;
      launchFinalFast(c, bytes, stream);
    }
  }
  if (a.plan.anyFull || !a.plan.anyCandidate) {
    launchFullRow<T>(a, stream);
    if (a.plan.cdfSplit && a.tokens != nullptr) launchCdfSplit(a, stream);
  }
}

}  // namespace

void launchRows(const RowsArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  RowsArgs a = args;
  a.scalarOnly = a.temperatures == nullptr && a.topKs == nullptr && a.topPs == nullptr;
  a.scalarParams = makeRowParams(a.temperature, a.topK, a.topP, a.vocab);
  if (a.dtype == DType::kF32) {
    launchTyped<float>(a, stream);
  } else {
    launchTyped<fp16>(a, stream);
  }
}

}  // namespace es::sampling

namespace es::kernel {

void sampleRows(const SamplingParams& p, cudaStream_t stream) {
  validateSamplingParams(p, "kernel::sample_rows");
  if (p.batch == 0) return;
  sampling::RowsArgs a;
  a.logits = p.logits;
  a.dtype = p.logitsDtype;
  a.rows = p.batch;
  a.vocab = p.vocab;
  a.temperature = p.temperature;
  a.topK = p.topK;
  a.topP = p.topP;
  a.temperatures = p.temperatures;
  a.topKs = p.topKs;
  a.topPs = p.topPs;
  a.mode = p.topPMode;
  a.rowsPerParam = p.rowsPerRequest;
  a.uniforms = p.uniforms;
  a.seeds = p.seeds;
  a.positions = p.positions;
  a.purpose = p.purpose;
  a.tokens = p.tokens;
  a.probs = p.probs;
  a.flagNonFinite = p.flagNonFinite;
  a.smallVocab = p.path == SamplingPath::kSmallVocab ||
                 (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  if (!a.smallVocab) {
    a.plan = sampling::planGeneral(p);
    ES_CHECK_ARG(p.workspaceBytes >= a.plan.workspaceBytes, "kernel::sample_rows",
                 "workspace_bytes", p.workspaceBytes, "must be >= ", a.plan.workspaceBytes,
                 " (sampling_workspace_bytes)");
    ES_CHECK_ARG(a.plan.workspaceBytes == 0 || p.workspace != nullptr, "kernel::sample_rows",
                 "workspace", "null", "must be non-null");
    a.workspace = p.workspace;
  }
  sampling::launchRows(a, stream);
}

}  // namespace es::kernel
