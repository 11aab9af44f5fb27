#pragma once
// Probabilistic verification of drafted chains (spec §3.7). Plain C++ header.
//
// For sequence b with L drafted tokens x_0..x_{L-1}: target row s (after temperature, top-k,
// top-p, exactly as kernels/sampling.h computes probabilities) gives p = P_s(x_s); the draft gives
// q = Q_s(x_s), or q = onehot(x_s) when draftProbs is null (argmax drafts such as DFlash).
// Accept iff p > 0 and u_acc[s] <= min(1, p / q) (alpha = 1 when q <= 1e-20). On the first
// reject sample from max(P_s - Q_s, 0) (from P_s when that mass <= 1e-20) with u_res[s] and stop;
// if all L are accepted sample a bonus token from row L with uBonus.
// With flagNonFinite a target row whose logits are not finite (kernels/sampling_non_finite.h)
// stops the chain there: its draft is rejected and its token is kNonFiniteToken.
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"
#include "kernels/sampling.h"

namespace es {

struct SpecVerifyParams {
  const void* targetLogits = nullptr;    // [batch, numDraft + 1, vocab] logitsDtype
  DType logitsDtype = DType::kF32;       // kF32 or kF16
  const int32_t* draftTokens = nullptr;  // [batch, draftTokensStride] i32 in [0, vocab), the
                                         // first numDraft of each row are read
  int32_t draftTokensStride = 0;         // elements between sequences; 0 = numDraft, else >= it
  const float* draftProbs = nullptr;     // [batch, draftProbsStride, vocab] f32 (row s of
                                         // sequence b: the draft's distribution of token s), or
                                         // null = onehot
  int32_t draftProbsStride = 0;          // rows between sequences; 0 = numDraft, else >= it
  int32_t batch = 0;
  int32_t numDraft = 0;  // L >= 0
  int32_t vocab = 0;

  // Target filtering, per sequence (arrays [batch], applied to all L + 1 rows) or scalar.
  float temperature = 1.0f;
  int32_t topK = 0;
  float topP = 1.0f;
  const float* temperatures = nullptr;  // [batch] f32 or null
  const int32_t* topKs = nullptr;       // [batch] i32 or null
  const float* topPs = nullptr;         // [batch] f32 or null
  TopPMode topPMode = TopPMode::kNucleus;

  // Uniforms, layout per sequence [accept x L | residual x L | bonus], or computed on the device
  // from seeds[b] and anchors[b] (absolute position s of the anchor token, spec §3.6).
  const float* uniforms = nullptr;   // [batch, 2 * numDraft + 1] f32 or null
  const uint64_t* seeds = nullptr;   // [batch] u64
  const int64_t* anchors = nullptr;  // [batch] i64

  int32_t* outTokens = nullptr;    // [batch, numDraft + 1] i32: accepted drafts, then the
                                   // residual / bonus token, then -1
  int32_t* numAccepted = nullptr;  // [batch] i32 in [0, numDraft]
  // true: the chain stops at a target row that is not finite, with kNonFiniteToken there (the
  // runtime turns it into an error); false: such a row is the uniform fallback (spec §3.3).
  bool flagNonFinite = false;

  void* workspace = nullptr;  // specVerifyWorkspaceBytes(*this) bytes of device memory
  size_t workspaceBytes = 0;
  SamplingPath path = SamplingPath::kAuto;  // path used for the target probabilities
};

void validateSpecVerifyParams(const SpecVerifyParams& p, const char* where);
size_t specVerifyWorkspaceBytes(const SpecVerifyParams& p);

namespace kernel {
void specVerify(const SpecVerifyParams& p, cudaStream_t stream);
}  // namespace kernel

namespace ref {
void specVerify(const SpecVerifyParams& p);  // host pointers
}  // namespace ref

}  // namespace es
