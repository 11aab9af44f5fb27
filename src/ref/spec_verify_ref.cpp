// CPU reference of chain verification (spec §3.7), on the reference probabilities of
// ref::rowProbs and the fp32 index-order inverse CDF of ref::sampleFromProbs.
#include <algorithm>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/sampling_math.h"
#include "kernels/spec_verify.h"

namespace es::ref {

using namespace es::sampling;

void specVerify(const SpecVerifyParams& p) {
  validateSpecVerifyParams(p, "ref::spec_verify");
  const int32_t L = p.numDraft, V = p.vocab;
  std::vector<float> logits(V), probs(V), residual(V);
  for (int32_t b = 0; b < p.batch; ++b) {
    const float t = p.temperatures ? p.temperatures[b] : p.temperature;
    const int32_t k = p.topKs ? p.topKs[b] : p.topK;
    const float tp = p.topPs ? p.topPs[b] : p.topP;
    auto uniform = [&](RngPurpose purpose, int32_t lane) {
      if (p.uniforms) {
        const float* u = p.uniforms + static_cast<size_t>(b) * (2 * L + 1);
        const int32_t slot = purpose == RngPurpose::kAccept     ? lane
                             : purpose == RngPurpose::kResidual ? L + lane
                                                                : 2 * L;
        return u[slot];
      }
      return request_uniform(p.seeds[b], p.anchors[b], purpose, static_cast<uint32_t>(lane));
    };
    auto targetRow = [&](int32_t s) {
      const size_t base = (static_cast<size_t>(b) * (L + 1) + s) * V;
      for (int32_t i = 0; i < V; ++i) {
        logits[i] = p.logitsDtype == DType::kF32
                        ? static_cast<const float*>(p.targetLogits)[base + i]
                        : to_float(static_cast<const fp16*>(p.targetLogits)[base + i]);
      }
      return rowProbs(logits.data(), V, t, k, tp, p.topPMode, probs.data());
    };
    int32_t* out = p.outTokens + static_cast<size_t>(b) * (L + 1);
    for (int32_t j = 0; j <= L; ++j) out[j] = -1;
    int32_t accepted = 0;
    bool stopped = false;
    for (int32_t s = 0; s < L && !stopped; ++s) {
      const bool uniformRow = targetRow(s);
      if (uniformRow && p.flagNonFinite) {  // the row decides nothing: the chain ends here
        out[accepted] = kNonFiniteToken;
        stopped = true;
        break;
      }
      const int32_t x = p.draftTokens[static_cast<size_t>(b) *
                                          (p.draftTokensStride > 0 ? p.draftTokensStride : L) +
                                      s];
      const float* qrow =
          p.draftProbs ? p.draftProbs + (static_cast<size_t>(b) *
                                             (p.draftProbsStride > 0 ? p.draftProbsStride : L) +
                                         s) *
                                            V
                       : nullptr;
      const float px = probs[x];
      const float qx = qrow ? qrow[x] : 1.0f;
      const float alpha = qx <= kDraftProbFloor ? 1.0f : std::min(1.0f, fdivRn(px, qx));
      if (px > 0.0f && uniform(RngPurpose::kAccept, s) <= alpha) {
        out[accepted++] = x;
        continue;
      }
      // Residual max(P - Q, 0) and its fp32 index-order mass.
      float mass = 0.0f;
      for (int32_t i = 0; i < V; ++i) {
        const float qi = qrow ? qrow[i] : (i == x ? 1.0f : 0.0f);
        residual[i] = std::max(fsubRn(probs[i], qi), 0.0f);
        if (residual[i] > 0.0f) mass = faddRn(mass, residual[i]);
      }
      const float u = uniform(RngPurpose::kResidual, s);
      if (mass > kResidualMassFloor) {
        out[accepted] = sampleFromProbs(residual.data(), V, u);
      } else {
        out[accepted] = uniformRow ? uniformRowToken(u, V) : sampleFromProbs(probs.data(), V, u);
      }
      stopped = true;
    }
    if (!stopped) {
      const bool uniformRow = targetRow(L);
      const float u = uniform(RngPurpose::kBonus, 0);
      if (uniformRow) {
        out[L] = p.flagNonFinite ? kNonFiniteToken : uniformRowToken(u, V);
      } else {
        out[L] = sampleFromProbs(probs.data(), V, u);
      }
    }
    p.numAccepted[b] = accepted;
  }
}

}  // namespace es::ref
