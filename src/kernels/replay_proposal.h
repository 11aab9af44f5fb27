#pragma once
// The replay draft's proposal (tests and benchmarks only): propose the tokens a
// previously recorded greedy run produced, so the speculative loop can be driven at any
// acceptance rate on a real target without a trained draft.
//
// Block row r = b·BS + i of sequence b (page-table row b):
//   i = 0   anchors[b]                               (row 0 re-predicts the anchor, spec §2.9)
//   i >= 1  recorded[b·stride + p] for p = positions[r] (the absolute position the verify will
//           place this draft at), or 0 when p is outside [0, recordedLengths[b]);
//           replaced by (token + 1) mod vocab when request_uniform(seed, p, kProposal, 0) <
//           corruptRate — a deterministic, request-stable corruption that exercises partial
//           acceptance.
// Plain C++ header: no CUDA headers.
#include <cstdint>

#include "common/stream.h"

namespace es::kernel {

struct ReplayProposalParams {
  const int32_t* recorded = nullptr;         // [B, stride] i32 recorded token at each position
  const int32_t* recordedLengths = nullptr;  // [B] i32 valid positions per row (<= stride)
  int32_t stride = 0;                        // > 0
  const int32_t* anchors = nullptr;          // [B] i32
  const int32_t* positions = nullptr;        // [B * BS] i32 absolute position of each block row
  int32_t* out = nullptr;                    // [B * BS] i32 proposal, row 0 included
  int32_t batchSize = 0;                     // B >= 0; 0 = no-op
  int32_t blockSize = 0;                     // BS > 0
  int32_t vocab = 0;                         // > 0
  float corruptRate = 0.0f;                  // [0, 1]
  uint64_t seed = 0;
};

bool validate(const ReplayProposalParams& p);
void launchReplayProposal(const ReplayProposalParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void replayProposal(const kernel::ReplayProposalParams& p);
}
