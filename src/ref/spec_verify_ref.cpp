// CPU reference of chain verification (spec §3.7), on the reference probabilities of
// ref::row_probs and the fp32 index-order inverse CDF of ref::sample_from_probs.
#include <algorithm>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/sampling_math.h"
#include "kernels/spec_verify.h"

namespace es::ref {

using namespace es::sampling;

void spec_verify(const SpecVerifyParams& p) {
  validate_spec_verify_params(p, "ref::spec_verify");
  const int32_t L = p.num_draft, V = p.vocab;
  std::vector<float> logits(V), probs(V), residual(V);
  for (int32_t b = 0; b < p.batch; ++b) {
    const float t = p.temperatures ? p.temperatures[b] : p.temperature;
    const int32_t k = p.top_ks ? p.top_ks[b] : p.top_k;
    const float tp = p.top_ps ? p.top_ps[b] : p.top_p;
    auto uniform = [&](RngPurpose purpose, int32_t lane) {
      if (p.uniforms) {
        const float* u = p.uniforms + static_cast<size_t>(b) * (2 * L + 1);
        const int32_t slot = purpose == RngPurpose::kAccept ? lane
                             : purpose == RngPurpose::kResidual ? L + lane
                                                                : 2 * L;
        return u[slot];
      }
      return request_uniform(p.seeds[b], p.anchors[b], purpose, static_cast<uint32_t>(lane));
    };
    auto target_row = [&](int32_t s) {
      const size_t base = (static_cast<size_t>(b) * (L + 1) + s) * V;
      for (int32_t i = 0; i < V; ++i) {
        logits[i] = p.logits_dtype == DType::kF32
                        ? static_cast<const float*>(p.target_logits)[base + i]
                        : to_float(static_cast<const fp16*>(p.target_logits)[base + i]);
      }
      return row_probs(logits.data(), V, t, k, tp, p.top_p_mode, probs.data());
    };
    int32_t* out = p.out_tokens + static_cast<size_t>(b) * (L + 1);
    for (int32_t j = 0; j <= L; ++j) out[j] = -1;
    int32_t accepted = 0;
    bool stopped = false;
    for (int32_t s = 0; s < L && !stopped; ++s) {
      const bool uniform_row = target_row(s);
      const int32_t x = p.draft_tokens[static_cast<size_t>(b) * (p.draft_tokens_stride > 0 ? p.draft_tokens_stride : L) + s];
      const float* qrow =
          p.draft_probs
              ? p.draft_probs + (static_cast<size_t>(b) * (p.draft_probs_stride > 0 ? p.draft_probs_stride : L) + s) * V
              : nullptr;
      const float px = probs[x];
      const float qx = qrow ? qrow[x] : 1.0f;
      const float alpha = qx <= kDraftProbFloor ? 1.0f : std::min(1.0f, fdiv_rn(px, qx));
      if (px > 0.0f && uniform(RngPurpose::kAccept, s) <= alpha) {
        out[accepted++] = x;
        continue;
      }
      // Residual max(P - Q, 0) and its fp32 index-order mass.
      float mass = 0.0f;
      for (int32_t i = 0; i < V; ++i) {
        const float qi = qrow ? qrow[i] : (i == x ? 1.0f : 0.0f);
        residual[i] = std::max(fsub_rn(probs[i], qi), 0.0f);
        if (residual[i] > 0.0f) mass = fadd_rn(mass, residual[i]);
      }
      const float u = uniform(RngPurpose::kResidual, s);
      if (mass > kResidualMassFloor) {
        out[accepted] = sample_from_probs(residual.data(), V, u);
      } else {
        out[accepted] = uniform_row ? uniform_row_token(u, V) : sample_from_probs(probs.data(), V, u);
      }
      stopped = true;
    }
    if (!stopped) {
      const bool uniform_row = target_row(L);
      const float u = uniform(RngPurpose::kBonus, 0);
      out[L] = uniform_row ? uniform_row_token(u, V) : sample_from_probs(probs.data(), V, u);
    }
    p.num_accepted[b] = accepted;
  }
}

}  // namespace es::ref
