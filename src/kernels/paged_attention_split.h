#pragma once
// Shape constants of the split-KV (flash-decoding) path of launchPagedAttention, shared by the
// host plan (paged_attention_args.cpp, every build) and the kernels (paged_attention.cu), so the
// plan's occupancy estimate and the kernel's shared-memory layout cannot drift apart. Plain C++.
//
// One CTA of 4 warps per (sequence, KV head, row block, KV split). Its rows are the "packed"
// (query row i, GQA head g) pairs m = i * group + g of one sequence and one KV head, 16 per MMA
// tile; the CTA holds warpsM * rowTiles tiles and the 4 warps are arranged warpsM x (4/warpsM):
//   rowTiles 1 (every call but the batch-1 verify below): each warp row holds ONE 16-row tile
//     (warpsM 1, 2 or 4); warps of one row tile split each 64-key tile of K/V between them.
//   rowTiles 2 at warpsM 1 (batch-1 verify of >= 2 tiles, head dim 128, where one tile per CTA
//     would need more than one wave; paged_attention.h, "Verify row tiles"): the CTA holds two
//     16-row tiles (32 packed rows) and each of the 4 warps keeps decode's 16-key slice of every
//     64-key tile but computes it for both tiles, so each K/V tile in shared memory serves 32 rows
//     and the CTA count halves. Per row it is the rowTiles-1 warpsM-1 kernel's arithmetic: the
//     same mma sequence over the same keys, the same softmax, the same 4-warp merge.
// K/V tiles stream through a ring of `stages` shared-memory buffers with 16-byte cp.async; Q sits
// in shared memory. A row's summation order depends on warpsM (4 / warpsM warps share its keys)
// but not on rowTiles: batch-1 calls of up to 16 rows always take warpsM = 1, so a verify row
// equals the decode row bit for bit there (with rowTiles 1 or 2).
// The plan describes the wgmma prefill kernel's CTAs (paged_attention_prefill.h) in the same
// terms: warpsM 4 x rowTiles 2 = 128 packed rows.
#include <cstdint>

namespace es::kernel::splitkv {

inline constexpr int32_t kTileKeys = 64;       // keys per K/V tile (half a 128-token page)
inline constexpr int32_t kThreads = 128;       // 4 warps
inline constexpr int32_t kMaxRowsPerCta = 64;  // rowTiles 1: 16 * max warpsM
inline constexpr int32_t kElemBytes = 2;       // bf16 / f16 only
inline constexpr int64_t kSmPerSm = 233472;    // 228 KB shared memory per SM (sm_90)
inline constexpr int64_t kSmReservedPerCta = 1024;

// The verify variant's row tiles per CTA and the head dim it is built for: at D 128 its
// accumulators (O 2 x 16 x 4 and S 2 x 2 x 4 floats per lane, Q re-read from shared memory) fit
// the 255 registers that 2 CTAs per SM allow; D 64 and D 256 keep rowTiles 1.
inline constexpr int32_t kVerifyRowTiles = 2;
constexpr bool rowTilesBuilt(int32_t headDim, int32_t warpsM, int32_t rowTiles) {
  return rowTiles == 1 || (rowTiles == kVerifyRowTiles && headDim == 128 && warpsM == 1);
}
// The wgmma prefill kernel's CTA as the plan reports it: warpsM 4 x kPrefillRowTiles tiles of 16
// packed rows.
inline constexpr int32_t kPrefillRowTiles = 2;
inline constexpr int32_t kPrefillRowsPerCta = 4 * kPrefillRowTiles * 16;

constexpr int32_t maxRowsPerCta(int32_t rowTiles) { return kMaxRowsPerCta * rowTiles; }

// Per-row bookkeeping (RowInfo in the kernel: int64 row-head index, lo, hi, tree word, pad) for
// the most rows a CTA of this rowTiles holds, merge statistics (per row tile 4 warps x 16 rows x
// float2) and a few flags.
constexpr int64_t miscBytes(int32_t rowTiles) {
  return int64_t{maxRowsPerCta(rowTiles)} * 24 + int64_t{rowTiles} * 4 * 16 * 8 + 64;
}
inline constexpr int64_t kMiscBytes = miscBytes(1);

// Two stages where one CTA needs the most shared memory (D 256) or computes the most per tile
// (4 row tiles, warpsM 4), three otherwise (the verify rowTiles 2 at warpsM 1 too: 32 rows of Q
// and row data next to 3 stages still give 2 CTAs per SM at D 128).
constexpr int32_t stages(int32_t headDim, int32_t warpsM, int32_t /*rowTiles*/ = 1) {
  return headDim == 256 || warpsM == 4 ? 2 : 3;
}
// __launch_bounds__ minimum blocks per SM (register cap 65536 / (128 * blocks)).
constexpr int32_t minBlocks(int32_t headDim) { return headDim == 64 ? 4 : headDim == 128 ? 2 : 1; }

constexpr int64_t kvStageBytes(int32_t headDim) {
  return int64_t{2} * kTileKeys * headDim * kElemBytes;  // K tile + V tile
}
constexpr int64_t qBytes(int32_t headDim, int32_t warpsM, int32_t rowTiles = 1) {
  return int64_t{16} * warpsM * rowTiles * headDim * kElemBytes;
}
constexpr int64_t smemBytes(int32_t headDim, int32_t warpsM, int32_t rowTiles = 1) {
  return stages(headDim, warpsM, rowTiles) * kvStageBytes(headDim) +
         qBytes(headDim, warpsM, rowTiles) + miscBytes(rowTiles);
}
// The merge buffer of the 4-warp epilogue ([4 warps][16 rows][headDim + 4] f32 per row tile:
// rowTiles 1, and rowTiles 2 at warpsM 1 with both tiles laid out at once) reuses the K/V ring.
constexpr int64_t mergeBytes(int32_t headDim) { return int64_t{4} * 16 * (headDim + 4) * 4; }

constexpr int32_t ctasPerSm(int32_t headDim, int32_t warpsM, int32_t rowTiles = 1) {
  const int64_t bySmem = kSmPerSm / (smemBytes(headDim, warpsM, rowTiles) + kSmReservedPerCta);
  const int64_t byRegs = minBlocks(headDim);
  return static_cast<int32_t>(bySmem < byRegs ? bySmem : byRegs);
}

static_assert(mergeBytes(64) <= stages(64, 1) * kvStageBytes(64) &&
              mergeBytes(64) <= stages(64, 4) * kvStageBytes(64));
static_assert(mergeBytes(128) <= stages(128, 4) * kvStageBytes(128));
static_assert(mergeBytes(256) <= stages(256, 1) * kvStageBytes(256));
static_assert(smemBytes(256, 4) <= 232448, "fits the 227 KB per-block limit");
static_assert(ctasPerSm(128, 1) == 2 && ctasPerSm(128, 4) == 2 && ctasPerSm(64, 1) == 4 &&
              ctasPerSm(256, 1) == 1);
// Verify rowTiles 2 at warpsM 1, D 128: 3 stages x 32 KiB + 8 KiB of Q (32 rows) + 4.1 KiB =
// 108.1 KiB: still 2 CTAs per SM, like the rowTiles-1 warpsM-1 kernel (102.1 KiB);
// both tiles' merge buffers (2 x 33 KiB) fit in the ring.
static_assert(smemBytes(128, 1, kVerifyRowTiles) == 110656);
static_assert(ctasPerSm(128, 1, kVerifyRowTiles) == 2);
static_assert(kVerifyRowTiles * mergeBytes(128) <=
              stages(128, 1, kVerifyRowTiles) * kvStageBytes(128));
// The split plan sizes its wave with ctasPerSm(headDim, 1): the same for every warpsM and
// rowTiles, so the split boundaries depend on neither.
static_assert(ctasPerSm(64, 2) == ctasPerSm(64, 1) && ctasPerSm(64, 4) == ctasPerSm(64, 1) &&
              ctasPerSm(128, 2) == ctasPerSm(128, 1) && ctasPerSm(256, 2) == ctasPerSm(256, 1) &&
              ctasPerSm(256, 4) == ctasPerSm(256, 1));

}  // namespace es::kernel::splitkv
