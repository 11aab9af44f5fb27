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

void validateSamplingParams(const SamplingParams& p, const char* where) {
  ES_CHECK_ARG(p.batch >= 0, where, "batch", p.batch, "must be >= 0");
  ES_CHECK_ARG(p.vocab > 0, where, "vocab", p.vocab, "must be > 0");
  ES_CHECK_ARG(p.vocab <= sampling::kMaxVocab, where, "vocab", p.vocab,
               "must be <= ", sampling::kMaxVocab);
  ES_CHECK_ARG(p.logitsDtype == DType::kF32 || p.logitsDtype == DType::kF16, where, "logits_dtype",
               dtype_name(p.logitsDtype), "must be f32 or f16");
  if (p.temperatures == nullptr) {
    ES_CHECK_ARG(p.temperature >= 0.0f, where, "temperature", p.temperature,
                 "must be >= 0 (and not NaN)");
  }
  if (p.topPs == nullptr) {
    ES_CHECK_ARG(p.topP > 0.0f && p.topP <= 1.0f, where, "top_p", p.topP, "must be in (0, 1]");
  }
  ES_CHECK_ARG(p.topPMode == TopPMode::kNucleus || p.topPMode == TopPMode::kTruncate, where,
               "top_p_mode", static_cast<int>(p.topPMode), "must be kNucleus or kTruncate");
  ES_CHECK_ARG(p.path == SamplingPath::kAuto || p.path == SamplingPath::kGeneral ||
                   p.path == SamplingPath::kSmallVocab,
               where, "path", static_cast<int>(p.path), "must be kAuto, kGeneral or kSmallVocab");
  if (p.path == SamplingPath::kSmallVocab) {
    ES_CHECK_ARG(p.vocab <= kSmallVocabMax, where, "vocab", p.vocab, "must be <= ", kSmallVocabMax,
                 " for the small-vocab path");
  }
  ES_CHECK_ARG(p.rowsPerRequest >= 1, where, "rows_per_request", p.rowsPerRequest, "must be >= 1");
  ES_CHECK_ARG(p.batch % p.rowsPerRequest == 0, where, "batch", p.batch,
               "must be a multiple of rows_per_request = ", p.rowsPerRequest);
  if (p.batch == 0) return;
  ES_CHECK_ARG(p.logits != nullptr, where, "logits", "null", "must be non-null");
  ES_CHECK_ARG(p.tokens != nullptr || p.probs != nullptr, where, "tokens", "null",
               "and probs both null: nothing to compute");
  if (p.tokens != nullptr && p.uniforms == nullptr) {
    ES_CHECK_ARG(p.seeds != nullptr && p.positions != nullptr, where, "uniforms", "null",
                 "requires seeds and positions to compute request uniforms");
  }
}

size_t samplingWorkspaceBytes(const SamplingParams& p) {
  const sampling::GeneralPlan plan = sampling::planGeneral(p);
  return plan.workspaceBytes;
}

namespace sampling {

namespace {
// Chunking for candidate rows with effective top-k <= kcap; false when the final stage would
// have to merge more than kMaxFinalCandidates candidates.
bool tryCandidatePlan(const SamplingParams& p, int32_t kcap, GeneralPlan* plan) {
  // Enough chunks to give every SM ~2 CTAs, capped by the final stage's candidate budget.
  int64_t chunks = (kTargetCtas + p.batch - 1) / p.batch;
  const int64_t capByFinal = kMaxFinalCandidates / kcap;
  if (chunks > capByFinal) chunks = capByFinal;
  if (chunks < 1) chunks = 1;
  int64_t chunkLen = (p.vocab + chunks - 1) / chunks;
  chunkLen = std::clamp<int64_t>(chunkLen, kMinChunk, kMaxChunk);
  chunks = (p.vocab + chunkLen - 1) / chunkLen;
  const int64_t perChunk = std::min<int64_t>(kcap, chunkLen);
  if (chunks * perChunk > kMaxFinalCandidates || chunks > kThreads) return false;
  plan->anyCandidate = true;
  plan->chunks = static_cast<int32_t>(chunks);
  plan->chunkLen = static_cast<int32_t>(chunkLen);
  plan->kcap = kcap;
  // Workspace: per row and chunk, perChunk candidate slots + one header (u64 words).
  plan->workspaceBytes = static_cast<size_t>(p.batch) * chunks * (perChunk * 8 + 8);
  return true;
}

// Which modes the rows may take (candidate chunks + merge, full row) and their workspace.
GeneralPlan planRows(const SamplingParams& p) {
  GeneralPlan plan;
  if (p.batch <= 0 || p.vocab <= 0) return plan;
  const bool small = p.path == SamplingPath::kSmallVocab ||
                     (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  if (small) return plan;
  if (p.topKs == nullptr) {
    // Scalar top-k known on the host: every row has effective k = kscalar, or 1 when greedy.
    const RowParams r = makeRowParams(p.temperatures ? 1.0f : p.temperature, p.topK, 1.0f, p.vocab);
    const bool greedyAll = p.temperatures == nullptr && r.greedy;
    const int32_t k = greedyAll ? 1 : r.k;
    if (k <= kMaxCandidateTopK && tryCandidatePlan(p, k, &plan)) {
      plan.anyFull = false;  // greedy rows under per-row temperatures have k = 1 <= kcap
      return plan;
    }
    plan = GeneralPlan{};
    plan.anyFull = true;
    return plan;
  }
  // Per-row top-k: the largest cap (512, 256, ..., 16) the final stage can merge; rows above it
  // take the full-row mode. V <= 4096 always gets 512, so a forced general path agrees with the
  // small-vocab path on which rows use the candidate (sequential-CDF) mode.
  plan.anyFull = true;
  for (int32_t kcap = kMaxCandidateTopK; kcap >= 16; kcap /= 2) {
    if (tryCandidatePlan(p, kcap, &plan)) return plan;
  }
  return plan;
}
}  // namespace

// The row modes, then the split CDF's workspace region when full-row rows may be few and long.
GeneralPlan planGeneral(const SamplingParams& p) {
  GeneralPlan plan = planRows(p);
  plan.fullrowSplit =
      plan.anyFull && p.batch <= kFullRowSplitMaxRows && p.vocab >= kFullRowSplitMinVocab;
  if (plan.anyFull && p.batch <= kCdfSplitMaxRows && p.vocab >= kCdfSplitMinVocab) {
    const int64_t chunks = (static_cast<int64_t>(p.vocab) + kCdfChunk - 1) / kCdfChunk;
    if (chunks <= kCdfMaxChunks) {
      plan.cdfSplit = true;
      plan.cdfChunks = static_cast<int32_t>(chunks);
      plan.cdfOffset = (plan.workspaceBytes + 15) & ~size_t{15};
      plan.workspaceBytes = plan.cdfOffset + cdfLayout(p.batch, chunks).bytes;
    }
  }
  return plan;
}

}  // namespace sampling
}  // namespace es
