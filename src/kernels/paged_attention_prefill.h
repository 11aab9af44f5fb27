#pragma once
// The warpgroup-MMA (wgmma, sm_90a) kernel for causal / bidirectional prefill over the paged KV
// pool: the launcher's choice for every call that the split-KV plan gives the prefill row tiles
// (paged_attention.h: maxQSeqLen > 16, head dim 128, f16/bf16, no packed tree, at least 128
// packed rows a sequence, one split; reported as rowTiles 2 at warpsM 4), however few CTAs that
// makes: a 128-row suffix after a long cached prefix (32 CTAs at Qwen3-8B's 8 KV heads) runs
// faster in these 128-row CTAs than in twice as many 64-row mma.sync CTAs. Internal to
// launchPagedAttention; every rule of paged_attention.h (masks, windows, padding rows, rows in no
// sequence, unmapped pages) holds.
//
// One CTA of two warpgroups per (sequence, KV head, block of 128 packed rows), the last blocks
// first; warpgroup w computes packed rows [64 w, 64 w + 64) (m = query row * group + GQA head, as
// the split-KV kernel packs them) against 128-key tiles (one page of one KV head each):
//   S = Q K^T     8 x wgmma m64n128k16, Q and K from shared memory (K-major, 128-byte swizzle)
//   softmax       per row in registers, fp32, exp2 domain with the scale folded into the FMA
//   O += P V      8 x wgmma m64n128k16, P from registers (rounded to the storage type), V from
//                 shared memory (MN-major)
// Each warpgroup issues S of tile t with P V of tile t - 1 and runs tile t's softmax while P V is
// on the tensor cores; the two warpgroups take turns to issue (ping-pong) and load their halves of
// each K/V tile with 16-byte cp.async into an mbarrier-guarded ring, one tile ahead
// (paged_attention_prefill.cu's header has the details).
#include <cstdint>

#include "common/stream.h"
#include "kernels/paged_attention.h"

namespace es::kernel::detail {

// Whether launchPrefillWgmma takes a call that the split-KV plan gave `plan` (host only).
bool prefillWgmmaApplies(const PagedAttentionParams& p, const PagedAttentionPlan& plan);

// Runs the call (prefillWgmmaApplies(p, plan) must hold; plan.rowBlocks sizes the grid).
void launchPrefillWgmma(const PagedAttentionParams& p, const PagedAttentionPlan& plan,
                        cudaStream_t stream);

}  // namespace es::kernel::detail
