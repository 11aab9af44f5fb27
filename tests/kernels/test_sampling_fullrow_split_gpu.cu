// The split full-row decision (fullRowKernel on a cluster of CTAs per row: batch <= 64,
// V >= 32768, top-k off or above the candidate cap) against the CPU reference: probabilities bit
// for bit and tokens exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "support/gpu_test_util.h"
#include "support/sampling_gpu_run.h"

namespace es {
namespace {

struct FrCase {
  int32_t vocab;
  int32_t batch;
  DType dtype;
  float temperature;
  float topP;
  int32_t topK = 0;
  TopPMode mode = TopPMode::kNucleus;
};

std::string describe(const FrCase& c, uint32_t seed) {
  return "V=" + std::to_string(c.vocab) + " B=" + std::to_string(c.batch) + " " +
         std::string(dtype_name(c.dtype)) + " T=" + std::to_string(c.temperature) +
         " p=" + std::to_string(c.topP) + " k=" + std::to_string(c.topK) +
         (c.mode == TopPMode::kTruncate ? " truncate" : " nucleus") +
         " seed=" + std::to_string(seed);
}

SamplingParams params_of(const FrCase& c) {
  return test::sampling_params(c.batch, c.vocab, c.dtype, c.temperature, c.topK, c.topP, c.mode);
}

// Row b: N(0, 3) logits; b % 4 == 1 on a 0.5 grid (the cuts fall inside tie groups spanning
// CTAs); b % 4 == 2 one constant (a single tie group); b % 4 == 3 a peak over N(0, 1).
std::vector<float> make_logits(const FrCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(c.batch) * c.vocab);
  for (int32_t b = 0; b < c.batch; ++b) {
    float* row = x.data() + static_cast<size_t>(b) * c.vocab;
    std::normal_distribution<float> nd(0.0f, b % 4 == 3 ? 1.0f : 3.0f);
    for (int32_t i = 0; i < c.vocab; ++i) row[i] = nd(rng);
    if (b % 4 == 1) {
      for (int32_t i = 0; i < c.vocab; ++i) row[i] = std::round(row[i] * 2.0f) * 0.5f;
    }
    if (b % 4 == 2) {
      for (int32_t i = 0; i < c.vocab; ++i) row[i] = 0.25f;
    }
    if (b % 4 == 3) row[(seed * 7919u + b) % c.vocab] = 12.0f;
  }
  if (c.dtype == DType::kF16) {
    for (auto& v : x) v = to_float(to_fp16(v));
  }
  return x;
}

// with_probs false: tokens only (then the split CDF draws them).
test::SampleOutputs run_gpu(const SamplingParams& p, const std::vector<float>& x,
                            const std::vector<float>& u, bool with_probs) {
  return test::run_sample_rows_gpu(p, x, u, {.probs = with_probs, .download_workspace = false});
}

void check(const FrCase& c, uint32_t seed) {
  const SamplingParams p = params_of(c);
  ASSERT_TRUE(sampling::planGeneral(p).fullrowSplit)
      << "not the split decision: " << describe(c, seed);
  const auto x = make_logits(c, seed);
  std::mt19937 rng(seed ^ 0x5bd1e995u);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> u(c.batch);
  for (auto& v : u) v = uni(rng);
  const test::SampleOutputs want = test::run_sample_rows_ref(p, x, u);
  test::expect_same_samples(run_gpu(p, x, u, true), want, c.batch, c.vocab,
                            describe(c, seed) + " (probs + tokens)");
  test::expect_same_samples(run_gpu(p, x, u, false), want, c.batch, c.vocab,
                            describe(c, seed) + " (tokens only)");
}

// Batches 9-64: clusters of 16, 8 and 4 CTAs per row (fullrowSplitRanks), tokens drawn by the
// split CDF (also batch <= 64); the default model's 16-row verify shape.
TEST(SamplingFullRowSplitGpu, LargerBatchesEqualReference) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t batch : {9, 16, 17, 33, 64}) {
    check({151936, batch, DType::kF32, 1.0f, 0.9f}, 31u * batch);
    check({49152, batch, DType::kF32, 1.0f, 1.0f}, 37u * batch);
  }
  check({49152, 16, DType::kF16, 0.8f, 0.9f, 0, TopPMode::kTruncate}, 41);
  check({128256, 40, DType::kF32, 1.0f, 0.95f, 2000}, 43);  // top-k above the cap, 4 CTAs per row
}

TEST(SamplingFullRowSplitGpu, ProbsAndTokensEqualReference) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t v : {151936, 128256, 49152, 40961}) {
    for (int32_t batch : {1, 2, 3, 5, 8}) {
      check({v, batch, DType::kF32, 1.0f, 0.9f}, 1000u * v + batch);
      if (v == 151936 || batch == 8) {
        check({v, batch, DType::kF32, 0.7f, 0.5f, 0, TopPMode::kTruncate}, 77u * v + batch);
        check({v, batch, DType::kF32, 1.3f, 1.0f}, 13u * v + batch);
      }
    }
  }
}

TEST(SamplingFullRowSplitGpu, TopKAboveCapFp16AndTinyTopP) {
  ES_SKIP_IF_NO_GPU();
  check({151936, 4, DType::kF32, 1.0f, 0.95f, 2000}, 1);  // top-k select + tie across CTAs
  check({151936, 4, DType::kF32, 1.0f, 1.0f, 60000}, 2);  // top-k only
  check({151936, 8, DType::kF16, 1.0f, 0.9f}, 3);
  check({49152, 8, DType::kF16, 0.8f, 0.9f, 0, TopPMode::kTruncate}, 4);
  check({151936, 2, DType::kF32, 1.0f, 1e-6f}, 5);  // budget 1: the top token only
}

// Per-row parameters: candidate rows (chunk + final kernels), full-row rows (the cluster), a
// greedy row and a uniform-fallback row (NaN) in one batch.
TEST(SamplingFullRowSplitGpu, MixedRows) {
  ES_SKIP_IF_NO_GPU();
  const FrCase c{151936, 8, DType::kF32, 1.0f, 1.0f};
  const std::vector<int32_t> ks = {50, 0, 600, 0, 1, 20000, 0, 0};
  const std::vector<float> ts = {1.0f, 0.7f, 1.3f, 2.0f, 1.0f, 0.5f, 0.0f, 1.0f};
  const std::vector<float> ps = {0.9f, 0.9f, 0.5f, 1.0f, 0.9f, 0.95f, 0.9f, 0.9f};
  for (uint32_t seed = 0; seed < 4; ++seed) {
    auto x = make_logits(c, 500 + seed);
    x[7 * static_cast<size_t>(c.vocab) + 123] = std::nanf("");  // row 7: uniform fallback
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    std::vector<float> u(c.batch);
    for (auto& v : u) v = uni(rng);
    SamplingParams p = params_of(c);
    p.topKs = ks.data();
    p.temperatures = ts.data();
    p.topPs = ps.data();
    const test::SampleOutputs want = test::run_sample_rows_ref(p, x, u);
    test::DeviceArray<int32_t> d_k(ks);
    test::DeviceArray<float> d_t(ts), d_p(ps);
    p.topKs = d_k.get();
    p.temperatures = d_t.get();
    p.topPs = d_p.get();
    ASSERT_TRUE(sampling::planGeneral(p).fullrowSplit);
    for (bool with_probs : {true, false}) {
      const test::SampleOutputs got = run_gpu(p, x, u, with_probs);
      for (int32_t b = 0; b < c.batch; ++b) {
        EXPECT_EQ(got.tokens[b], want.tokens[b])
            << "seed " << seed << " row " << b << " k " << ks[b];
      }
      if (!with_probs) continue;
      for (int32_t b = 0; b < c.batch;
           ++b) {  // candidate rows may differ in float rounding nowhere either
        int bad = 0;
        for (int32_t i = 0; i < c.vocab; ++i) {
          const size_t k = static_cast<size_t>(b) * c.vocab + i;
          bad += std::memcmp(&got.probs[k], &want.probs[k], sizeof(float)) != 0 ? 1 : 0;
        }
        EXPECT_EQ(bad, 0) << "seed " << seed << " row " << b;
      }
    }
  }
}

// Batch 65 is above the split's row limit: the plan says so (the one-CTA kernel serves).
TEST(SamplingFullRowSplitGpu, PlanLimits) {
  EXPECT_TRUE(sampling::planGeneral(params_of({151936, 64, DType::kF32, 1.0f, 0.9f})).fullrowSplit);
  EXPECT_FALSE(
      sampling::planGeneral(params_of({151936, 65, DType::kF32, 1.0f, 0.9f})).fullrowSplit);
  EXPECT_FALSE(sampling::planGeneral(params_of({32767, 1, DType::kF32, 1.0f, 0.9f})).fullrowSplit);
  EXPECT_FALSE(
      sampling::planGeneral(params_of({151936, 1, DType::kF32, 1.0f, 0.9f, 50})).fullrowSplit);
}

}  // namespace
}  // namespace es
