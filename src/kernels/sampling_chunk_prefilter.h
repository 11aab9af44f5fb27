#pragma once
// Arithmetic of the chunk stage (chunkFastKernel in kernels/sampling.cu) and the final merge
// (finalFastKernel), shared with its CPU model (tests/kernels/test_sampling_chunk_prefilter.cpp).
// Plain C++ plus ES_HOST_DEVICE.
//
// The chunk stage writes each chunk's top-kc composites (kc = min(k, chunk length)), sorted
// descending, for finalFastKernel to merge. The stage keeps every thread's entries in
// registers and finds a key threshold theta that provably keeps the top-kc ("survivors" are the
// entries with key >= theta), so only the survivors (~55 of 8192 for k = 50) go to shared memory
// and get sorted:
//   1. every thread takes the maximum of its entries (its "thread maximum");
//   2. every warp keeps its jp = unionPerWarp(kc) largest thread maxima (the "union" U,
//      kWarps * jp >= kc values, each the value of a distinct entry);
//   3. theta = the kc-th largest value of U. At least kc distinct entries have a key >= theta,
//      so the kc-th largest key of the chunk is >= theta, and every entry of the top-kc has a key
//      >= the kc-th largest key >= theta: the survivors contain the top-kc. Which subset of
//      thread maxima U is does not matter for this (any kc of them would do); the largest few
//      per warp make theta close to the true kc-th key.
// The result is the same set in the same order as an exact top-kc selection (the top-kc
// composites are unique; selectTopCandidates gives the same), so the outputs do not depend on
// the threshold.
//
// Entries absent from a short (last) chunk take part as NaN: never a survivor, ignored by the
// maxima (fmaxf), and a thread with no entry has the maximum -inf. Such a -inf maximum counts as
// an entry in (3); that is harmless: if theta > -inf, the entries >= theta are real; if
// theta == -inf, every real entry survives, and the chunk has >= kc real entries.
#include <cstdint>

#include "common/host_device.h"
#include "kernels/sampling_layout.h"

namespace es::sampling::prefilter {

inline constexpr int32_t kWarps = kThreads / 32;

// Thread maxima each warp contributes to the union U: ceil(kc / kWarps) are needed for
// kWarps * jp >= kc; one more makes theta much tighter when a warp holds more than its share of
// the top-kc (simulated on N(0, 3.75) and Gumbel rows of 8192 entries: k = 50: ~55 survivors
// instead of ~62 with ceil(kc / 16) alone and ~137 with selectTopCandidates' min-over-warps
// threshold; k = 128: 166 / 244 / 244; k = 256: 381 / 500 / 500). At most 32 (a warp's lanes).
ES_HOST_DEVICE ES_FORCE_INLINE int32_t unionPerWarp(int32_t kc) {
  const int32_t j = (kc + kWarps - 1) / kWarps;
  return j < 32 ? j + 1 : 32;
}

// v is the kc-th largest value of a list (1 <= kc <= its length) iff fewer than kc values are
// greater and at least kc are greater or equal; exactly one distinct value qualifies.
ES_HOST_DEVICE ES_FORCE_INLINE bool isKthLargest(int32_t greater, int32_t greaterEqual,
                                                 int32_t kc) {
  return greater < kc && kc <= greaterEqual;
}

// Offset within the chunk of thread t's entry in register slot j (0 <= j < 4 R, R groups of 4).
//   vec (16-byte f32 / 8-byte f16 loads): group r = j / 4 of thread t is the 4 consecutive
//       entries 4 (t + r kThreads) + 0..3, so slot j holds 4 (t + (j / 4) kThreads) + j % 4;
//   scalar loads (a misaligned row): slot j holds t + j kThreads.
// Either way consecutive threads read consecutive addresses (coalesced).
ES_HOST_DEVICE ES_FORCE_INLINE int32_t slotOffset(int32_t j, int32_t t, bool vec) {
  return vec ? 4 * (t + (j >> 2) * kThreads) + (j & 3) : t + j * kThreads;
}

// Groups of 4 entries per thread for a chunk of len entries: the smallest R in 1..4 with
// 4 R kThreads >= len (len <= kMaxChunk = 4 * 4 * kThreads).
ES_HOST_DEVICE ES_FORCE_INLINE int32_t groupsFor(int32_t len) {
  const int32_t perGroup = 4 * kThreads;
  const int32_t r = (len + perGroup - 1) / perGroup;
  return r < 1 ? 1 : r;
}
// Whether the chunk stage merges the survivors of a segment's items into the segment's top-k
// after its done-th item (1-based; and always after the segment's last): after items 2, 4, 8, 16,
// then every 16. Between merges the items filter by the threshold of the last merge (the first
// item's union threshold until the first), so each group of items adds ~k survivors for i.i.d.
// entries (items 3-4 at the top-k of 2 chunks, items 5-8 at that of 4, ...) and a group has at
// most kMaxMergeGroup items (one poison bit each in a 32-bit word).
inline constexpr int32_t kMaxMergeGroup = 16;
ES_HOST_DEVICE ES_FORCE_INLINE bool mergeAfter(int32_t done) {
  return done >= 2 && ((done & (done - 1)) == 0 || done % kMaxMergeGroup == 0);
}
// The first merge after the one after item done (done >= 0): the smallest d > done with
// mergeAfter(d) (the next power of two below kMaxMergeGroup, then the next multiple of it), so
// that the chunk stage tests one count an item instead of mergeAfter's bit tests.
ES_HOST_DEVICE ES_FORCE_INLINE int32_t nextMergeAfter(int32_t done) {
  if (done >= kMaxMergeGroup) return (done / kMaxMergeGroup + 1) * kMaxMergeGroup;
  int32_t d = 2;
  while (d <= done) d <<= 1;
  return d;
}

static_assert(kMaxChunk == 4 * 4 * kThreads, "chunk_fast_kernel instantiates R = 1..4");

}  // namespace es::sampling::prefilter
