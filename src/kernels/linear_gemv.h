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
  // outputs are the same either way.
  int32_t normCtasPerSm = 2;
};

inline constexpr int32_t kGemvWarps = 8;  // warps per CTA (256 threads)

// The launcher's configuration for an n x k weight on a device with numSms multiprocessors, at
// every m (linear_args.cpp, so the rule is tested in every build). The grid wants 1.5 CTAs per
// SM; with tiles1 = ceil(n / 16) one-tile and tiles2 = ceil(n / 32) two-tile CTA columns:
//   split1 = the smallest kSplit of 1, 2, 4, 8 giving the CTAs wanted with one tile per CTA,
//            capped so that every warp still has at least one 32-element K block;
//   split2 = the same with two tiles per CTA, if any split up to that cap reaches it.
// The first that applies:
//   1. split2 == split1: rowTiles 2, kSplit split1 (two tiles cost no split; Qwen3-8B gate_up
//      and lm_head);
//   2. the one-tile grid is thin (< 2.5 CTAs an SM) and split2 leaves each warp >= 8 K blocks:
//      rowTiles 2, kSplit split2 (Qwen3-8B o and down);
//   3. split1 == 1, k <= 2048 (a one-tile CTA streams at most 64 KiB of W, so its fixed costs
//      weigh) and the two-tile grid reaches 31/32 of the SMs: rowTiles 2, kSplit 1 (Qwen3-0.6B
//      qkv and gate_up);
//   4. otherwise: rowTiles 1, kSplit split1 (Qwen3-0.6B o and down: kSplit 4).
// The configuration does not depend on m, so each output is summed in the same order at every m
// (row-invariant: the rows of a 16-row verify equal 1-row decodes bit for bit).
// normCtasPerSm = 3 where one tile per CTA at kSplit needs more than one wave of 2 CTAs an SM and
// each CTA streams a long W row block (k >= 2048: 64 KiB and more), else 2: the third CTA an SM
// pays for its spills only where a second wave would otherwise wait.
GemvConfig chooseGemvConfig(int32_t n, int32_t k, int32_t numSms);

// The CTAs an SM the launched instance of cfg is compiled for (its __launch_bounds__, so its
// register budget): 2 at rowTiles 2; at rowTiles 1, 3 without a fused input norm (norm false)
// and cfg.normCtasPerSm with one. launchLinearGemv and gemvFillsSms both ask this.
int32_t gemvCtasPerSm(const GemvConfig& cfg, bool norm);

// Whether the gemv of cfg for m x n (norm: with a fused input norm) needs every CTA slot of some
// SMs, each slot a CTA can take only when the SM holds nothing else: at m > 8 (two n8 tiles of x)
// every instance's full complement of CTAs takes 61,440-65,536 of an SM's 65,536 registers
// (ptxas: 114-128 registers a thread at rowTiles 2 and with a norm at 2 an SM, 80 at 3 an SM; 256
// threads a CTA), so any other kernel's CTA still resident (the split-KV combine's: 128 threads x
// 80 registers) keeps one out, and the grid needs them all where it has more CTAs than one fewer
// an SM would hold. Then the kernel before it should let it in only when its own CTAs are done
// (paged_attention.h, nextFillsSms). Qwen3-8B's 16-row o gemv (two tiles, kSplit 2: 256 CTAs at
// 2 an SM) does; Qwen3-0.6B's (one tile, kSplit 4: 256 CTAs at 3 an SM) does not.
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
