#pragma once
// DFlash base (target) verification inputs (spec §2.7, §2.9):
//   launchDFlashPrepareBaseVerifyInputs  — positions, select indices, context lengths, causal mask
//   launchDFlashBuildLinearVerifyInputs  — verify tokens [anchor, draft rows 1..S-1] + int8 mask
// One CTA per sequence, one thread per verify row (so S <= kDFlashMaxBlockSize).
//
// Plain C++ header: no CUDA headers.
#include <cstdint>

#include "common/stream.h"
#include "kernels/dflash_metadata.h"

namespace es::kernel {

// §2.7
struct DFlashBaseVerifyInputsParams {
  const int32_t* baseKVCacheLengths = nullptr;  // [B] i32 committed base cache lengths
  int32_t verifySize = 0;                       // S, 0 < S <= kDFlashMaxBlockSize
  int32_t* packedAttentionMask = nullptr;       // [B, S, ceil(S/32)] i32 out, row i = bits [0, i]
  int32_t* attentionPosId = nullptr;            // [B, S] i32 out: baseLen_b + i
  int64_t* selectTokenIndices = nullptr;        // [B, S] i64 out: b * S + i
  int32_t* contextLengths = nullptr;            // [B] i32 out: baseLen_b + S
  int32_t batchSize = 0;                        // B >= 0; 0 = no-op
};

// §2.9. Draft row i predicts block slot i (row 0 re-predicts the anchor), so verify slot i >= 1
// takes draft row i; row 0 is skipped, never compacted away.
struct DFlashLinearVerifyInputsParams {
  const int32_t* lastAcceptedTokens = nullptr;  // [B] i32 anchor token per sequence
  const int32_t* draftTokenIds =
      nullptr;  // [B, draftTokenStride] i32 draft argmax rows (row 0 included)
  int32_t* verifyTokenIds = nullptr;  // [B, S] i32 out
  int8_t* verifyTreeMask = nullptr;   // [B, S, S] i8 out: (c <= r)
  int32_t batchSize = 0;              // B >= 0; 0 = no-op
  int32_t proposalLen = 0;            // >= 0, = S - 1
  int32_t draftTokenStride = 0;       // >= S (slot S-1 reads draft row S-1)
  int32_t verifySize = 0;             // S = proposalLen + 1 <= kDFlashMaxBlockSize
};

// Host validation (every build): es::InvalidArgument naming launcher, argument, value, limit;
// false = no-op.
bool validate(const DFlashBaseVerifyInputsParams& p);
bool validate(const DFlashLinearVerifyInputsParams& p);

// Launchers (CUDA builds): validate, one launch, check.
void launchDFlashPrepareBaseVerifyInputs(const DFlashBaseVerifyInputsParams& p,
                                         cudaStream_t stream);
void launchDFlashBuildLinearVerifyInputs(const DFlashLinearVerifyInputsParams& p,
                                         cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {

void dflashPrepareBaseVerifyInputs(const kernel::DFlashBaseVerifyInputsParams& p);
void dflashBuildLinearVerifyInputs(const kernel::DFlashLinearVerifyInputsParams& p);

}  // namespace es::ref
