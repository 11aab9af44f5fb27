// Host validation of launchPagedAttention / ref::pagedAttention and the split-KV plan (every
// build, so both are tested in CI).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/errors.h"
#include "common/kv_page.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_prefill.h"
#include "kernels/paged_attention_split.h"

namespace es::kernel {

bool validate(const PagedAttentionParams& p) {
  constexpr const char* kWhere = "launchPagedAttention";
  const RaggedQueryArgs& q = p.query;
  const PagedKvArgs& kv = p.kv;
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(q.totalQ >= 0, kWhere, "query.totalQ", q.totalQ, "must be >= 0");
  ES_CHECK_ARG(q.maxQSeqLen >= 0, kWhere, "query.maxQSeqLen", q.maxQSeqLen, "must be >= 0");
  ES_CHECK_ARG(p.batchSize > 0 || q.totalQ == 0, kWhere, "query.totalQ", q.totalQ,
               "must be 0 when batchSize = 0");
  ES_CHECK_ARG(q.numQHeads > 0, kWhere, "query.numQHeads", q.numQHeads, "must be > 0");
  ES_CHECK_ARG(kv.numKVHeads > 0, kWhere, "kv.numKVHeads", kv.numKVHeads, "must be > 0");
  ES_CHECK_ARG(q.numQHeads % kv.numKVHeads == 0, kWhere, "query.numQHeads", q.numQHeads,
               "must be a multiple of kv.numKVHeads = ", kv.numKVHeads);
  ES_CHECK_ARG(p.headDim == 64 || p.headDim == 128 || p.headDim == 256, kWhere, "headDim",
               p.headDim, "must be 64, 128 or 256");
  ES_CHECK_ARG(kv.numPages > 0, kWhere, "kv.numPages", kv.numPages, "must be > 0");
  ES_CHECK_ARG(kv.numPages <= kv::kMaxKvPoolPages, kWhere, "kv.numPages", kv.numPages,
               "must be <= kMaxKvPoolPages = ", kv::kMaxKvPoolPages);
  ES_CHECK_ARG(kv.maxPagesPerSeq > 0, kWhere, "kv.maxPagesPerSeq", kv.maxPagesPerSeq,
               "must be > 0");
  ES_CHECK_ARG(p.slidingWindow >= 0, kWhere, "slidingWindow", p.slidingWindow,
               "must be >= 0 (0 = none)");
  ES_CHECK_ARG(p.scale > 0.0f && std::isfinite(p.scale), kWhere, "scale", p.scale,
               "must be finite and > 0 (usually headDim^-0.5)");
  ES_CHECK_ARG(p.mask == AttentionMask::kCausal || p.mask == AttentionMask::kPackedTree ||
                   p.mask == AttentionMask::kBidirectional,
               kWhere, "mask", static_cast<int32_t>(p.mask),
               "must be kCausal, kPackedTree or kBidirectional");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, kWhere,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(p.maxKvLength >= 0, kWhere, "maxKvLength", p.maxKvLength,
               "must be >= 0 (0 = unknown)");
  ES_CHECK_ARG(p.workspaceBytes >= 0, kWhere, "workspaceBytes", p.workspaceBytes, "must be >= 0");
  ES_CHECK_ARG(p.workspace != nullptr || p.workspaceBytes == 0, kWhere, "workspace", "null",
               "must not be null when workspaceBytes = ", p.workspaceBytes);
  ES_CHECK_ARG((reinterpret_cast<uintptr_t>(p.workspace) & 15u) == 0, kWhere, "workspace",
               p.workspace, "must be 16-byte aligned");
  if (p.batchSize == 0 || q.totalQ == 0) return false;
  ES_CHECK_ARG(q.q != nullptr, kWhere, "query.q", "null", "must not be null");
  ES_CHECK_ARG(q.out != nullptr, kWhere, "query.out", "null", "must not be null");
  ES_CHECK_ARG(q.out != q.q, kWhere, "query.out", q.out, "must not alias query.q");
  ES_CHECK_ARG(q.cuQSeqLens != nullptr, kWhere, "query.cuQSeqLens", "null", "must not be null");
  ES_CHECK_ARG(q.qPositions != nullptr, kWhere, "query.qPositions", "null", "must not be null");
  ES_CHECK_ARG(kv.pool != nullptr, kWhere, "kv.pool", "null", "must not be null");
  ES_CHECK_ARG(kv.pageTable != nullptr, kWhere, "kv.pageTable", "null", "must not be null");
  ES_CHECK_ARG(p.kvLengths != nullptr, kWhere, "kvLengths", "null", "must not be null");
  if (p.mask == AttentionMask::kPackedTree) {
    ES_CHECK_ARG(q.maxQSeqLen > 0, kWhere, "query.maxQSeqLen", q.maxQSeqLen,
                 "must be > 0 with mask kPackedTree (it sizes the mask rows)");
    ES_CHECK_ARG(p.packedMask != nullptr, kWhere, "packedMask", "null",
                 "must not be null with mask kPackedTree");
  }
  return true;
}

namespace {

constexpr int32_t kTile = splitkv::kTileKeys;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct SplitShape {
  int32_t warpsM = 0, rowTiles = 1, rowBlocks = 0;
};

// Packed rows (query row, GQA head) of one sequence and KV head -> 16-row tiles -> CTAs
// (paged_attention.h, "Row tiles"):
//   prefill rows (maxQSeqLen > 16) at head dim 128 with at least 128 packed rows, one split: the
//     wgmma prefill kernel's 128-row CTAs (reported as warpsM 4 x rowTiles 2);
//   batch-1 calls of <= 16 rows at head dim 128 whose packed rows need >= 2 tiles: two tiles per
//     CTA at warpsM 1 (the verify variant; planPagedAttention drops it again where the one-tile
//     grid fits one wave);
//   otherwise one tile per warp row: warpsM 1 for batch-1 calls of <= 16 rows (the 4 warps split
//     each tile's keys as decode does: row invariance), up to 4 tiles per CTA for the rest, which
//     reads K/V from L2 up to 4x less often.
// maxRowTiles 1 keeps one tile per warp row everywhere.
SplitShape splitShape(int32_t batchSize, int32_t maxQSeqLen, int32_t group, int32_t headDim,
                      int32_t maxRowTiles, bool oneSplit) {
  const int64_t packed = int64_t{maxQSeqLen} * group;
  const int64_t tiles = ceilDiv(packed, 16);
  const bool prefill = maxQSeqLen > kSplitKvMaxQSeqLen;
  const bool twoTiles = maxRowTiles != 1 && headDim == 128;
  if (prefill && twoTiles && oneSplit && packed >= splitkv::kPrefillRowsPerCta) {
    return {4, splitkv::kPrefillRowTiles,
            static_cast<int32_t>(ceilDiv(packed, splitkv::kPrefillRowsPerCta))};
  }
  const bool invariant = batchSize == 1 && maxQSeqLen <= kSplitKvMaxQSeqLen;
  constexpr int32_t vrt = splitkv::kVerifyRowTiles;
  if (invariant && twoTiles && tiles >= vrt) {
    return {1, vrt, static_cast<int32_t>(ceilDiv(tiles, vrt))};
  }
  const int32_t wm = invariant ? 1 : tiles >= 3 ? 4 : static_cast<int32_t>(tiles);
  return {wm, 1, static_cast<int32_t>(ceilDiv(tiles, wm))};
}

// The split geometry (paged_attention.h, "Split boundaries"). Depends on the batch, the heads and
// the key bound, never on maxQSeqLen or the real key counts: a row gets the same key ranges in a
// decode call and in a verify call, so its result is bit-identical.
struct SplitGeometry {
  int64_t tilesPerSplit = 1, numSplits = 1;
};

// Splits wanted for `pairs` (sequence, KV head) pairs: one full wave of CTAs, one split kept for
// a window's misalignment so that the count stays <= kSplitKvMaxSplits.
int64_t splitFill(int64_t pairs, int32_t headDim) {
  const int64_t slots = int64_t{kSplitKvPlanSMs} * splitkv::ctasPerSm(headDim, 1);
  return std::min<int64_t>(std::max<int64_t>(1, slots / std::max<int64_t>(1, pairs)),
                           kSplitKvMaxSplits - 1);
}

// tilesSpan: 64-key tiles one CTA's rows can see together (all of the key bound, or with a
// window its span); windowed: the span starts anywhere, so one more split covers its
// misalignment against the fixed boundaries.
SplitGeometry splitGeometry(int64_t pairs, int32_t headDim, int64_t tilesSpan, bool windowed) {
  const int64_t fill = splitFill(pairs, headDim);
  SplitGeometry g;
  const int64_t minTiles = std::clamp<int64_t>(ceilDiv(tilesSpan, kSplitKvMinSplitsBeforeMinTiles),
                                               1, kSplitKvMinTilesPerSplit);
  g.tilesPerSplit = std::max(minTiles, ceilDiv(tilesSpan, fill));
  g.numSplits = windowed ? ceilDiv(tilesSpan + g.tilesPerSplit - 1, g.tilesPerSplit)
                         : ceilDiv(tilesSpan, g.tilesPerSplit);
  return g;
}

int64_t tilesOf(int64_t keys) { return std::max<int64_t>(1, ceilDiv(keys, kTile)); }

// The automatic verify rule (paged_attention.h, "Verify row tiles"): two row tiles per CTA only
// where the one-tile grid, oneTileCtas, is more than one wave of resident CTAs. Halving a grid
// that fits in one wave only halves the CTAs streaming K/V: the Qwen3-8B verify forward at 128
// tokens (a 416-token cache: 7-8 splits, 224-256 one-tile CTAs) is about 1 % slower with two tiles,
// at 4k (512 one-tile CTAs, two waves) 3 % faster.
bool verifyTwoTilesPay(int64_t oneTileCtas, int32_t headDim) {
  return oneTileCtas > int64_t{kSplitKvPlanSMs} * splitkv::ctasPerSm(headDim, 1);
}

int64_t partialBytes(int64_t splits, int64_t totalQ, int32_t numQHeads, int32_t headDim) {
  return splits < 2 ? 0 : splits * totalQ * numQHeads * (int64_t{headDim} + 2) * 4;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

namespace detail {

bool prefillWgmmaApplies(const PagedAttentionParams& p, const PagedAttentionPlan& plan) {
  return plan.splitKv && plan.numSplits == 1 && plan.rowTiles == splitkv::kPrefillRowTiles &&
         plan.warpsM == 4 && p.headDim == 128 &&
         (p.dtype == DType::kBF16 || p.dtype == DType::kF16) &&
         p.mask != AttentionMask::kPackedTree;
}

}  // namespace detail

PagedAttentionPlan planPagedAttention(const PagedAttentionParams& p, int32_t forceNumSplits,
                                      int32_t maxRowTiles) {
  ES_CHECK_ARG(maxRowTiles >= 0 && maxRowTiles <= 2, "planPagedAttention", "maxRowTiles",
               maxRowTiles, "must be 0 (the plan's rule), 1 or 2");
  PagedAttentionPlan plan;
  if (!validate(p)) {
    plan.reason = "empty call";
    return plan;
  }
  const RaggedQueryArgs& q = p.query;
  const bool prefill = q.maxQSeqLen > kSplitKvMaxQSeqLen;
  if (p.maxKvLength == 0) {
    plan.reason = "maxKvLength = 0 (unknown)";
  } else if (p.dtype != DType::kF16 && p.dtype != DType::kBF16) {
    plan.reason = "dtype is not f16/bf16";
  } else if (q.maxQSeqLen < 1) {
    plan.reason = "maxQSeqLen < 1";
  } else if (prefill && p.mask == AttentionMask::kPackedTree) {
    plan.reason = "maxQSeqLen > 16 with a packed tree mask";
  } else if (!aligned16(q.q) || !aligned16(q.out) || !aligned16(p.kv.pool)) {
    plan.reason = "q, out or pool not 16-byte aligned";
  }
  if (*plan.reason) return plan;

  const int32_t group = q.numQHeads / p.kv.numKVHeads;
  SplitShape shape =
      splitShape(p.batchSize, q.maxQSeqLen, group, p.headDim, maxRowTiles, forceNumSplits <= 1);
  // Tiles one CTA's rows can see: all of the key bound, or with a window at most W + 15 keys
  // (16 query rows, whatever this call's maxQSeqLen) and one tile of misalignment.
  const int64_t tilesFull =
      tilesOf(std::min<int64_t>(p.maxKvLength, int64_t{p.kv.maxPagesPerSeq} * kv::kTokensPerPage));
  int64_t tilesSpan = tilesFull;
  if (p.slidingWindow > 0) {
    tilesSpan = std::min(tilesFull, tilesOf(int64_t{p.slidingWindow} + kSplitKvMaxQSeqLen - 1) + 1);
  }
  const bool windowed = tilesSpan < tilesFull;
  SplitGeometry g =
      splitGeometry(int64_t{p.batchSize} * p.kv.numKVHeads, p.headDim, tilesSpan, windowed);
  if (prefill) g = {tilesFull, 1};  // the row blocks alone fill the GPU: one split, no partials
  if (forceNumSplits > 0) {
    g.numSplits = std::min(forceNumSplits, kSplitKvMaxSplits);
    g.tilesPerSplit = std::max<int64_t>(1, tilesSpan / g.numSplits);
  }
  // The split geometry does not depend on the row tiles, so the verify variant can be dropped
  // here, once the grid is known (maxRowTiles 2 keeps it wherever splitShape gave it).
  if (maxRowTiles == 0 && !prefill && shape.warpsM == 1 &&
      shape.rowTiles == splitkv::kVerifyRowTiles) {
    const int64_t tiles = ceilDiv(int64_t{q.maxQSeqLen} * group, 16);
    if (!verifyTwoTilesPay(int64_t{p.batchSize} * p.kv.numKVHeads * tiles * g.numSplits,
                           p.headDim)) {
      shape = {1, 1, static_cast<int32_t>(tiles)};
    }
  }
  plan.warpsM = shape.warpsM;
  plan.rowTiles = shape.rowTiles;
  plan.rowBlocks = shape.rowBlocks;
  const int64_t ctas = int64_t{p.batchSize} * p.kv.numKVHeads * plan.rowBlocks * g.numSplits;
  const int64_t combineCtas = (int64_t{q.totalQ} * q.numQHeads + 3) / 4;
  plan.numSplits = static_cast<int32_t>(g.numSplits);
  plan.tilesPerSplit = static_cast<int32_t>(std::min<int64_t>(g.tilesPerSplit, INT32_MAX));
  plan.workspaceBytes = partialBytes(g.numSplits, q.totalQ, q.numQHeads, p.headDim);
  plan.splitCtas = ctas;
  if (ctas > INT32_MAX || combineCtas > INT32_MAX) {
    plan.reason = "grid too large";
  } else if (plan.workspaceBytes > p.workspaceBytes) {
    plan.reason = "workspace too small";
  } else {
    plan.splitKv = true;
  }
  return plan;
}

int64_t pagedAttentionWorkspaceBytes(int32_t maxBatchSize, int32_t maxQSeqLen, int32_t numQHeads,
                                     int32_t numKVHeads, int32_t headDim, int32_t maxKvLength,
                                     int32_t maxTotalQ) {
  constexpr const char* kWhere = "pagedAttentionWorkspaceBytes";
  ES_CHECK_ARG(maxBatchSize > 0, kWhere, "maxBatchSize", maxBatchSize, "must be > 0");
  ES_CHECK_ARG(maxQSeqLen > 0, kWhere, "maxQSeqLen", maxQSeqLen, "must be > 0");
  ES_CHECK_ARG(numQHeads > 0, kWhere, "numQHeads", numQHeads, "must be > 0");
  ES_CHECK_ARG(numKVHeads > 0, kWhere, "numKVHeads", numKVHeads, "must be > 0");
  ES_CHECK_ARG(numQHeads % numKVHeads == 0, kWhere, "numQHeads", numQHeads,
               "must be a multiple of numKVHeads = ", numKVHeads);
  ES_CHECK_ARG(headDim == 64 || headDim == 128 || headDim == 256, kWhere, "headDim", headDim,
               "must be 64, 128 or 256");
  ES_CHECK_ARG(maxKvLength >= 0, kWhere, "maxKvLength", maxKvLength, "must be >= 0");
  ES_CHECK_ARG(maxTotalQ >= 0, kWhere, "maxTotalQ", maxTotalQ, "must be >= 0 (0 = batch * qLen)");
  if (maxKvLength == 0) return 0;
  // A call's split count is splitGeometry's for its batch and tile span (prefill: 1). Any span
  // up to the bound's tiles, windowed or not, gives at most min(fill, tiles) + 1 splits, and
  // fill falls with the batch: maximise that bound times the rows over the batch.
  const int64_t tiles = tilesOf(maxKvLength);
  const int64_t ql = std::min(maxQSeqLen, kSplitKvMaxQSeqLen);
  int64_t best = 0;
  for (int32_t b = 1; b <= maxBatchSize; ++b) {
    const int64_t splits = std::min(splitFill(int64_t{b} * numKVHeads, headDim), tiles) + 1;
    const int64_t rows = maxTotalQ > 0 ? int64_t{maxTotalQ} : int64_t{b} * ql;
    best = std::max(best, partialBytes(splits, rows, numQHeads, headDim));
  }
  return best;
}

}  // namespace es::kernel
