// CPU tests of the chain-verification reference (spec §3.7): structure and losslessness.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/rng.h"
#include "kernels/spec_verify.h"

namespace es {
namespace {

// Chi-square 0.999 quantiles, dof 1..16 (fixed p-value 1e-3 with fixed seeds).
double chi_limit(int dof) {
  static const double q[] = {0,      10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
                             27.877, 29.588, 31.264, 32.909, 34.528, 36.123, 37.697, 39.252};
  return q[dof];
}

// The first emitted token of a one-step verification must be distributed as the target P,
// whatever the draft distribution Q (speculative sampling is lossless). Drafts are sampled from
// Q with a separate uniform stream (kProposal); q = null means a deterministic (argmax) draft.
void check_lossless(const std::vector<float>& targetLogits, const std::vector<float>* q,
                    int32_t fixed_draft, uint64_t seed) {
  const int32_t v = static_cast<int32_t>(targetLogits.size());
  const int32_t n = 100000;
  std::vector<float> logits;  // [n, 2, v]
  logits.reserve(static_cast<size_t>(n) * 2 * v);
  std::vector<int32_t> drafts(n);
  std::vector<float> draftProbs;
  if (q) draftProbs.reserve(static_cast<size_t>(n) * v);
  std::vector<uint64_t> seeds(n, seed);
  std::vector<int64_t> anchors(n);
  for (int32_t i = 0; i < n; ++i) {
    logits.insert(logits.end(), targetLogits.begin(), targetLogits.end());
    logits.insert(logits.end(), targetLogits.begin(), targetLogits.end());
    anchors[i] = 1000 + i;
    if (q) {
      const float u = request_uniform(seed, anchors[i], RngPurpose::kProposal, 0);
      float run = 0;
      int32_t x = v - 1;
      for (int32_t j = 0; j < v; ++j) {
        run += (*q)[j];
        if (run > u) {
          x = j;
          break;
        }
      }
      drafts[i] = x;
      draftProbs.insert(draftProbs.end(), q->begin(), q->end());
    } else {
      drafts[i] = fixed_draft;
    }
  }
  std::vector<int32_t> out(static_cast<size_t>(n) * 2, -5), acc(n, -5);
  SpecVerifyParams p;
  p.targetLogits = logits.data();
  p.draftTokens = drafts.data();
  p.draftProbs = q ? draftProbs.data() : nullptr;
  p.batch = n;
  p.numDraft = 1;
  p.vocab = v;
  p.seeds = seeds.data();
  p.anchors = anchors.data();
  p.outTokens = out.data();
  p.numAccepted = acc.data();
  ref::specVerify(p);
  std::vector<float> target(v);
  ref::rowProbs(targetLogits.data(), v, 1.0f, 0, 1.0f, TopPMode::kNucleus, target.data());
  std::vector<int64_t> counts(v, 0);
  int64_t accepted = 0;
  for (int32_t i = 0; i < n; ++i) {
    ASSERT_TRUE(acc[i] == 0 || acc[i] == 1);
    ASSERT_GE(out[2 * i], 0);
    if (acc[i] == 1) {
      ASSERT_EQ(out[2 * i], drafts[i]);
      ASSERT_GE(out[2 * i + 1], 0);  // bonus
    } else {
      ASSERT_EQ(out[2 * i + 1], -1);
      if (!q) {
        ASSERT_NE(out[2 * i], drafts[i]);  // residual excludes the rejected draft
      }
    }
    accepted += acc[i];
    ++counts[out[2 * i]];
  }
  double chi = 0;
  int bins = 0;
  for (int32_t j = 0; j < v; ++j) {
    const double e = target[j] * n;
    if (e < 5) {
      EXPECT_LE(counts[j], 30) << "token " << j;
      continue;
    }
    chi += (counts[j] - e) * (counts[j] - e) / e;
    ++bins;
  }
  EXPECT_LT(chi, chi_limit(bins - 1)) << "lossless check failed, chi " << chi;
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, n);
}

TEST(SpecVerifyRef, LosslessForSeveralDraftDistributions) {
  const std::vector<float> p = {std::log(0.4f), std::log(0.25f), std::log(0.15f),
                                std::log(0.1f), std::log(0.06f), std::log(0.04f)};
  const std::vector<float> q_close = {0.35f, 0.3f, 0.15f, 0.1f, 0.05f, 0.05f};
  const std::vector<float> q_far = {0.05f, 0.05f, 0.1f, 0.1f, 0.3f, 0.4f};
  const std::vector<float> q_sparse = {0.0f, 0.5f, 0.0f, 0.0f, 0.5f, 0.0f};
  check_lossless(p, &q_close, 0, 11);
  check_lossless(p, &q_far, 0, 12);
  check_lossless(p, &q_sparse, 0, 13);
  check_lossless(p, nullptr, 0, 14);  // deterministic draft of the most likely token
  check_lossless(p, nullptr, 3, 15);  // deterministic draft of a less likely token
}

TEST(SpecVerifyRef, ChainStructureAndUniformLayout) {
  // V = 4, L = 3. Target rows one-hot-ish (greedy), so acceptance is deterministic.
  const int32_t v = 4, L = 3;
  std::vector<float> logits = {0, 5, 0, 0,   // row 0 -> 1
                               0, 0, 5, 0,   // row 1 -> 2
                               5, 0, 0, 0,   // row 2 -> 0
                               0, 0, 0, 5};  // row 3 (bonus) -> 3
  std::vector<int32_t> drafts = {1, 2, 3};   // third is wrong
  std::vector<float> u(2 * L + 1, 0.5f);
  std::vector<int32_t> out(L + 1, -5), acc(1, -5);
  SpecVerifyParams p;
  p.targetLogits = logits.data();
  p.draftTokens = drafts.data();
  p.batch = 1;
  p.numDraft = L;
  p.vocab = v;
  p.temperature = 0.0f;
  p.uniforms = u.data();
  p.outTokens = out.data();
  p.numAccepted = acc.data();
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 2);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 0, -1}));  // residual of row 2 = its argmax 0
  drafts[2] = 0;
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 3);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 0, 3}));  // bonus from row L
  // p = 0 guard: the target gives the draft no mass -> reject even with u tiny and q tiny.
  std::vector<float> q(L * v, 0.0f);
  drafts = {0, 2, 0};
  u.assign(2 * L + 1, 1e-7f);
  p.draftProbs = q.data();  // q = 0 everywhere -> alpha = 1, but p(0) = 0 in row 0
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 0);
  EXPECT_EQ(out, (std::vector<int32_t>{1, -1, -1, -1}));
  // L = 0: only the bonus.
  p.numDraft = 0;
  p.draftProbs = nullptr;
  std::vector<float> u0 = {0.5f};
  p.uniforms = u0.data();
  std::vector<float> row0(logits.begin(), logits.begin() + v);
  p.targetLogits = row0.data();
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 0);
  EXPECT_EQ(out[0], 1);
}

TEST(SpecVerifyRef, AcceptUsesLessOrEqualAndResidualFallsBackToTarget) {
  // Target p = (0.5, 0.5) from equal logits; q = onehot(0): accept iff u <= 0.5.
  const int32_t v = 2;
  std::vector<float> logits = {1, 1, 1, 1};
  std::vector<int32_t> drafts = {0};
  std::vector<float> u = {0.5f, 0.3f, 0.9f};
  std::vector<int32_t> out(2), acc(1);
  SpecVerifyParams p;
  p.targetLogits = logits.data();
  p.draftTokens = drafts.data();
  p.batch = 1;
  p.numDraft = 1;
  p.vocab = v;
  p.uniforms = u.data();
  p.outTokens = out.data();
  p.numAccepted = acc.data();
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 1);
  u[0] = 0.50001f;
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 0);
  EXPECT_EQ(out[0], 1);  // residual = token 1 only
  // q == p: residual mass 0 -> sample from the target row with the residual uniform.
  std::vector<float> q = {0.5f, 0.5f};
  p.draftProbs = q.data();
  u = {0.9f, 0.3f, 0.9f};  // alpha = 1: accepted
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 1);
  q = {0.6f, 0.4f};  // alpha = 0.5/0.6; u 0.9 rejects; residual = (0, 0.1) -> token 1
  ref::specVerify(p);
  EXPECT_EQ(acc[0], 0);
  EXPECT_EQ(out[0], 1);
}

// draftProbsStride: sequence b's row s of q is read at (b * stride + s); a strided buffer
// with an extra row in front of each sequence gives the decisions of the compact one.
TEST(SpecVerifyRef, DraftProbsStrideSkipsRowsBetweenSequences) {
  const int32_t v = 6, L = 2, batch = 2;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(batch) * (L + 1) * v);
  for (float& x : logits) x = 3.0f * ud(rng);
  std::vector<float> compact(static_cast<size_t>(batch) * L * v),
      strided(static_cast<size_t>(batch) * (L + 1) * v, 0.0f);
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t s = 0; s < L; ++s) {
      float sum = 0.0f;
      for (int32_t i = 0; i < v; ++i) sum += (compact[(b * L + s) * v + i] = ud(rng) + 0.01f);
      for (int32_t i = 0; i < v; ++i) {
        compact[(b * L + s) * v + i] /= sum;
        strided[(b * (L + 1) + 1 + s) * v + i] = compact[(b * L + s) * v + i];
      }
    }
  }
  for (int32_t b = 0; b < batch; ++b) {  // the skipped rows: q = 1 on token 0, wrong if read
    strided[static_cast<size_t>(b) * (L + 1) * v] = 1.0f;
  }
  const std::vector<int32_t> drafts = {1, 4, 2, 5};
  int32_t differing = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::vector<int32_t> out1((L + 1) * batch), out2((L + 1) * batch), acc1(batch), acc2(batch);
    std::vector<uint64_t> seeds(batch, seed);
    std::vector<int64_t> anchors = {10, 20};
    SpecVerifyParams p;
    p.targetLogits = logits.data();
    p.draftTokens = drafts.data();
    p.batch = batch;
    p.numDraft = L;
    p.vocab = v;
    p.seeds = seeds.data();
    p.anchors = anchors.data();
    p.draftProbs = compact.data();
    p.outTokens = out1.data();
    p.numAccepted = acc1.data();
    ref::specVerify(p);
    p.draftProbs = strided.data() + v;
    p.draftProbsStride = L + 1;
    p.outTokens = out2.data();
    p.numAccepted = acc2.data();
    ref::specVerify(p);
    EXPECT_EQ(out1, out2) << "seed " << seed;
    EXPECT_EQ(acc1, acc2) << "seed " << seed;
    // The skipped rows would change decisions if read (checks that the test can fail).
    p.draftProbsStride = 0;
    ref::specVerify(p);
    differing += out1 != out2;
  }
  EXPECT_GT(differing, 0);
}

TEST(SpecVerifyRef, BadParameters) {
  std::vector<float> logits(8);
  std::vector<int32_t> drafts(1), out(2), acc(1);
  std::vector<float> u(3, 0.5f);
  auto make = [&]() {
    SpecVerifyParams p;
    p.targetLogits = logits.data();
    p.draftTokens = drafts.data();
    p.batch = 1;
    p.numDraft = 1;
    p.vocab = 4;
    p.uniforms = u.data();
    p.outTokens = out.data();
    p.numAccepted = acc.data();
    return p;
  };
  auto expect_arg = [&](SpecVerifyParams p, const char* name) {
    try {
      ref::specVerify(p);
      ADD_FAILURE() << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos)
          << e.what();
    }
  };
  SpecVerifyParams p = make();
  p.numDraft = -1;
  expect_arg(p, "num_draft");
  p = make();
  p.temperature = -1;
  expect_arg(p, "temperature");
  p = make();
  p.topP = 0;
  expect_arg(p, "top_p");
  p = make();
  p.vocab = 0;
  expect_arg(p, "vocab");
  p = make();
  p.draftTokens = nullptr;
  expect_arg(p, "draft_tokens");
  p = make();
  p.draftProbsStride = -1;
  expect_arg(p, "draft_probs_stride");
  p = make();
  p.uniforms = nullptr;
  expect_arg(p, "uniforms");
}

}  // namespace
}  // namespace es
