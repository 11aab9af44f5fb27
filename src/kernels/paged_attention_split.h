#pragma once
// Shape constants of the split-KV (flash-decoding) path of launchPagedAttention, shared by the
// host plan (paged_attention_args.cpp, every build) and the kernels (paged_attention.cu), so the
// plan's occupancy estimate and the kernel's shared-memory layout cannot drift apart. Plain C++.
//
// One CTA of 4 warps per (sequence, KV head, row block, KV split). Its rows are the "packed"
// (query row i, GQA head g) pairs m = i * group + g of one sequence and one KV head, 16 per MMA
// tile; the CTA holds warpsM * rowTiles tiles and the 4 warps are arranged warpsM x (4/warpsM):
//   rowTiles 1 (every call; ES_ATTN_ROWTILES=1 forces it for prefill too): each warp row holds
//     ONE 16-row tile (warpsM 1, 2 or 4); warps of one row tile split each 64-key tile of K/V
//     between them.
//   rowTiles 2 (prefill only, head dim 128): warpsM 4 and each warp owns TWO 16-row tiles (32
//     packed rows, 128 per CTA) and all keys of a K/V tile, so every K and V fragment it loads
//     with ldmatrix feeds two mma.sync instead of one, and each K/V tile in shared memory serves
//     128 rows instead of 64 (FlashAttention-2's arrangement).
// K/V tiles stream through a ring of `stages` shared-memory buffers with 16-byte cp.async; Q sits
// in shared memory. A row's summation order depends on warpsM (4 / warpsM warps share its keys)
// but not on rowTiles (with warpsM 4 one warp sums all of a row's keys either way): batch-1 calls
// of up to 16 rows always take warpsM = 1, so a verify row equals the decode row bit for bit there.
#include <cstdint>

namespace es::kernel::splitkv {

inline constexpr int32_t kTileKeys = 64;        // keys per K/V tile (half a 128-token page)
inline constexpr int32_t kThreads = 128;        // 4 warps
inline constexpr int32_t kMaxRowsPerCta = 64;   // rowTiles 1: 16 * max warpsM
inline constexpr int32_t kElemBytes = 2;        // bf16 / f16 only
inline constexpr int64_t kSmPerSm = 233472;     // 228 KB shared memory per SM (sm_90)
inline constexpr int64_t kSmReservedPerCta = 1024;

// The prefill variant's row tiles per warp, and the head dims it is built for: at D 128 its
// accumulators (S 2 x 8 x 4 and O 2 x 16 x 4 floats per lane) fit the 255 registers that 2 CTAs
// per SM allow with Q re-read from shared memory; D 64 (4 CTAs per SM, 128 registers) and D 256
// (O alone would be 256 registers) keep rowTiles 1.
inline constexpr int32_t kPrefillRowTiles = 2;
constexpr bool rowTilesBuilt(int32_t headDim, int32_t rowTiles) {
  return rowTiles == 1 || (rowTiles == kPrefillRowTiles && headDim == 128);
}

constexpr int32_t maxRowsPerCta(int32_t rowTiles) { return kMaxRowsPerCta * rowTiles; }

// Per-row bookkeeping (RowInfo in the kernel: int64 row-head index, lo, hi, tree word, pad) for
// the most rows a CTA of this rowTiles holds, merge statistics (4 warps x 16 rows x float2) and
// a few flags.
constexpr int64_t miscBytes(int32_t rowTiles) {
  return int64_t{maxRowsPerCta(rowTiles)} * 24 + 4 * 16 * 8 + 64;
}
inline constexpr int64_t kMiscBytes = miscBytes(1);

// Two stages where one CTA needs the most shared memory (D 256), computes the most per tile
// (4 row tiles) or holds 128 rows (rowTiles 2: a third 32 KB stage at D 128 would leave one CTA
// per SM), three otherwise.
constexpr int32_t stages(int32_t headDim, int32_t warpsM, int32_t rowTiles = 1) {
  return headDim == 256 || warpsM == 4 || rowTiles > 1 ? 2 : 3;
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
// The merge buffer of the rowTiles-1 epilogue ([4 warps][16 rows][headDim + 4] f32) reuses the
// K/V ring. rowTiles 2 needs none: one warp owns all keys of its rows and stages its output in
// its own rows of the Q buffer.
constexpr int64_t mergeBytes(int32_t headDim) { return int64_t{4} * 16 * (headDim + 4) * 4; }

constexpr int32_t ctasPerSm(int32_t headDim, int32_t warpsM, int32_t rowTiles = 1) {
  const int64_t by_smem = kSmPerSm / (smemBytes(headDim, warpsM, rowTiles) + kSmReservedPerCta);
  const int64_t by_regs = minBlocks(headDim);
  return static_cast<int32_t>(by_smem < by_regs ? by_smem : by_regs);
}

static_assert(mergeBytes(64) <= stages(64, 1) * kvStageBytes(64) &&
              mergeBytes(64) <= stages(64, 4) * kvStageBytes(64));
static_assert(mergeBytes(128) <= stages(128, 4) * kvStageBytes(128));
static_assert(mergeBytes(256) <= stages(256, 1) * kvStageBytes(256));
static_assert(smemBytes(256, 4) <= 232448, "fits the 227 KB per-block limit");
static_assert(ctasPerSm(128, 1) == 2 && ctasPerSm(128, 4) == 2 && ctasPerSm(64, 1) == 4 &&
              ctasPerSm(256, 1) == 1);
// rowTiles 2 at D 128: 2 stages x 32 KiB + 32 KiB of Q + 3.6 KiB = 99.6 KiB: 2 CTAs per SM (the
// register cap decides, as for rowTiles 1); its 128 rows are one per thread in the prologue.
static_assert(smemBytes(128, 4, kPrefillRowTiles) == 101952);
static_assert(ctasPerSm(128, 4, kPrefillRowTiles) == 2);
static_assert(maxRowsPerCta(kPrefillRowTiles) == kThreads, "the prologue gives each thread one row");
// The split plan sizes its wave with ctasPerSm(headDim, 1): the same for every warpsM, so the
// split boundaries do not depend on warpsM.
static_assert(ctasPerSm(64, 2) == ctasPerSm(64, 1) && ctasPerSm(64, 4) == ctasPerSm(64, 1) &&
              ctasPerSm(128, 2) == ctasPerSm(128, 1) && ctasPerSm(256, 2) == ctasPerSm(256, 1) &&
              ctasPerSm(256, 4) == ctasPerSm(256, 1));

}  // namespace es::kernel::splitkv
