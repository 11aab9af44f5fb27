// Host validation of SpecVerifyParams and its workspace size (every build).
#include <algorithm>

#include "common/errors.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"
#include "kernels/spec_verify.h"
#include "kernels/spec_verify_layout.h"

namespace es {

void validateSpecVerifyParams(const SpecVerifyParams& p, const char* where) {
  ES_CHECK_ARG(p.batch >= 0, where, "batch", p.batch, "must be >= 0");
  ES_CHECK_ARG(p.numDraft >= 0, where, "num_draft", p.numDraft, "must be >= 0");
  ES_CHECK_ARG(p.draftTokensStride == 0 || p.draftTokensStride >= p.numDraft, where,
               "draft_tokens_stride", p.draftTokensStride,
               "must be 0 or >= num_draft = ", p.numDraft);
  ES_CHECK_ARG(p.draftProbsStride == 0 || p.draftProbsStride >= p.numDraft, where,
               "draft_probs_stride", p.draftProbsStride,
               "must be 0 or >= num_draft = ", p.numDraft);
  // The target rows are validated as one sampling batch of batch * (numDraft + 1) rows.
  SamplingParams s = specVerify::targetSamplingParams(p);
  validateSamplingParams(s, where);
  if (p.batch == 0) return;
  ES_CHECK_ARG(p.targetLogits != nullptr, where, "target_logits", "null", "must be non-null");
  ES_CHECK_ARG(p.numDraft == 0 || p.draftTokens != nullptr, where, "draft_tokens", "null",
               "must be non-null when num_draft > 0");
  ES_CHECK_ARG(p.outTokens != nullptr, where, "out_tokens", "null", "must be non-null");
  ES_CHECK_ARG(p.numAccepted != nullptr, where, "num_accepted", "null", "must be non-null");
  if (p.uniforms == nullptr) {
    ES_CHECK_ARG(p.seeds != nullptr && p.anchors != nullptr, where, "uniforms", "null",
                 "requires seeds and anchors to compute request uniforms");
  }
}

size_t specVerifyWorkspaceBytes(const SpecVerifyParams& p) {
  return specVerify::plan(p).workspaceBytes;
}

namespace specVerify {

SamplingParams targetSamplingParams(const SpecVerifyParams& p) {
  SamplingParams s;
  s.logits = p.targetLogits;
  s.logitsDtype = p.logitsDtype;
  s.batch = p.batch * (p.numDraft + 1);
  s.vocab = p.vocab;
  s.temperature = p.temperature;
  s.topK = p.topK;
  s.topP = p.topP;
  // Per-sequence arrays are expanded per row by the verify launcher (rows_per_seq); for the
  // host-side plan only their presence matters.
  s.temperatures = p.temperatures;
  s.topKs = p.topKs;
  s.topPs = p.topPs;
  s.topPMode = p.topPMode;
  s.uniforms = reinterpret_cast<const float*>(1);  // probabilities only: uniforms unused
  s.probs = reinterpret_cast<float*>(1);
  s.path = p.path;
  return s;
}

VerifyPlan plan(const SpecVerifyParams& p) {
  VerifyPlan v;
  const SamplingParams s = targetSamplingParams(p);
  const int64_t rows = static_cast<int64_t>(s.batch);
  v.rows = rows;
  v.general = sampling::planGeneral(s);
  const bool small = p.path == SamplingPath::kSmallVocab ||
                     (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  // Every target row's status and, for a list row, its draft's test and stop token.
  v.rowsOffset = align(v.general.workspaceBytes);
  v.rowsBytes = static_cast<size_t>(rows) * sizeof(VerifyRow);
  v.denseOffset = align(v.rowsOffset + v.rowsBytes);
  // Dense target probabilities for rows that keep more than 512 entries (full-row mode, or the
  // small-vocab full sort). Needed only when such rows can occur.
  bool dense = v.general.anyFull;
  if (small) {
    if (p.topKs != nullptr) {
      dense = true;
    } else {
      const sampling::RowParams r = sampling::makeRowParams(1.0f, p.topK, 1.0f, p.vocab);
      dense = r.k > kMaxCandidateTopK;
    }
  }
  v.denseBytes = dense ? static_cast<size_t>(rows) * p.vocab * sizeof(float) : 0;
  v.workspaceBytes = v.denseOffset + v.denseBytes;
  return v;
}

}  // namespace specVerify
}  // namespace es
