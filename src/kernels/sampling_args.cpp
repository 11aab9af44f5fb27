// Host validation of SamplingParams (every build) and the workspace size of the general path.
#include <algorithm>
#include <cmath>
#include <string>

#include "common/errors.h"
#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es {

void validate_sampling_params(const SamplingParams& p, const char* where) {
  ES_CHECK_ARG(p.batch >= 0, where, "batch", p.batch, "must be >= 0");
  ES_CHECK_ARG(p.vocab > 0, where, "vocab", p.vocab, "must be > 0");
  ES_CHECK_ARG(p.vocab <= sampling::kMaxVocab, where, "vocab", p.vocab, "must be <= ",
               sampling::kMaxVocab);
  ES_CHECK_ARG(p.logits_dtype == DType::kF32 || p.logits_dtype == DType::kF16, where,
               "logits_dtype", dtype_name(p.logits_dtype), "must be f32 or f16");
  if (p.temperatures == nullptr) {
    ES_CHECK_ARG(p.temperature >= 0.0f, where, "temperature", p.temperature,
                 "must be >= 0 (and not NaN)");
  }
  if (p.top_ps == nullptr) {
    ES_CHECK_ARG(p.top_p > 0.0f && p.top_p <= 1.0f, where, "top_p", p.top_p,
                 "must be in (0, 1]");
  }
  ES_CHECK_ARG(p.top_p_mode == TopPMode::kNucleus || p.top_p_mode == TopPMode::kTruncate, where,
               "top_p_mode", static_cast<int>(p.top_p_mode), "must be kNucleus or kTruncate");
  ES_CHECK_ARG(p.path == SamplingPath::kAuto || p.path == SamplingPath::kGeneral ||
                   p.path == SamplingPath::kSmallVocab,
               where, "path", static_cast<int>(p.path), "must be kAuto, kGeneral or kSmallVocab");
  if (p.path == SamplingPath::kSmallVocab) {
    ES_CHECK_ARG(p.vocab <= kSmallVocabMax, where, "vocab", p.vocab,
                 "must be <= ", kSmallVocabMax, " for the small-vocab path");
  }
  if (p.batch == 0) return;
  ES_CHECK_ARG(p.logits != nullptr, where, "logits", "null", "must be non-null");
  ES_CHECK_ARG(p.tokens != nullptr || p.probs != nullptr, where, "tokens", "null",
               "and probs both null: nothing to compute");
  if (p.tokens != nullptr && p.uniforms == nullptr) {
    ES_CHECK_ARG(p.seeds != nullptr && p.positions != nullptr, where, "uniforms", "null",
                 "requires seeds and positions to compute request uniforms");
  }
}

size_t sampling_workspace_bytes(const SamplingParams& p) {
  const sampling::GeneralPlan plan = sampling::plan_general(p);
  return plan.workspace_bytes;
}

namespace sampling {

GeneralPlan plan_general(const SamplingParams& p) {
  GeneralPlan plan;
  if (p.batch <= 0 || p.vocab <= 0) return plan;
  const bool small = p.path == SamplingPath::kSmallVocab ||
                     (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  if (small) return plan;
  // Candidate cap per chunk: the scalar top-k when it is known on the host, else the maximum.
  int32_t kcap = kMaxCandidateTopK;
  if (p.top_ks == nullptr) {
    const RowParams r = make_row_params(p.temperatures ? 1.0f : p.temperature, p.top_k, 1.0f,
                                        p.vocab);
    const bool greedy_all = p.temperatures == nullptr && r.greedy;
    const int32_t k = greedy_all ? 1 : r.k;
    if (k > kMaxCandidateTopK) {
      // Only greedy rows (per-row temperatures) could use candidates; keep it simple: full rows
      // unless every row is greedy.
      plan.any_candidate = false;
      plan.any_full = true;
      return plan;
    }
    kcap = k;
    plan.any_full = false;
    // Per-row temperature may make a row greedy (k = 1): still a candidate row.
  } else {
    plan.any_full = true;
  }
  // Enough chunks to give every SM ~2 CTAs, capped by the final stage's candidate budget.
  int64_t chunks = (kTargetCtas + p.batch - 1) / p.batch;
  const int64_t cap_by_final = kMaxFinalCandidates / kcap;
  if (chunks > cap_by_final) chunks = cap_by_final;
  if (chunks < 1) chunks = 1;
  int64_t chunk_len = (p.vocab + chunks - 1) / chunks;
  if (chunk_len < kMinChunk) chunk_len = kMinChunk;
  if (chunk_len > kMaxChunk) {
    chunk_len = kMaxChunk;
  }
  chunks = (p.vocab + chunk_len - 1) / chunk_len;
  if (chunks * std::min<int64_t>(kcap, chunk_len) > kMaxFinalCandidates) {
    plan.any_candidate = false;
    plan.any_full = true;
    return plan;
  }
  plan.any_candidate = true;
  plan.chunks = static_cast<int32_t>(chunks);
  plan.chunk_len = static_cast<int32_t>(chunk_len);
  plan.kcap = kcap;
  // Workspace: per row, per chunk, kcap composites + one invalid flag per chunk.
  plan.workspace_bytes = static_cast<size_t>(p.batch) * chunks *
                         (static_cast<size_t>(std::min<int64_t>(kcap, chunk_len)) * 8 + 8);
  return plan;
}

}  // namespace sampling
}  // namespace es
