// GPU chain verification against the reference on shared uniforms: identical accept decisions,
// accepted counts and emitted tokens (target rows in candidate mode use the same sequential CDF
// as the reference; full-row rows may differ only at documented CDF boundaries).
#include <gtest/gtest.h>

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
  int32_t top_k;
  float top_p;
  TopPMode mode;
  bool with_q;   // draft probabilities (else onehot / argmax draft)
  bool device_uniforms;
  SamplingPath path;
};

void check(const VCase& c) {
  SCOPED_TRACE(testing::Message() << "B " << c.batch << " L " << c.L << " V " << c.vocab << " k "
                                  << c.top_k << " p " << c.top_p << " q " << c.with_q);
  std::mt19937 rng(c.vocab + c.batch * 31 + c.L);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  const size_t rows = static_cast<size_t>(c.batch) * (c.L + 1);
  std::vector<float> logits(rows * c.vocab);
  for (float& x : logits) x = nd(rng);
  std::vector<fp16> logits16;
  if (c.dtype == DType::kF16) {
    for (float& x : logits) {
      logits16.push_back(to_fp16(x));
      x = to_float(logits16.back());
    }
  }
  // Drafts: the target row's argmax most of the time (so chains get accepted), else random.
  std::vector<int32_t> drafts(static_cast<size_t>(c.batch) * c.L);
  for (int32_t b = 0; b < c.batch; ++b) {
    for (int32_t s = 0; s < c.L; ++s) {
      const float* row = &logits[(static_cast<size_t>(b) * (c.L + 1) + s) * c.vocab];
      int32_t best = 0;
      for (int32_t i = 1; i < c.vocab; ++i) best = row[i] > row[best] ? i : best;
      drafts[b * c.L + s] = (rng() % 4 != 0) ? best : static_cast<int32_t>(rng() % c.vocab);
    }
  }
  std::vector<float> q;
  if (c.with_q) {
    q.resize(static_cast<size_t>(c.batch) * c.L * c.vocab);
    for (size_t r = 0; r < static_cast<size_t>(c.batch) * c.L; ++r) {
      double sum = 0;
      for (int32_t i = 0; i < c.vocab; ++i) sum += (q[r * c.vocab + i] = std::exp(nd(rng)));
      for (int32_t i = 0; i < c.vocab; ++i) q[r * c.vocab + i] = static_cast<float>(q[r * c.vocab + i] / sum);
      q[r * c.vocab + drafts[r]] = std::max(q[r * c.vocab + drafts[r]], 0.3f);
    }
  }
  std::vector<float> u(static_cast<size_t>(c.batch) * (2 * c.L + 1));
  for (size_t i = 0; i < u.size(); ++i) u[i] = request_uniform(77, static_cast<int64_t>(i), RngPurpose::kAccept, 0);
  std::vector<uint64_t> seeds(c.batch);
  std::vector<int64_t> anchors(c.batch);
  for (int32_t b = 0; b < c.batch; ++b) {
    seeds[b] = 1000 + b;
    anchors[b] = 50 + 3 * b;
  }
  SpecVerifyParams p;
  p.logits_dtype = c.dtype;
  p.batch = c.batch;
  p.num_draft = c.L;
  p.vocab = c.vocab;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.top_p_mode = c.mode;
  p.path = c.path;
  std::vector<int32_t> want_out(rows, -9), want_acc(c.batch, -9);
  p.target_logits = c.dtype == DType::kF32 ? static_cast<const void*>(logits.data()) : logits16.data();
  p.draft_tokens = drafts.data();
  p.draft_probs = c.with_q ? q.data() : nullptr;
  if (c.device_uniforms) {
    p.seeds = seeds.data();
    p.anchors = anchors.data();
  } else {
    p.uniforms = u.data();
  }
  p.out_tokens = want_out.data();
  p.num_accepted = want_acc.data();
  ref::spec_verify(p);

  test::DeviceArray<float> d_logits(c.dtype == DType::kF32 ? logits : std::vector<float>{});
  test::DeviceArray<fp16> d_logits16(logits16);
  test::DeviceArray<int32_t> d_drafts(drafts), d_out(rows), d_acc(c.batch);
  test::DeviceArray<float> d_q(q), d_u(u);
  test::DeviceArray<uint64_t> d_seeds(seeds);
  test::DeviceArray<int64_t> d_anchors(anchors);
  p.target_logits = c.dtype == DType::kF32 ? static_cast<const void*>(d_logits.get()) : d_logits16.get();
  p.draft_tokens = d_drafts.get();
  p.draft_probs = c.with_q ? d_q.get() : nullptr;
  if (c.device_uniforms) {
    p.seeds = d_seeds.get();
    p.anchors = d_anchors.get();
  } else {
    p.uniforms = d_u.get();
  }
  p.out_tokens = d_out.get();
  p.num_accepted = d_acc.get();
  const size_t ws = spec_verify_workspace_bytes(p);
  test::DeviceArray<uint8_t> d_ws(ws);
  p.workspace = d_ws.get();
  p.workspace_bytes = ws;
  kernel::spec_verify(p, nullptr);
  const std::vector<int32_t> got_acc = d_acc.download();
  const std::vector<int32_t> got_out = d_out.download();
  EXPECT_EQ(got_acc, want_acc) << "accept decisions differ";
  // Rows summed over the whole row on the GPU (block-scan CDF): small path k > 512, general
  // path beyond its candidate cap (sampling_layout.h plan).
  const bool full_rows = (c.top_k <= 0 || c.top_k > kMaxCandidateTopK) && c.temperature >= 1e-3f;
  int differing = 0;
  for (int32_t b = 0; b < c.batch; ++b) {
    for (int32_t j = 0; j <= c.L; ++j) {
      const size_t i = static_cast<size_t>(b) * (c.L + 1) + j;
      if (j < want_acc[b]) {
        ASSERT_EQ(got_out[i], want_out[i]) << "accepted token, seq " << b;
      } else if (j == want_acc[b]) {
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
  int64_t total_acc = 0;
  for (int32_t a : want_acc) total_acc += a;
  if (c.L > 0) EXPECT_GT(total_acc, 0) << "test has no power: nothing accepted";  // L = 0: bonus only
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
}

}  // namespace
}  // namespace es
