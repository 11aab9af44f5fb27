#pragma once
// Commit of one speculative (or plain) decoding step on the device (spec §6): after the accept
// stage wrote each sequence's emitted tokens, advance its committed length and remember the
// token that becomes the next step's anchor — without a host round trip, so the whole step can
// be one CUDA graph.
//
// Sequence b emitted count_b = counts[b] + countOffset tokens (countOffset 0 for the greedy
// accept's acceptLengths, 1 for specVerify's numAccepted; counts == null means 1 each, plain
// decoding), clamped to [1, width]: the accept stages always emit at least the correction or
// bonus token, and the clamp keeps a corrupt count from indexing outside the row. Outputs:
//   emitCounts[b]      = count_b
//   newLengths[b]      = lengths[b] + count_b   (the rows 0 .. count_b - 1 of the verify become
//                                                committed context; the last token is pending)
//   anchorPositions[b] = newLengths[b] as i64   (absolute position of the next anchor, the
//                                                request-stable RNG counter of spec §3.6)
//   lastTokens[b]      = tokens[b * width + count_b - 1]
// Plain C++ header: no CUDA headers.
#include <cstdint>

#include "common/stream.h"

namespace es::kernel {

struct SpecCommitParams {
  const int32_t* counts = nullptr;     // [B] i32, or null (= 1 each)
  int32_t countOffset = 0;             // 0 or 1
  const int32_t* tokens = nullptr;     // [B, width] i32 emitted tokens, row-major
  const int32_t* lengths = nullptr;    // [B] i32 committed lengths before the step
  int32_t* emitCounts = nullptr;       // [B] i32 out (may alias counts when countOffset = 0)
  int32_t* newLengths = nullptr;       // [B] i32 out (must not alias lengths)
  int64_t* anchorPositions = nullptr;  // [B] i64 out, or null
  int32_t* lastTokens = nullptr;       // [B] i32 out
  int32_t batchSize = 0;               // B >= 0; 0 = no-op
  int32_t width = 0;                   // > 0, columns of tokens
};

bool validate(const SpecCommitParams& p);
void launchSpecCommit(const SpecCommitParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void specCommit(const kernel::SpecCommitParams& p);
}
