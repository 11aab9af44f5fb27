#pragma once
// Shape constants of the split-KV (flash-decoding) path of launchPagedAttention, shared by the
// host plan (paged_attention_args.cpp, every build) and the kernels (paged_attention.cu), so the
// plan's occupancy estimate and the kernel's shared-memory layout cannot drift apart. Plain C++.
//
// One CTA of 4 warps per (sequence, KV head, row block, KV split). Its rows are the "packed"
// (query row i, GQA head g) pairs m = i * group + g of one sequence and one KV head, 16 per MMA
// tile; the CTA holds warpsM tiles (1, 2 or 4) and the 4 warps are arranged warpsM x (4/warpsM):
// warps of one row tile split each 64-key tile of K/V between them. K/V tiles stream through a
// ring of `stages` shared-memory buffers with 16-byte cp.async; Q sits in shared memory.
// A row's summation order depends on warpsM (4 / warpsM warps share its keys): batch-1 calls of
// up to 16 rows always take warpsM = 1, so a verify row equals the decode row bit for bit there.
#include <cstdint>

namespace es::kernel::splitkv {

inline constexpr int32_t kTileKeys = 64;        // keys per K/V tile (half a 128-token page)
inline constexpr int32_t kThreads = 128;        // 4 warps
inline constexpr int32_t kMaxRowsPerCta = 64;   // 16 * max warpsM
inline constexpr int32_t kElemBytes = 2;        // bf16 / f16 only
inline constexpr int64_t kSmPerSm = 233472;     // 228 KB shared memory per SM (sm_90)
inline constexpr int64_t kSmReservedPerCta = 1024;

// Per-row bookkeeping (RowInfo in the kernel: int64 row-head index, lo, hi, tree word, pad),
// merge statistics (4 warps x 16 rows x float2) and a few flags.
inline constexpr int64_t kMiscBytes = int64_t{kMaxRowsPerCta} * 24 + 4 * 16 * 8 + 64;

// Two stages where one CTA needs the most shared memory (D 256) or computes the most per tile
// (4 row tiles), three otherwise.
constexpr int32_t stages(int32_t headDim, int32_t warpsM) {
  return headDim == 256 || warpsM == 4 ? 2 : 3;
}
// __launch_bounds__ minimum blocks per SM (register cap 65536 / (128 * blocks)).
constexpr int32_t minBlocks(int32_t headDim) { return headDim == 64 ? 4 : headDim == 128 ? 2 : 1; }

constexpr int64_t kvStageBytes(int32_t headDim) {
  return int64_t{2} * kTileKeys * headDim * kElemBytes;  // K tile + V tile
}
constexpr int64_t smemBytes(int32_t headDim, int32_t warpsM) {
  return stages(headDim, warpsM) * kvStageBytes(headDim) +
         int64_t{16} * warpsM * headDim * kElemBytes + kMiscBytes;
}
// The merge buffer of the epilogue ([4 warps][16 rows][headDim + 4] f32) reuses the K/V ring.
constexpr int64_t mergeBytes(int32_t headDim) { return int64_t{4} * 16 * (headDim + 4) * 4; }

constexpr int32_t ctasPerSm(int32_t headDim, int32_t warpsM) {
  const int64_t by_smem = kSmPerSm / (smemBytes(headDim, warpsM) + kSmReservedPerCta);
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
// The split plan sizes its wave with ctasPerSm(headDim, 1): the same for every warpsM, so the
// split boundaries do not depend on warpsM.
static_assert(ctasPerSm(64, 2) == ctasPerSm(64, 1) && ctasPerSm(64, 4) == ctasPerSm(64, 1) &&
              ctasPerSm(128, 2) == ctasPerSm(128, 1) && ctasPerSm(256, 2) == ctasPerSm(256, 1) &&
              ctasPerSm(256, 4) == ctasPerSm(256, 1));

}  // namespace es::kernel::splitkv
