#pragma once
// Launch plan of the general sampling path, shared by the host workspace-size function (every
// build) and the CUDA launcher, so both agree on chunking and workspace layout. Plain C++.
#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "kernels/sampling.h"

namespace es::sampling {

inline constexpr int32_t kThreads = 512;  // every sampling CTA; the canonical CDF tile
inline constexpr int32_t kItems = 4;      // consecutive entries per thread in a CDF tile
inline constexpr int32_t kTile = kThreads * kItems;
inline constexpr int32_t kMinChunk = 2048;  // general path: entries per chunk, at least
inline constexpr int32_t kMaxChunk = 8192;  // ... and at most (16 per thread in registers)
inline constexpr int32_t kMaxFinalCandidates = 8192;  // chunk candidates merged by one CTA
inline constexpr int32_t kTargetCtas = 264;           // ~2 CTAs per H200 SM for the chunk stage
inline constexpr int32_t kEarlyStopCandidates = 128;  // radix select stops at this many

struct GeneralPlan {
  bool anyCandidate = false;  // some rows may take the candidate mode (chunk + final kernels)
  bool anyFull = false;       // some rows may take the full-row mode
  int32_t chunks = 0;         // chunk CTAs per row (candidate mode)
  int32_t chunkLen = 0;       // entries per chunk (the last one may be shorter)
  int32_t kcap = 0;           // largest effective top-k a candidate row may have
  size_t workspaceBytes = 0;  // the chunk records (below), then the split CDF's region when
                              // cdfSplit
  // Split full-row inverse CDF (kernels/sampling_cdf_split.h): the full-row rows' tokens are
  // drawn by the split CDF kernels iff anyFull, batch <= kCdfSplitMaxRows, vocab >=
  // kCdfSplitMinVocab and the row has at most kCdfMaxChunks chunks; otherwise fullRowKernel's
  // lead CTA draws each token over the whole row itself.
  bool cdfSplit = false;
  int32_t cdfChunks = 0;  // chunks of kCdfChunk entries per row
  size_t cdfOffset = 0;   // byte offset of its region in the workspace (16-aligned)
  // Split full-row decision (kernels/sampling_fullrow_groups.cuh): iff anyFull, batch <=
  // kFullRowSplitMaxRows and vocab >= kFullRowSplitMinVocab, fullRowKernel spreads each row
  // over a cluster of fullrowSplitRanks() CTAs; otherwise it takes one CTA per row (many rows
  // fill the GPU by themselves, and a short row is not worth a cluster). Needs no workspace.
  bool fullrowSplit = false;
};

inline constexpr int32_t kCdfChunk = 2 * kTile;  // entries per split-CDF chunk
// Split only for batches this small. Up to 64 rows a row still has too few CTAs of its own in the
// one-CTA kernels (64 CTAs on 132 SMs, each streaming a whole row), while the split kernels'
// grids (chunks x rows, 38 x 64 at V = 151936) fill the GPU many times over.
inline constexpr int32_t kCdfSplitMaxRows = 64;
inline constexpr int32_t kCdfSplitMinVocab = 32768;  // ... and vocabularies this large
inline constexpr int32_t kCdfMaxChunks =
    256;  // per row (V <= 1M; the chain stages them in shared memory)

inline constexpr int32_t kFullRowSplitMaxRows = kCdfSplitMaxRows;  // the same rows as the split CDF
inline constexpr int32_t kFullRowSplitMinVocab = kCdfSplitMinVocab;

// CTAs per row (the cluster size) of the split decision for `rows` rows: the widest cluster the
// device co-schedules (16, or the portable 8), halved while the grid would exceed two CTAs per SM
// (more CTAs than that only queue, and every halving halves the cluster barriers' fan-in), but
// not below 2. B 1-16 on 132 SMs: 16; B 17-33: 8 (at most 264 CTAs); B 34-64: 4.
constexpr int32_t fullrowSplitRanks(int32_t rows, int32_t widest, int32_t sms) {
  int32_t ranks = widest;
  while (ranks > 2 && static_cast<int64_t>(rows) * ranks > 2 * static_cast<int64_t>(sms))
    ranks /= 2;
  return ranks;
}

// The chunk stage's records in the workspace (candidate mode). The chunk stage walks the
// (row, chunk) items row-major, each CTA a contiguous run of them; the items of one row that one
// CTA walks form a "segment", and the segment's top-k (k the row's, or fewer when the segment
// holds fewer entries) is its record. Layout, u64 words:
//   [rows * chunks * recordCap]  candidate slots: item i's slots are [i cap, (i + 1) cap); a
//                                 record fills the slots from its segment's first item on
//                                 (it fits: a segment of c items holds >= min(k, entries) slots);
//   [rows * chunks]               one header per item (encodeRecordHeader).
// Every item of a candidate row writes its header; only the last item of a segment has a count.
// Nothing is written when the chunk stage finalizes the rows itself (RowsArgs::chunkFinalizesRows).
// finalFastKernel reads only the poison bits: it derives where the records lie from the plan and
// RowsArgs::chunkItemsPerCta; the first chunk and count let the GPU test check the records
// without knowing the device's run length.
ES_HOST_DEVICE ES_FORCE_INLINE int32_t recordCap(const GeneralPlan& p) {
  return p.kcap < p.chunkLen ? p.kcap : p.chunkLen;
}
ES_HOST_DEVICE ES_FORCE_INLINE size_t recordHeadersOffset(const GeneralPlan& p, int32_t rows) {
  return static_cast<size_t>(rows) * p.chunks * recordCap(p);  // in u64 words
}
// Header bits: 0 the item's chunk holds a NaN / +inf scaled logit (the row is uniform); 1-31 the
// first chunk (within the row) of the record ending at this item; 32-63 the record's candidate
// count, 0 for an item that ends no record.
ES_HOST_DEVICE ES_FORCE_INLINE uint64_t encodeRecordHeader(bool poisoned, int32_t firstChunk,
                                                           int32_t count) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(count)) << 32) |
         (static_cast<uint64_t>(static_cast<uint32_t>(firstChunk)) << 1) | (poisoned ? 1u : 0u);
}
ES_HOST_DEVICE ES_FORCE_INLINE bool headerPoisoned(uint64_t h) { return (h & 1u) != 0; }
ES_HOST_DEVICE ES_FORCE_INLINE int32_t headerFirstChunk(uint64_t h) {
  return static_cast<int32_t>((h >> 1) & 0x7fffffffu);
}
ES_HOST_DEVICE ES_FORCE_INLINE int32_t headerCount(uint64_t h) {
  return static_cast<int32_t>(h >> 32);
}

// Rows with effective top-k kk use the candidate mode iff
//   anyCandidate && kk <= kcap (then chunks * min(kk, chunkLen) <= kMaxFinalCandidates, and
//   chunks <= kThreads: finalFastKernel reads a row's headers one per thread).
GeneralPlan planGeneral(const SamplingParams& p);

}  // namespace es::sampling
