// GPU chain verification against the reference on shared uniforms: identical accept decisions,
// accepted counts and emitted tokens (target rows in candidate mode use the same sequential CDF
// as the reference; full-row rows may differ only at documented CDF boundaries).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/spec_verify.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

struct VCase {
  int32_t batch, L, vocab;
  DType dtype;
  float temperature;
  int32_t topK;
  float topP;
  TopPMode mode;
  bool with_q;  // draft probabilities (else onehot / argmax draft)
  bool device_uniforms;
  SamplingPath path;
};

// Host inputs of one verification.
struct VInputs {
  std::vector<float> logits;     // [batch, L + 1, vocab]; f16 cases: values already rounded to f16
  std::vector<int32_t> drafts;   // [batch, L]
  std::vector<float> q;          // [batch, L, vocab]; read when with_q
  std::vector<float> u;          // [batch, 2L + 1]; read unless device_uniforms
  std::vector<uint64_t> seeds;   // [batch]; read when device_uniforms
  std::vector<int64_t> anchors;  // [batch]
};

// Runs the reference and the GPU (outputs poisoned) on `in` and compares them: accepted counts
// and accepted tokens exactly, -1 after the emitted token; the emitted residual / bonus token
// exactly in candidate mode. *want_acc: the reference's accepted counts.
void expect_matches_reference(const VCase& c, const VInputs& in, std::vector<int32_t>* want_acc) {
  const size_t rows = static_cast<size_t>(c.batch) * (c.L + 1);
  std::vector<fp16> logits16;
  if (c.dtype == DType::kF16) {
    for (float x : in.logits) logits16.push_back(to_fp16(x));
  }
  SpecVerifyParams p;
  p.logitsDtype = c.dtype;
  p.batch = c.batch;
  p.numDraft = c.L;
  p.vocab = c.vocab;
  p.temperature = c.temperature;
  p.topK = c.topK;
  p.topP = c.topP;
  p.topPMode = c.mode;
  p.path = c.path;
  std::vector<int32_t> want_out(rows, -9);
  want_acc->assign(c.batch, -9);
  p.targetLogits =
      c.dtype == DType::kF32 ? static_cast<const void*>(in.logits.data()) : logits16.data();
  p.draftTokens = in.drafts.data();
  p.draftProbs = c.with_q ? in.q.data() : nullptr;
  if (c.device_uniforms) {
    p.seeds = in.seeds.data();
    p.anchors = in.anchors.data();
  } else {
    p.uniforms = in.u.data();
  }
  p.outTokens = want_out.data();
  p.numAccepted = want_acc->data();
  ref::specVerify(p);

  test::DeviceArray<float> d_logits(c.dtype == DType::kF32 ? in.logits : std::vector<float>{});
  test::DeviceArray<fp16> d_logits16(logits16);
  test::DeviceArray<int32_t> d_drafts(in.drafts), d_out(rows), d_acc(c.batch);  // outputs poisoned
  test::DeviceArray<float> d_q(in.q), d_u(in.u);
  test::DeviceArray<uint64_t> d_seeds(in.seeds);
  test::DeviceArray<int64_t> d_anchors(in.anchors);
  p.targetLogits =
      c.dtype == DType::kF32 ? static_cast<const void*>(d_logits.get()) : d_logits16.get();
  p.draftTokens = d_drafts.get();
  p.draftProbs = c.with_q ? d_q.get() : nullptr;
  if (c.device_uniforms) {
    p.seeds = d_seeds.get();
    p.anchors = d_anchors.get();
  } else {
    p.uniforms = d_u.get();
  }
  p.outTokens = d_out.get();
  p.numAccepted = d_acc.get();
  const size_t ws = specVerifyWorkspaceBytes(p);
  test::DeviceArray<uint8_t> d_ws(ws);
  p.workspace = d_ws.get();
  p.workspaceBytes = ws;
  kernel::specVerify(p, nullptr);
  const std::vector<int32_t> got_acc = d_acc.download();
  const std::vector<int32_t> got_out = d_out.download();
  EXPECT_EQ(got_acc, *want_acc) << "accept decisions differ";
  // Rows summed over the whole row on the GPU (block-scan CDF): small path k > 512, general
  // path beyond its candidate cap (sampling_layout.h plan).
  const bool full_rows = (c.topK <= 0 || c.topK > kMaxCandidateTopK) && c.temperature >= 1e-3f;
  int differing = 0;
  for (int32_t b = 0; b < c.batch; ++b) {
    for (int32_t j = 0; j <= c.L; ++j) {
      const size_t i = static_cast<size_t>(b) * (c.L + 1) + j;
      if (j < (*want_acc)[b]) {
        ASSERT_EQ(got_out[i], want_out[i]) << "accepted token, seq " << b;
      } else if (j == (*want_acc)[b]) {
        ASSERT_GE(got_out[i], 0);
        ASSERT_LT(got_out[i], c.vocab);
        differing += got_out[i] != want_out[i];
      } else {
        ASSERT_EQ(got_out[i], -1) << "padding, seq " << b;
      }
    }
  }
  // Residual / bonus tokens: exact in candidate mode; full-row CDF boundaries are rare.
  EXPECT_LE(differing, full_rows ? std::max(1, c.batch / 16) : 0);
}

void check(const VCase& c) {
  SCOPED_TRACE(testing::Message() << "B " << c.batch << " L " << c.L << " V " << c.vocab << " k "
                                  << c.topK << " p " << c.topP << " q " << c.with_q);
  std::mt19937 rng(c.vocab + c.batch * 31 + c.L);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  const size_t rows = static_cast<size_t>(c.batch) * (c.L + 1);
  VInputs in;
  in.logits.resize(rows * c.vocab);
  for (float& x : in.logits) x = nd(rng);
  if (c.dtype == DType::kF16) {
    for (float& x : in.logits) x = to_float(to_fp16(x));
  }
  // Drafts: the target row's argmax most of the time (so chains get accepted), else random.
  in.drafts.resize(static_cast<size_t>(c.batch) * c.L);
  for (int32_t b = 0; b < c.batch; ++b) {
    for (int32_t s = 0; s < c.L; ++s) {
      const float* row = &in.logits[(static_cast<size_t>(b) * (c.L + 1) + s) * c.vocab];
      int32_t best = 0;
      for (int32_t i = 1; i < c.vocab; ++i) best = row[i] > row[best] ? i : best;
      in.drafts[b * c.L + s] = (rng() % 4 != 0) ? best : static_cast<int32_t>(rng() % c.vocab);
    }
  }
  if (c.with_q) {
    std::vector<float>& q = in.q;
    q.resize(static_cast<size_t>(c.batch) * c.L * c.vocab);
    for (size_t r = 0; r < static_cast<size_t>(c.batch) * c.L; ++r) {
      double sum = 0;
      for (int32_t i = 0; i < c.vocab; ++i) sum += (q[r * c.vocab + i] = std::exp(nd(rng)));
      for (int32_t i = 0; i < c.vocab; ++i)
        q[r * c.vocab + i] = static_cast<float>(q[r * c.vocab + i] / sum);
      q[r * c.vocab + in.drafts[r]] = std::max(q[r * c.vocab + in.drafts[r]], 0.3f);
    }
  }
  in.u.resize(static_cast<size_t>(c.batch) * (2 * c.L + 1));
  for (size_t i = 0; i < in.u.size(); ++i)
    in.u[i] = request_uniform(77, static_cast<int64_t>(i), RngPurpose::kAccept, 0);
  for (int32_t b = 0; b < c.batch; ++b) {
    in.seeds.push_back(1000 + b);
    in.anchors.push_back(50 + 3 * b);
  }
  std::vector<int32_t> want_acc;
  expect_matches_reference(c, in, &want_acc);
  int64_t total_acc = 0;
  for (int32_t a : want_acc) total_acc += a;
  if (c.L > 0)
    EXPECT_GT(total_acc, 0) << "test has no power: nothing accepted";  // L = 0: bonus only
}

// Chains whose first rejection is placed: at draft 0, 1, 5, in a warp's second or third round
// (the kernel tests draft s in warp s % 16), at the last draft, or nowhere (bonus), with later
// drafts that would be rejected too (s % 3 == 2 after the first). Rows: index-sorted lists (top-k
// 50, 512 or 1) or dense rows (top-k off), with uniform-fallback rows (a NaN logit) among them,
// including a bonus row. Accepted drafts are the boosted argmax (p > 0.9, u = 0.5) or, on a
// uniform row, any token (u = 1e-9). Rejected drafts (u = 0.999): on a list row at even s the
// smallest logit (absent from the list: p = 0), else the second largest (p ~ 1e-4), or any token
// of a uniform row. With draft probabilities q(x) >= 0.3, except q(x) = 0 (alpha = 1) at an
// accepted draft 1; and at the first rejection of odd sequences q = 1 at every index: the residual
// max(P - Q, 0) is 0, so the token comes from the target row (the residual mass floor's fallback).
void check_placed_rejections(const VCase& c) {
  SCOPED_TRACE(testing::Message() << "placed rejections: V " << c.vocab << " k " << c.topK << " q "
                                  << c.with_q);
  const int32_t V = c.vocab, L = c.L;
  const std::vector<int32_t> firstRejected = {0, 1, 5, 17, 20, 34, L - 1, L, L};  // L: bonus
  ASSERT_EQ(c.batch, static_cast<int32_t>(firstRejected.size()));
  ASSERT_GE(L, 36);
  ASSERT_FALSE(c.device_uniforms);
  const bool list_rows = c.topK > 0;
  std::mt19937 rng(V + c.topK);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  VInputs in;
  in.logits.resize(static_cast<size_t>(c.batch) * (L + 1) * V);
  in.drafts.resize(static_cast<size_t>(c.batch) * L);
  in.u.resize(static_cast<size_t>(c.batch) * (2 * L + 1));
  if (c.with_q) in.q.resize(static_cast<size_t>(c.batch) * L * V);
  for (int32_t b = 0; b < c.batch; ++b) {
    float* u = &in.u[static_cast<size_t>(b) * (2 * L + 1)];
    for (int32_t s = 0; s <= L; ++s) {
      float* row = &in.logits[(static_cast<size_t>(b) * (L + 1) + s) * V];
      for (int32_t i = 0; i < V; ++i) row[i] = nd(rng);
      const int32_t top = static_cast<int32_t>(rng() % V), second = (top + 1) % V,
                    lowest = (top + 2) % V;
      row[top] += 16.0f;
      row[second] = 4.0f;
      row[lowest] = -8.0f;
      const bool uniformRow = (b + s) % 5 == 2 || (s == L && b == c.batch - 1);
      if (uniformRow) row[(top + 3) % V] = std::nanf("");
      if (s == L) break;  // the bonus row has no draft
      const bool reject = s == firstRejected[b] || (s > firstRejected[b] && s % 3 == 2);
      int32_t x = top;
      u[s] = uniformRow ? 1e-9f : 0.5f;
      if (reject) {
        x = uniformRow ? top : list_rows && s % 2 == 0 ? lowest : second;
        u[s] = 0.999f;
      }
      in.drafts[static_cast<size_t>(b) * L + s] = x;
      if (c.with_q) {
        float* q = &in.q[(static_cast<size_t>(b) * L + s) * V];
        double sum = 0;
        for (int32_t i = 0; i < V; ++i) sum += (q[i] = std::exp(nd(rng)));
        for (int32_t i = 0; i < V; ++i) q[i] = static_cast<float>(q[i] / sum);
        q[x] = s == 1 && !reject ? 0.0f : std::max(q[x], 0.3f);
        if (s == firstRejected[b] && b % 2 == 1) std::fill(q, q + V, 1.0f);
      }
    }
    for (int32_t j = L; j <= 2 * L; ++j) u[j] = request_uniform(5, b, RngPurpose::kResidual, j);
  }
  std::vector<int32_t> want_acc;
  expect_matches_reference(c, in, &want_acc);
  EXPECT_EQ(want_acc, firstRejected) << "the inputs do not place the first rejections";
}

TEST(SpecVerifyGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  const TopPMode kN = TopPMode::kNucleus, kT = TopPMode::kTruncate;
  // The benchmark's shape at a smaller batch, argmax drafts.
  check({4, 15, 151936, DType::kF32, 0.8f, 50, 0.9f, kN, false, false, SamplingPath::kAuto});
  // T = 0.25: at T = 1 these seeds reject every first draft (no power); 0.25 accepts 1-2 drafts
  // per sequence and still rejects, so both the accept and the residual branches run.
  check({3, 7, 151936, DType::kF16, 0.25f, 50, 0.9f, kT, false, true, SamplingPath::kAuto});
  check({16, 3, 2048, DType::kF32, 1.0f, 50, 0.8f, kN, true, false, SamplingPath::kAuto});
  check({16, 3, 2048, DType::kF32, 1.0f, 50, 0.8f, kN, true, false, SamplingPath::kGeneral});
  check({16, 3, 2048, DType::kF16, 0.7f, 0, 0.9f, kT, false, true, SamplingPath::kSmallVocab});
  check({8, 4, 4097, DType::kF32, 1.0f, 0, 0.95f, kN, true, false, SamplingPath::kAuto});
  check({16, 5, 257, DType::kF32, 1.0f, 0, 1.0f, kN, true, true, SamplingPath::kAuto});
  check({16, 2, 257, DType::kF32, 0.0f, 0, 1.0f, kN, false, false, SamplingPath::kGeneral});
  check({2, 0, 128256, DType::kF32, 1.0f, 50, 0.9f, kN, false, false, SamplingPath::kAuto});
  // The benchmark's L and vocabulary with full lists (top-k 512, every list slot used), draft
  // probabilities and device uniforms; T = 0.5 so that drafts get accepted.
  check({4, 15, 151936, DType::kF32, 0.5f, 512, 1.0f, kN, true, true, SamplingPath::kAuto});
  // One-entry lists (top-k 1): a draft is accepted iff it is the argmax.
  check({16, 15, 2048, DType::kF32, 1.0f, 1, 1.0f, kN, false, false, SamplingPath::kAuto});
  check({16, 15, 6000, DType::kF16, 1.0f, 1, 1.0f, kN, true, true, SamplingPath::kAuto});
  // The benchmark's shape (256 rows of 19 chunks): each chunk CTA walks one whole row and
  // finalizes it itself (RowsArgs::chunkFinalizesRows). Then f16 rows (the register path)
  // with draft probabilities and device uniforms.
  check({16, 15, 151936, DType::kF32, 0.25f, 50, 0.9f, kN, false, false, SamplingPath::kAuto});
  check({16, 15, 128256, DType::kF16, 0.5f, 50, 0.95f, kT, true, true, SamplingPath::kAuto});
}

TEST(SpecVerifyGpu, PlacedRejections) {
  ES_SKIP_IF_NO_GPU();
  const TopPMode kN = TopPMode::kNucleus;
  for (const bool with_q : {false, true}) {
    // General path: list rows of top-k 50, of top-k 512 (every index / prob slot of the list
    // used: the kernel holds a row in 16 slots per lane) and of top-k 1 (one entry), and dense
    // rows (top-k off).
    for (const int32_t k : {50, 512, 1, 0}) {
      check_placed_rejections(
          {9, 37, 6000, DType::kF32, 1.0f, k, 1.0f, kN, with_q, false, SamplingPath::kAuto});
    }
    // Small-vocab path, list rows.
    for (const int32_t k : {50, 512}) {
      check_placed_rejections(
          {9, 37, 2048, DType::kF32, 1.0f, k, 1.0f, kN, with_q, false, SamplingPath::kAuto});
    }
  }
}

}  // namespace
}  // namespace es
