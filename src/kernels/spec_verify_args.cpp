// Host validation of SpecVerifyParams and its workspace size (every build).
#include <algorithm>

#include "common/errors.h"
#include "kernels/sampling_layout.h"
#include "kernels/spec_verify.h"
#include "kernels/sampling_math.h"
#include "kernels/spec_verify_layout.h"

namespace es {

void validate_spec_verify_params(const SpecVerifyParams& p, const char* where) {
  ES_CHECK_ARG(p.batch >= 0, where, "batch", p.batch, "must be >= 0");
  ES_CHECK_ARG(p.num_draft >= 0, where, "num_draft", p.num_draft, "must be >= 0");
  ES_CHECK_ARG(p.draft_tokens_stride == 0 || p.draft_tokens_stride >= p.num_draft, where,
               "draft_tokens_stride", p.draft_tokens_stride, "must be 0 or >= num_draft = ", p.num_draft);
  ES_CHECK_ARG(p.draft_probs_stride == 0 || p.draft_probs_stride >= p.num_draft, where,
               "draft_probs_stride", p.draft_probs_stride, "must be 0 or >= num_draft = ", p.num_draft);
  // The target rows are validated as one sampling batch of batch * (num_draft + 1) rows.
  SamplingParams s = spec_verify::target_sampling_params(p);
  validate_sampling_params(s, where);
  if (p.batch == 0) return;
  ES_CHECK_ARG(p.target_logits != nullptr, where, "target_logits", "null", "must be non-null");
  ES_CHECK_ARG(p.num_draft == 0 || p.draft_tokens != nullptr, where, "draft_tokens", "null",
               "must be non-null when num_draft > 0");
  ES_CHECK_ARG(p.out_tokens != nullptr, where, "out_tokens", "null", "must be non-null");
  ES_CHECK_ARG(p.num_accepted != nullptr, where, "num_accepted", "null", "must be non-null");
  if (p.uniforms == nullptr) {
    ES_CHECK_ARG(p.seeds != nullptr && p.anchors != nullptr, where, "uniforms", "null",
                 "requires seeds and anchors to compute request uniforms");
  }
}

size_t spec_verify_workspace_bytes(const SpecVerifyParams& p) {
  return spec_verify::plan(p).workspace_bytes;
}

namespace spec_verify {

SamplingParams target_sampling_params(const SpecVerifyParams& p) {
  SamplingParams s;
  s.logits = p.target_logits;
  s.logits_dtype = p.logits_dtype;
  s.batch = p.batch * (p.num_draft + 1);
  s.vocab = p.vocab;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  // Per-sequence arrays are expanded per row by the verify launcher (rows_per_seq); for the
  // host-side plan only their presence matters.
  s.temperatures = p.temperatures;
  s.top_ks = p.top_ks;
  s.top_ps = p.top_ps;
  s.top_p_mode = p.top_p_mode;
  s.uniforms = reinterpret_cast<const float*>(1);  // probabilities only: uniforms unused
  s.probs = reinterpret_cast<float*>(1);
  s.path = p.path;
  return s;
}

VerifyPlan plan(const SpecVerifyParams& p) {
  VerifyPlan v;
  const SamplingParams s = target_sampling_params(p);
  const int64_t rows = static_cast<int64_t>(s.batch);
  v.rows = rows;
  v.general = sampling::plan_general(s);
  const bool small = p.path == SamplingPath::kSmallVocab ||
                     (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  // Every target row's status and, for a list row, its draft's test and stop token.
  v.rows_offset = align(v.general.workspace_bytes);
  v.rows_bytes = static_cast<size_t>(rows) * sizeof(VerifyRow);
  v.dense_offset = align(v.rows_offset + v.rows_bytes);
  // Dense target probabilities for rows that keep more than 512 entries (full-row mode, or the
  // small-vocab full sort). Needed only when such rows can occur.
  bool dense = v.general.any_full;
  if (small) {
    if (p.top_ks != nullptr) {
      dense = true;
    } else {
      const sampling::RowParams r =
          sampling::make_row_params(1.0f, p.top_k, 1.0f, p.vocab);
      dense = r.k > kMaxCandidateTopK;
    }
  }
  v.dense_bytes = dense ? static_cast<size_t>(rows) * p.vocab * sizeof(float) : 0;
  v.workspace_bytes = v.dense_offset + v.dense_bytes;
  return v;
}

}  // namespace spec_verify
}  // namespace es
