#pragma once
// Launch plan of the general sampling path, shared by the host workspace-size function (every
// build) and the CUDA launcher, so both agree on chunking and workspace layout. Plain C++.
#include <cstddef>
#include <cstdint>

#include "kernels/sampling.h"

namespace es::sampling {

inline constexpr int32_t kThreads = 512;           // every sampling CTA; the canonical CDF tile
inline constexpr int32_t kItems = 4;               // consecutive entries per thread in a CDF tile
inline constexpr int32_t kTile = kThreads * kItems;
inline constexpr int32_t kMinChunk = 2048;         // general path: entries per chunk, at least
inline constexpr int32_t kMaxChunk = 8192;         // ... and at most (16 per thread in registers)
inline constexpr int32_t kMaxFinalCandidates = 8192;  // chunk candidates merged by one CTA
inline constexpr int32_t kTargetCtas = 264;        // ~2 CTAs per H200 SM for the chunk stage
inline constexpr int32_t kEarlyStopCandidates = 128;  // radix select stops at this many

struct GeneralPlan {
  bool any_candidate = false;  // some rows may take the candidate mode (chunk + final kernels)
  bool any_full = false;       // some rows may take the full-row mode
  int32_t chunks = 0;          // chunk CTAs per row (candidate mode)
  int32_t chunk_len = 0;       // entries per chunk (the last one may be shorter)
  int32_t kcap = 0;            // largest effective top-k a candidate row may have
  size_t workspace_bytes = 0;  // [batch][chunks] x (min(kcap, chunk_len) u64 + flag u64),
                               // then the split CDF's region when cdf_split
  // Split full-row inverse CDF (kernels/sampling_cdf_split.h): few rows, large vocab.
  bool cdf_split = false;
  int32_t cdf_chunks = 0;      // chunks of kCdfChunk entries per row
  size_t cdf_offset = 0;       // byte offset of its region in the workspace (16-aligned)
  // Split full-row decision (kernels/sampling_fullrow_groups.cuh): few rows, large vocab, so
  // full_row_kernel spreads each row over a cluster of CTAs. Needs no workspace.
  bool fullrow_split = false;
};

inline constexpr int32_t kCdfChunk = 2 * kTile;        // entries per split-CDF chunk
// Split only for batches this small. Up to 64 rows a row still has too few CTAs of its own in the
// one-CTA kernels (64 CTAs on 132 SMs, each streaming a whole row), while the split kernels'
// grids (chunks x rows, 38 x 64 at V = 151936) fill the GPU many times over.
inline constexpr int32_t kCdfSplitMaxRows = 64;
inline constexpr int32_t kCdfSplitMinVocab = 32768;    // ... and vocabularies this large
inline constexpr int32_t kCdfMaxChunks = 256;          // per row (V <= 1M; the chain stages them in shared memory)

inline constexpr int32_t kFullRowSplitMaxRows = kCdfSplitMaxRows;    // the same rows as the split CDF
inline constexpr int32_t kFullRowSplitMinVocab = kCdfSplitMinVocab;

// CTAs per row (the cluster size) of the split decision for `rows` rows: the widest cluster the
// device co-schedules (16, or the portable 8), halved while the grid would exceed two CTAs per SM
// (more CTAs than that only queue, and every halving halves the cluster barriers' fan-in), but
// not below 2. B 1-16 on 132 SMs: 16; B 17-33: 8 (at most 264 CTAs); B 34-64: 4.
constexpr int32_t fullrow_split_ranks(int32_t rows, int32_t widest, int32_t sms) {
  int32_t ranks = widest;
  while (ranks > 2 && static_cast<int64_t>(rows) * ranks > 2 * static_cast<int64_t>(sms)) ranks /= 2;
  return ranks;
}

// False when the environment sets ES_FULLROW_SPLIT=0 (read once): every full-row row then takes
// one CTA (the kernel before the split), so one binary measures both. CUDA builds.
bool fullrow_split_enabled();

// Rows with effective top-k kk use the candidate mode iff
//   any_candidate && kk <= kcap (then chunks * min(kk, chunk_len) <= kMaxFinalCandidates).
GeneralPlan plan_general(const SamplingParams& p);

}  // namespace es::sampling
