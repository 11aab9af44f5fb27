#pragma once
// The decode ("gemv") path of the linear layer, for launchLinear's dispatch, the tests and the
// benchmark; plain C++ (no CUDA headers). See linear_gemv.cu for the kernel's design.
//
// Work split: one CTA of 8 warps owns 16 * rowTiles output features (rows of W) for every one of
// the m <= 16 rows of x; `kSplit` CTAs (one thread-block cluster, 1, 2, 4 or 8) split K between
// them, and inside a CTA the 8 warps split it again, in 32-element blocks dealt round-robin.
// Partial sums meet in shared memory (the cluster's through distributed shared memory) and are
// added in a fixed order: the result does not depend on timing, and no atomics are used.
#include <cstdint>

#include "common/stream.h"
#include "kernels/linear.h"

namespace es::kernel::detail {

struct GemvConfig {
  int32_t rowTiles = 1;  // 16-row tiles of W per CTA: 1 or 2
  int32_t kSplit = 1;    // CTAs per cluster splitting K: 1, 2, 4 or 8
  // CTAs an SM the one-tile instances with a fused input norm (LinearParams::normWeight) are
  // compiled for: 2 (no spills) or 3 (80 registers, 16-52 bytes of spills). Occupancy only: the
  // outputs are the same either way. ES_GEMV_NORM_CTAS_PER_SM=2 or 3 (read once) overrides it.
  int32_t normCtasPerSm = 2;
};

inline constexpr int32_t kGemvWarps = 8;  // warps per CTA (256 threads)

// The launcher's choice for an m x n x k problem on a device with numSms multiprocessors
// (linear_args.cpp, so the rule is tested in every build). CTAs wanted: 1.5 per SM.
//   kOneTile (the first rule; ES_GEMV_RULE=onetile):
//     kSplit   = the smallest of 1, 2, 4, 8 giving the CTAs wanted with one 16-row tile per CTA,
//     capped so that every warp still has at least one 32-element K block;
//     rowTiles = 2 when m > 4 (x, read from L2 once per CTA, then costs at most half of W's
//     traffic) unless that leaves fewer CTAs than wanted, else 1.
//   kWideTiles (session 12's rule; ES_GEMV_RULE=wide): rowTiles 2 at every m, with kSplit the
//     smallest giving the CTAs wanted with two tiles, where that split equals kOneTile's, or where
//     kOneTile's grid has fewer than 2.5 CTAs an SM and each warp keeps >= 8 K blocks; else
//     kOneTile's choice.
// Either way kSplit does not depend on m: each output is then summed in the same order at every
// m (row-invariant: the rows of a 16-row verify equal 1-row decodes bit for bit).
// normCtasPerSm = 3 where one tile per CTA needs more than one wave of 2 CTAs an SM and each CTA
// streams a long W row block (k >= 2048: 64 KiB and more), else 2. Measured (docs/perf.md,
// session 15) against the fusion off: 2 an SM everywhere gave Qwen3-0.6B +9.9 % and Qwen3-8B
// -0.4 to -2.9 % (its 384-CTA qkv gemv, k 4096, in two waves); 3 everywhere +6.2 to +6.9 % and
// +0.7 %; 3 for every grid over one wave (0.6B's 384-CTA gate/up, k 1024, too) +8.8 % and +0.9 %.
//   kShortK (the default since session 18): kWideTiles, and also two tiles with no K split where
//     kOneTile's split is 1, k <= 2048 (a one-tile CTA streams at most 64 KiB of W, so its fixed
//     costs weigh) and the two-tile grid still reaches 31/32 of the SMs: Qwen3-0.6B's qkv (4.39
//     against 5.07 us alone at m = 1, session 12's sweep) and gate_up (5.16 against 5.45); no
//     Qwen3-8B shape (k >= 4096). In the engine: Qwen3-0.6B decode 1,310 / 1,318 -> 1,333 /
//     1,348 tok/s, its 16-row verify forward 0.934 -> 0.899 ms (docs/perf.md, session 18).
enum class GemvRule { kOneTile, kWideTiles, kShortK };
GemvConfig chooseGemvConfig(int32_t m, int32_t n, int32_t k, int32_t numSms,
                            GemvRule rule = GemvRule::kShortK);

// The CTAs an SM the launched instance of cfg is compiled for (its __launch_bounds__, so its
// register budget): 2 at rowTiles 2; at rowTiles 1, 3 without a fused input norm (norm false)
// and cfg.normCtasPerSm with one, unless ES_GEMV_NORM_CTAS_PER_SM (read once) forces 2 or 3
// there (InvalidArgument for other values). launchLinearGemv and gemvFillsSms both ask this.
int32_t gemvCtasPerSm(const GemvConfig& cfg, bool norm);

// Whether the gemv of cfg for m x n (norm: with a fused input norm) needs every CTA slot of some
// SMs, each slot a CTA can take only when the SM holds nothing else: at m > 8 (two n8 tiles of x)
// every instance's full complement of CTAs takes 61,440-65,536 of an SM's 65,536 registers
// (ptxas: 114-128 registers a thread at rowTiles 2 and with a norm at 2 an SM, 80 at 3 an SM; 256
// threads a CTA), so any other kernel's CTA still resident (the split-KV combine's: 128 threads x
// 80 registers) keeps one out, and the grid needs them all where it has more CTAs than one fewer
// an SM would hold. Then the kernel before it should let it in only when its own CTAs are done
// (paged_attention.h, nextFillsSms). Qwen3-8B's 16-row o gemv (two tiles, kSplit 2: 256 CTAs at
// 2 an SM) does; Qwen3-0.6B's (one tile, kSplit 4: 256 CTAs at 3 an SM) does not (docs/perf.md,
// session 17).
bool gemvFillsSms(const GemvConfig& cfg, int32_t m, int32_t n, bool norm, int32_t numSms);

// What the gemv does with each output before storing it.
//   kNone    y[m, n] = x · W^T + bias, rounded once.
//   kSwiglu  W (and bias) hold gate/up rows in GateUpLayout::kInterleaved8 (swiglu.h; n % 16 == 0,
//            y in the input dtype): y[m, n / 2] = SwiGLU of the rounded gate and up outputs,
//            bit for bit what kNone followed by launchSwiglu would give (gate_up_swiglu.h).
enum class GemvEpilogue { kNone, kSwiglu };

// Validates p (validate + gemvSupported) and cfg, then launches (linear_gemv.cu, CUDA builds).
// No allocation, no synchronisation, no host reads of device memory: capturable in a CUDA graph.
void launchLinearGemv(const LinearParams& p, GemvConfig cfg, cudaStream_t stream,
                      GemvEpilogue epilogue = GemvEpilogue::kNone);

}  // namespace es::kernel::detail
