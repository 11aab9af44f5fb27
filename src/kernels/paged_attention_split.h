#pragma once
// Shape constants of the split-KV (flash-decoding) path of launchPagedAttention, shared by the
// host plan (paged_attention_args.cpp, every build) and the kernels (paged_attention.cu), so the
// plan's occupancy estimate and the kernel's shared-memory layout cannot drift apart. Plain C++.
//
// One CTA of 4 warps per (sequence, KV head, row block, KV split). Its rows are the "packed"
// (query row i, GQA head g) pairs m = i * group + g of one sequence and one KV head: one 16-row
// MMA tile, whose 4 warps split each 64-key tile of K/V between them (16 keys each). The same
// layout for every call, so a row's summation order does not depend on how many rows came with
// it (decode = verify, bit for bit). K/V tiles stream through a ring of `stages` shared-memory
// buffers with 16-byte cp.async; Q sits in shared memory.
#include <cstdint>

namespace es::kernel::splitkv {

inline constexpr int32_t kTileKeys = 64;        // keys per K/V tile (half a 128-token page)
inline constexpr int32_t kThreads = 128;        // 4 warps
inline constexpr int32_t kRowsPerCta = 16;      // one tensor-core row tile
inline constexpr int32_t kElemBytes = 2;        // bf16 / f16 only
inline constexpr int64_t kSmPerSm = 233472;     // 228 KB shared memory per SM (sm_90)
inline constexpr int64_t kSmReservedPerCta = 1024;

// Per-row bookkeeping (RowInfo in the kernel: int64 row-head index, lo, hi, tree word, pad),
// merge statistics (4 warps x 16 rows x float2) and a few flags.
inline constexpr int64_t kMiscBytes = int64_t{kRowsPerCta} * 24 + 4 * 16 * 8 + 64;

// Two stages where one CTA needs the most shared memory (D 256), three otherwise.
constexpr int32_t stages(int32_t headDim) { return headDim == 256 ? 2 : 3; }
// __launch_bounds__ minimum blocks per SM (register cap 65536 / (128 * blocks)).
constexpr int32_t minBlocks(int32_t headDim) { return headDim == 64 ? 4 : headDim == 128 ? 2 : 1; }

constexpr int64_t kvStageBytes(int32_t headDim) {
  return int64_t{2} * kTileKeys * headDim * kElemBytes;  // K tile + V tile
}
constexpr int64_t smemBytes(int32_t headDim) {
  return stages(headDim) * kvStageBytes(headDim) + int64_t{kRowsPerCta} * headDim * kElemBytes +
         kMiscBytes;
}
// The merge buffer of the epilogue ([4 warps][16 rows][headDim + 4] f32) reuses the K/V ring.
constexpr int64_t mergeBytes(int32_t headDim) { return int64_t{4} * 16 * (headDim + 4) * 4; }

constexpr int32_t ctasPerSm(int32_t headDim) {
  const int64_t by_smem = kSmPerSm / (smemBytes(headDim) + kSmReservedPerCta);
  const int64_t by_regs = minBlocks(headDim);
  return static_cast<int32_t>(by_smem < by_regs ? by_smem : by_regs);
}

static_assert(mergeBytes(64) <= stages(64) * kvStageBytes(64));
static_assert(mergeBytes(128) <= stages(128) * kvStageBytes(128));
static_assert(mergeBytes(256) <= stages(256) * kvStageBytes(256));
static_assert(smemBytes(256) <= 232448, "fits the 227 KB per-block limit");
static_assert(ctasPerSm(128) == 2 && ctasPerSm(64) == 4 && ctasPerSm(256) == 1);

}  // namespace es::kernel::splitkv
