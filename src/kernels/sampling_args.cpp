// Host validation of SamplingParams (every build) and the workspace size of the general path.
#include <algorithm>
#include <cmath>
#include <string>

#include "common/errors.h"
#include "kernels/sampling.h"
#include "kernels/sampling_cdf_split.h"
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
  ES_CHECK_ARG(p.rows_per_request >= 1, where, "rows_per_request", p.rows_per_request, "must be >= 1");
  ES_CHECK_ARG(p.batch % p.rows_per_request == 0, where, "batch", p.batch,
               "must be a multiple of rows_per_request = ", p.rows_per_request);
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

namespace {
// Chunking for candidate rows with effective top-k <= kcap; false when the final stage would
// have to merge more than kMaxFinalCandidates candidates.
bool try_candidate_plan(const SamplingParams& p, int32_t kcap, GeneralPlan* plan) {
  // Enough chunks to give every SM ~2 CTAs, capped by the final stage's candidate budget.
  int64_t chunks = (kTargetCtas + p.batch - 1) / p.batch;
  const int64_t cap_by_final = kMaxFinalCandidates / kcap;
  if (chunks > cap_by_final) chunks = cap_by_final;
  if (chunks < 1) chunks = 1;
  int64_t chunk_len = (p.vocab + chunks - 1) / chunks;
  chunk_len = std::clamp<int64_t>(chunk_len, kMinChunk, kMaxChunk);
  chunks = (p.vocab + chunk_len - 1) / chunk_len;
  const int64_t per_chunk = std::min<int64_t>(kcap, chunk_len);
  if (chunks * per_chunk > kMaxFinalCandidates || chunks > kThreads) return false;
  plan->any_candidate = true;
  plan->chunks = static_cast<int32_t>(chunks);
  plan->chunk_len = static_cast<int32_t>(chunk_len);
  plan->kcap = kcap;
  // Workspace: per row and chunk, per_chunk candidate slots + one header (u64 words).
  plan->workspace_bytes = static_cast<size_t>(p.batch) * chunks * (per_chunk * 8 + 8);
  return true;
}

// Which modes the rows may take (candidate chunks + merge, full row) and their workspace.
GeneralPlan plan_rows(const SamplingParams& p) {
  GeneralPlan plan;
  if (p.batch <= 0 || p.vocab <= 0) return plan;
  const bool small = p.path == SamplingPath::kSmallVocab ||
                     (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  if (small) return plan;
  if (p.top_ks == nullptr) {
    // Scalar top-k known on the host: every row has effective k = kscalar, or 1 when greedy.
    const RowParams r = make_row_params(p.temperatures ? 1.0f : p.temperature, p.top_k, 1.0f,
                                        p.vocab);
    const bool greedy_all = p.temperatures == nullptr && r.greedy;
    const int32_t k = greedy_all ? 1 : r.k;
    if (k <= kMaxCandidateTopK && try_candidate_plan(p, k, &plan)) {
      plan.any_full = false;  // greedy rows under per-row temperatures have k = 1 <= kcap
      return plan;
    }
    plan = GeneralPlan{};
    plan.any_full = true;
    return plan;
  }
  // Per-row top-k: the largest cap (512, 256, ..., 16) the final stage can merge; rows above it
  // take the full-row mode. V <= 4096 always gets 512, so a forced general path agrees with the
  // small-vocab path on which rows use the candidate (sequential-CDF) mode.
  plan.any_full = true;
  for (int32_t kcap = kMaxCandidateTopK; kcap >= 16; kcap /= 2) {
    if (try_candidate_plan(p, kcap, &plan)) return plan;
  }
  return plan;
}
}  // namespace

// The row modes, then the split CDF's workspace region when full-row rows may be few and long.
GeneralPlan plan_general(const SamplingParams& p) {
  GeneralPlan plan = plan_rows(p);
  plan.fullrow_split = plan.any_full && p.batch <= kFullRowSplitMaxRows && p.vocab >= kFullRowSplitMinVocab;
  if (plan.any_full && p.batch <= kCdfSplitMaxRows && p.vocab >= kCdfSplitMinVocab) {
    const int64_t chunks = (static_cast<int64_t>(p.vocab) + kCdfChunk - 1) / kCdfChunk;
    if (chunks <= kCdfMaxChunks) {
      plan.cdf_split = true;
      plan.cdf_chunks = static_cast<int32_t>(chunks);
      plan.cdf_offset = (plan.workspace_bytes + 15) & ~size_t{15};
      plan.workspace_bytes = plan.cdf_offset + cdf_layout(p.batch, chunks).bytes;
    }
  }
  return plan;
}

}  // namespace sampling
}  // namespace es
