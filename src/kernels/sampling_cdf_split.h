#pragma once
// Split full-row inverse CDF (spec §3.5, bit-exact): workspace layout and launcher. Plain C++.
//
// fullRowKernel (one CTA per row) still decides the row's probabilities (max, top-k / top-p
// cut, normaliser); with plan.cdfSplit it writes them as a CdfRowParams instead of drawing the
// token itself, and these kernels draw it over many CTAs (kernels/sampling_cdf_split.cu):
//   A1  grid (chunks, rows): each chunk's float sum (any order: only a guess depends on it) and
//       its last positive index;
//   A2  grid (chunks, rows): the chunk's approximate start (float prefix of A1's sums), the two
//       binades it most likely starts in (cdf::guessBinades), and its composed step for each
//       (cdf::ChunkSummary, kernels/sampling_cdf_chunks.h);
//   BC  grid (rows): the chain of exact chunk starts, O(1) per chunk whose summary applies, a
//       block-parallel sequential replay of a chunk that misses (a power of two crossed inside
//       it, or a wrong guess); then the search: the first chunk whose exact end exceeds
//       fl(u * total), rescanned from its exact start.
#include <cstddef>
#include <cstdint>

#include "common/host_device.h"
#include "kernels/sampling_cdf_chunks.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_rows.h"

namespace es::sampling {

// What the CDF kernels need to recompute a row's probabilities exactly as fullRowKernel does.
struct alignas(16) CdfRowParams {
  uint64_t cc;    // composites below this are out (top-k / top-p cut)
  uint64_t norm;  // normaliser of the masses
  uint64_t last;  // weight of the cut entry when partial
  float invT;
  float rowMax;
  float u;  // the row's uniform
  int32_t greedy;
  int32_t partial;
  int32_t active;  // 0: the row is not drawn here (candidate row, uniform fallback)
  int32_t pad[2];
};

// Byte offsets (from plan.cdfOffset) of the split CDF's arrays.
struct CdfLayout {
  size_t params;    // CdfRowParams [rows]
  size_t chunkSum;  // float [rows][chunks]
  size_t lastPos;   // int32 [rows][chunks]
  size_t summary;   // cdf::ChunkSummary [rows][chunks][2]
  size_t bytes;
};

ES_HOST_DEVICE inline CdfLayout cdfLayout(int64_t rows, int64_t chunks) {
  auto up = [](size_t x) { return (x + 15) & ~size_t{15}; };
  CdfLayout l;
  l.params = 0;
  l.chunkSum = up(l.params + static_cast<size_t>(rows) * sizeof(CdfRowParams));
  l.lastPos = up(l.chunkSum + static_cast<size_t>(rows * chunks) * sizeof(float));
  l.summary = up(l.lastPos + static_cast<size_t>(rows * chunks) * sizeof(int32_t));
  l.bytes = up(l.summary + static_cast<size_t>(rows * chunks) * 2 * sizeof(cdf::ChunkSummary));
  return l;
}

// Launches A1, A2 and BC after fullRowKernel (CUDA builds; a.plan.cdfSplit and a.tokens).
void launchCdfSplit(const RowsArgs& a, cudaStream_t stream);

}  // namespace es::sampling
