// Host validation of launchPagedAttention / ref::pagedAttention and the split-KV plan (every
// build, so both are tested in CI).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/env_switch.h"
#include "common/errors.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_prefill.h"
#include "kernels/paged_attention_split.h"
#include "common/kv_page.h"

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
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16,
               kWhere, "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
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

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct SplitShape {
  int32_t warpsM = 0, rowTiles = 1, rowBlocks = 0;
};

// Packed rows (query row, GQA head) of one sequence and KV head -> 16-row tiles -> CTAs. Batch-1
// decode and verify calls keep warpsM 1 whatever the rows (the 4 warps split each tile's keys as
// in decode: row invariance, paged_attention.h); other calls take up to 4 tiles per CTA, which
// reads K/V from L2 4x less often (a batch-16 16-row verify at 4k context: 105 us against 190 us
// with one tile per CTA). Prefill at D 128 with enough rows takes 2 tiles per warp, 8 per CTA
// (kSplitKvRowTilesMinCtas): the 4,096-row causal prefill ran at 164 TFLOP/s with one tile per
// warp, bound by one ldmatrix per two mma.sync. Batch-1 verify at D 128 with >= 2 tiles takes
// 2 tiles per CTA at warpsM 1 (the verify variant, decode's per-row arithmetic): the 16-row verify
// at 4k context had 4 tiles x 8 KV heads x 16 splits = 512 CTAs of one tile, two waves of the 264
// resident ones (30.6 us against decode's 15.1 us); with 2 tiles per CTA it is 256, one wave.
// By default the plan keeps that variant only where one tile per CTA would need more than one
// wave (verify_two_tiles_pay, below); maxVerifyRowTiles 2 here takes it wherever it is built.
SplitShape split_shape(int32_t batchSize, int32_t maxQSeqLen, int32_t group, int32_t numKVHeads,
                       int32_t headDim, int32_t maxRowTiles, int32_t maxVerifyRowTiles) {
  const int64_t packed = int64_t{maxQSeqLen} * group;
  const int64_t tiles = ceil_div(packed, 16);
  const bool prefill = maxQSeqLen > kSplitKvMaxQSeqLen;
  constexpr int32_t rt = splitkv::kPrefillRowTiles;
  if (prefill && maxRowTiles >= rt && splitkv::rowTilesBuilt(headDim, 4, rt) &&
      packed >= splitkv::maxRowsPerCta(rt)) {
    const int64_t blocks = ceil_div(tiles, int64_t{4} * rt);
    if (int64_t{batchSize} * numKVHeads * blocks >= kSplitKvRowTilesMinCtas) {
      return {4, rt, static_cast<int32_t>(blocks)};
    }
  }
  const bool invariant = batchSize == 1 && maxQSeqLen <= kSplitKvMaxQSeqLen;
  constexpr int32_t vrt = splitkv::kVerifyRowTiles;
  if (invariant && tiles >= vrt && maxVerifyRowTiles >= vrt && splitkv::rowTilesBuilt(headDim, 1, vrt)) {
    return {1, vrt, static_cast<int32_t>(ceil_div(tiles, vrt))};
  }
  const int32_t wm = invariant ? 1 : tiles >= 3 ? 4 : static_cast<int32_t>(tiles);
  return {wm, 1, static_cast<int32_t>(ceil_div(tiles, wm))};
}

// The split geometry (paged_attention.h, "Split boundaries"). Depends on the batch, the heads and
// the key bound, never on maxQSeqLen or the real key counts: a row gets the same key ranges in a
// decode call and in a verify call, so its result is bit-identical.
struct SplitGeometry {
  int64_t tilesPerSplit = 1, numSplits = 1;
};

// Splits wanted for `pairs` (sequence, KV head) pairs: one full wave of CTAs, one split kept for
// a window's misalignment so that the count stays <= kSplitKvMaxSplits.
int64_t split_fill(int64_t pairs, int32_t headDim) {
  const int64_t slots = int64_t{kSplitKvPlanSMs} * splitkv::ctasPerSm(headDim, 1);
  return std::min<int64_t>(std::max<int64_t>(1, slots / std::max<int64_t>(1, pairs)), kSplitKvMaxSplits - 1);
}

// tilesSpan: 64-key tiles one CTA's rows can see together (all of the key bound, or with a
// window its span); windowed: the span starts anywhere, so one more split covers its
// misalignment against the fixed boundaries.
SplitGeometry split_geometry(int64_t pairs, int32_t headDim, int64_t tilesSpan, bool windowed) {
  const int64_t fill = split_fill(pairs, headDim);
  SplitGeometry g;
  const int64_t min_tiles = std::clamp<int64_t>(ceil_div(tilesSpan, kSplitKvMinSplitsBeforeMinTiles), 1,
                                                kSplitKvMinTilesPerSplit);
  g.tilesPerSplit = std::max(min_tiles, ceil_div(tilesSpan, fill));
  g.numSplits = windowed ? ceil_div(tilesSpan + g.tilesPerSplit - 1, g.tilesPerSplit)
                         : ceil_div(tilesSpan, g.tilesPerSplit);
  return g;
}

int64_t tiles_of(int64_t keys) { return std::max<int64_t>(1, ceil_div(keys, kTile)); }

// The automatic verify rule (paged_attention.h, "Verify row tiles"): two row tiles per CTA only
// where the one-tile grid, oneTileCtas, is more than one wave of resident CTAs. Halving a grid
// that fits in one wave only halves the CTAs streaming K/V: the Qwen3-8B verify at 128 tokens
// (a 416-token cache: 7-8 splits, 224-256 one-tile CTAs) took 4.70 ms a forward with two tiles
// against 4.66 with one, at 4k (512 CTAs, two waves) 5.19 against 5.35 (docs/perf.md, session 18).
bool verify_two_tiles_pay(int64_t oneTileCtas, int32_t headDim) {
  return oneTileCtas > int64_t{kSplitKvPlanSMs} * splitkv::ctasPerSm(headDim, 1);
}

int64_t partial_bytes(int64_t splits, int64_t totalQ, int32_t numQHeads, int32_t headDim) {
  return splits < 2 ? 0 : splits * totalQ * numQHeads * (int64_t{headDim} + 2) * 4;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

int32_t pagedAttentionRowTiles() {
  static const int32_t rt = env_choice("ES_ATTN_ROWTILES", {1, 2}, splitkv::kPrefillRowTiles);
  return rt;
}

int32_t pagedAttentionVerifyRowTiles() {
  static const int32_t rt = pagedAttentionRowTiles() == 1
                                ? 1
                                : env_choice("ES_ATTN_VERIFY_ROWTILES", {1, 2}, 0,
                                             " (or unset: the plan decides by the grid)");
  return rt;
}

namespace detail {

bool prefillWgmmaEnabled() {
  static const bool on = env_switch_on("ES_ATTN_PREFILL_WGMMA");
  return on;
}

bool prefillWgmmaFewCtas() {
  static const bool on = prefillWgmmaEnabled() && env_switch_on("ES_ATTN_PREFILL_WGMMA_FEW");
  return on;
}

bool prefillWgmmaApplies(const PagedAttentionParams& p, const PagedAttentionPlan& plan) {
  return prefillWgmmaEnabled() && plan.splitKv && plan.numSplits == 1 &&
         plan.rowTiles == splitkv::kPrefillRowTiles && plan.warpsM == 4 && p.headDim == 128 &&
         (p.dtype == DType::kBF16 || p.dtype == DType::kF16) &&
         p.mask != AttentionMask::kPackedTree;
}

}  // namespace detail

PagedAttentionPlan planPagedAttention(const PagedAttentionParams& p, int32_t forceNumSplits,
                                      int32_t maxRowTiles) {
  ES_CHECK_ARG(maxRowTiles >= 0 && maxRowTiles <= splitkv::kPrefillRowTiles, "planPagedAttention",
               "maxRowTiles", maxRowTiles, "must be 0 (the default), 1 or 2");
  // An explicit maxRowTiles bounds prefill and verify alike; the default takes each one's own
  // (for verify 0: the variant only where it pays, verify_two_tiles_pay).
  const int32_t verifyDefault = pagedAttentionVerifyRowTiles();
  const bool verifyAuto = maxRowTiles == 0 && verifyDefault == 0;
  const int32_t maxVerifyRowTiles =
      maxRowTiles != 0 ? maxRowTiles : verifyAuto ? splitkv::kVerifyRowTiles : verifyDefault;
  if (maxRowTiles == 0) maxRowTiles = pagedAttentionRowTiles();
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
      split_shape(p.batchSize, q.maxQSeqLen, group, p.kv.numKVHeads, p.headDim, maxRowTiles,
                  maxVerifyRowTiles);
  // Tiles one CTA's rows can see: all of the key bound, or with a window at most W + 15 keys
  // (16 query rows, whatever this call's maxQSeqLen) and one tile of misalignment.
  const int64_t tilesFull =
      tiles_of(std::min<int64_t>(p.maxKvLength, int64_t{p.kv.maxPagesPerSeq} * kv::kTokensPerPage));
  int64_t tilesSpan = tilesFull;
  if (p.slidingWindow > 0) {
    tilesSpan = std::min(tilesFull, tiles_of(int64_t{p.slidingWindow} + kSplitKvMaxQSeqLen - 1) + 1);
  }
  // paged_attention_prefill.h (default; ES_ATTN_PREFILL_WGMMA_FEW=0 turns it off): prefill rows
  // that would take one row tile for want of 132 CTAs of 128 rows take the wgmma kernel's 128-row
  // CTAs anyway (one split only).
  if (prefill && shape.rowTiles == 1 && maxRowTiles >= splitkv::kPrefillRowTiles &&
      forceNumSplits <= 1 && p.headDim == 128 && detail::prefillWgmmaFewCtas() &&
      int64_t{q.maxQSeqLen} * group >= splitkv::maxRowsPerCta(splitkv::kPrefillRowTiles)) {
    const int64_t tiles = ceil_div(int64_t{q.maxQSeqLen} * group, 16);
    shape = {4, splitkv::kPrefillRowTiles,
             static_cast<int32_t>(ceil_div(tiles, int64_t{4} * splitkv::kPrefillRowTiles))};
  }
  const bool windowed = tilesSpan < tilesFull;
  SplitGeometry g = split_geometry(int64_t{p.batchSize} * p.kv.numKVHeads, p.headDim, tilesSpan, windowed);
  if (prefill) g = {tilesFull, 1};  // the row blocks alone fill the GPU: one split, no partials
  if (forceNumSplits > 0) {
    g.numSplits = std::min(forceNumSplits, kSplitKvMaxSplits);
    g.tilesPerSplit = std::max<int64_t>(1, tilesSpan / g.numSplits);
  }
  // The split geometry does not depend on the row tiles, so the verify variant can be dropped
  // here, once the grid is known.
  if (verifyAuto && !prefill && shape.warpsM == 1 && shape.rowTiles == splitkv::kVerifyRowTiles) {
    const int64_t tiles = ceil_div(int64_t{q.maxQSeqLen} * group, 16);
    if (!verify_two_tiles_pay(int64_t{p.batchSize} * p.kv.numKVHeads * tiles * g.numSplits, p.headDim)) {
      shape = {1, 1, static_cast<int32_t>(tiles)};
    }
  }
  plan.warpsM = shape.warpsM;
  plan.rowTiles = shape.rowTiles;
  plan.rowBlocks = shape.rowBlocks;
  const int64_t ctas = int64_t{p.batchSize} * p.kv.numKVHeads * plan.rowBlocks * g.numSplits;
  const int64_t combine_ctas = (int64_t{q.totalQ} * q.numQHeads + 3) / 4;
  plan.numSplits = static_cast<int32_t>(g.numSplits);
  plan.tilesPerSplit = static_cast<int32_t>(std::min<int64_t>(g.tilesPerSplit, INT32_MAX));
  plan.workspaceBytes = partial_bytes(g.numSplits, q.totalQ, q.numQHeads, p.headDim);
  plan.splitCtas = ctas;
  if (ctas > INT32_MAX || combine_ctas > INT32_MAX) {
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
  // A call's split count is split_geometry's for its batch and tile span (prefill: 1). Any span
  // up to the bound's tiles, windowed or not, gives at most min(fill, tiles) + 1 splits, and
  // fill falls with the batch: maximise that bound times the rows over the batch.
  const int64_t tiles = tiles_of(maxKvLength);
  const int64_t ql = std::min(maxQSeqLen, kSplitKvMaxQSeqLen);
  int64_t best = 0;
  for (int32_t b = 1; b <= maxBatchSize; ++b) {
    const int64_t splits = std::min(split_fill(int64_t{b} * numKVHeads, headDim), tiles) + 1;
    const int64_t rows = maxTotalQ > 0 ? int64_t{maxTotalQ} : int64_t{b} * ql;
    best = std::max(best, partial_bytes(splits, rows, numQHeads, headDim));
  }
  return best;
}

}  // namespace es::kernel
