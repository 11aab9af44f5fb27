#pragma once
// Greedy EAGLE-style accept over a verify tree (spec §2 "Accept").
//
// Node 0 (the anchor) is always accepted. From the current node, move to the child whose verify
// token equals the current node's target top-1 (the lowest-numbered such child when several
// match), until no child matches. Outputs, per sequence, the target top-1 of each node on the
// path (the last one is the correction/bonus token), the path's node ids, and
// acceptLength = matched + 1 clamped to [0, remaining budget]. Entries past acceptLength are -1.
// Linear chains (DFlash) pass no parents: node i's parent is i - 1.
//
// Plain C++ header: no CUDA headers.
#include <cstdint>

#include "common/stream.h"

namespace es::kernel {

struct EagleAcceptParams {
  const int32_t* targetTopIds = nullptr;  // [B, S] i32 target argmax at each verify node
  const int32_t* verifyTokenIds =
      nullptr;                             // [B, S] i32 token of each verify node (node 0 = anchor)
  const int32_t* treeParentIds = nullptr;  // [B, S] i32 parent node, -1 for the root; null = chain
  const int32_t* remainingBudget = nullptr;  // [B] i32 tokens the sequence may still emit; null = S
  int32_t* acceptedTokens = nullptr;         // [B, S] i32 out: top-1 along the path, then -1
  int32_t* acceptedNodeIds = nullptr;        // [B, S] i32 out: path node ids, then -1
  int32_t* acceptLengths = nullptr;          // [B] i32 out: min(matched + 1, max(budget, 0))
  int32_t batchSize = 0;                     // B >= 0; 0 = no-op
  int32_t verifySize = 0;                    // S > 0 verify nodes per sequence
};

// Host validation (every build): es::InvalidArgument naming launchEagleAccept, the argument, its
// value and the limit; false = no-op.
bool validate(const EagleAcceptParams& p);

// One warp per sequence (CUDA builds): validate, launch, check.
void launchEagleAccept(const EagleAcceptParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {

void eagleAccept(const kernel::EagleAcceptParams& p);

}  // namespace es::ref
