// The split full-row inverse CDF (kernels/sampling_cdf_split.cu: few rows, large vocab, top-k
// off or above the candidate cap) against the CPU reference, token for token: it reproduces
// spec §3.5's sequential fp32 running sum exactly, so no boundary tolerance applies.
#include <gtest/gtest.h>

#include <cmath>
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

struct SplitCase {
  int32_t vocab;
  int32_t batch;
  DType dtype;
  float temperature;
  float topP;
  int32_t topK = 0;
  TopPMode mode = TopPMode::kNucleus;
};

std::string describe(const SplitCase& c, uint32_t seed) {
  return "V=" + std::to_string(c.vocab) + " B=" + std::to_string(c.batch) + " " +
         std::string(dtype_name(c.dtype)) + " T=" + std::to_string(c.temperature) +
         " p=" + std::to_string(c.topP) + " k=" + std::to_string(c.topK) +
         " seed=" + std::to_string(seed);
}

SamplingParams params_of(const SplitCase& c) {
  return test::sampling_params(c.batch, c.vocab, c.dtype, c.temperature, c.topK, c.topP, c.mode);
}

// Rows: Gaussian logits (scale 1..4), every third row coarse (ties), every fourth peaked. With
// same_row, every row is row 0's logits (many uniforms on one distribution).
std::vector<float> make_logits(const SplitCase& c, uint32_t seed, bool same_row) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(c.batch) * c.vocab);
  for (int32_t b = 0; b < c.batch; ++b) {
    float* row = x.data() + static_cast<size_t>(b) * c.vocab;
    if (same_row && b > 0) {
      std::copy(x.begin(), x.begin() + c.vocab, row);
      continue;
    }
    std::normal_distribution<float> nd(0.0f, 1.0f + static_cast<float>((seed + b) % 4));
    for (int32_t i = 0; i < c.vocab; ++i) row[i] = nd(rng);
    if (b % 3 == 1) {
      for (int32_t i = 0; i < c.vocab; ++i) row[i] = std::round(row[i] * 2.0f) * 0.5f;
    }
    if (b % 4 == 3) row[(seed * 7919u + b) % c.vocab] = 20.0f;
  }
  if (c.dtype == DType::kF16) {
    for (auto& v : x) v = to_float(to_fp16(v));
  }
  return x;
}

// Tokens only on either side (no probabilities); the device workspace is poisoned, so nothing may
// be read before it is written.
std::vector<int32_t> run_gpu(const SplitCase& c, const std::vector<float>& x,
                             const std::vector<float>& u) {
  const test::GpuSampleOptions tokens_only{.probs = false, .download_workspace = false};
  return test::run_sample_rows_gpu(params_of(c), x, u, tokens_only).tokens;
}

std::vector<int32_t> run_ref(const SplitCase& c, const std::vector<float>& x,
                             const std::vector<float>& u) {
  return test::run_sample_rows_ref(params_of(c), x, u, /*with_probs=*/false).tokens;
}

void check(const SplitCase& c, uint32_t seed, bool same_row = false) {
  SamplingParams p = params_of(c);
  ASSERT_TRUE(sampling::planGeneral(p).cdfSplit) << "not the split path: " << describe(c, seed);
  const auto x = make_logits(c, seed, same_row);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> u(c.batch);
  for (auto& v : u) v = uni(rng);
  if (same_row) {  // the ends of [0, 1) too
    u[0] = 0.0f;
    if (c.batch > 1) u[1] = 0.99999994f;
  }
  const auto want = run_ref(c, x, u);
  const auto got = run_gpu(c, x, u);
  for (int32_t b = 0; b < c.batch; ++b) {
    EXPECT_EQ(got[b], want[b]) << describe(c, seed) << " row " << b << " u " << u[b];
  }
}

TEST(SamplingCdfSplitGpu, TokensEqualReference) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t v : {151936, 49152, 100003}) {
    for (int32_t batch : {1, 2, 8}) {
      for (float t : {0.5f, 1.0f, 2.0f}) {
        for (float topP : {1.0f, 0.9f}) {
          const int seeds = batch == 8 ? 3 : 6;
          for (int s = 0; s < seeds; ++s) {
            check({v, batch, DType::kF32, t, topP}, 1000u * v + 17u * batch + s);
          }
        }
      }
    }
  }
}

// Batches up to the split's limit of 64 rows (grids of chunks x rows CTAs, one chain per row).
TEST(SamplingCdfSplitGpu, LargerBatchesEqualReference) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t batch : {9, 16, 64}) {
    check({151936, batch, DType::kF32, 1.0f, 1.0f}, 5000u + batch);
    check({49152, batch, DType::kF32, 0.7f, 0.9f}, 6000u + batch);
  }
}

TEST(SamplingCdfSplitGpu, ManyUniformsOnOneRow) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t v : {151936, 49152, 100003}) {
    for (float t : {0.5f, 1.0f, 2.0f}) {
      for (int s = 0; s < 8; ++s) check({v, 8, DType::kF32, t, 1.0f}, 77u + s, true);
    }
  }
}

TEST(SamplingCdfSplitGpu, Fp16TruncateAndLargeTopK) {
  ES_SKIP_IF_NO_GPU();
  check({151936, 4, DType::kF16, 1.0f, 1.0f}, 5);
  check({151936, 4, DType::kF16, 1.0f, 0.9f}, 6);
  check({151936, 4, DType::kF32, 1.0f, 0.9f, 0, TopPMode::kTruncate}, 7);
  check({151936, 4, DType::kF32, 1.0f, 0.95f, 2000}, 8);  // k above the candidate cap
}

// Per-row top-k: candidate rows (k <= cap, drawn by finalFastKernel) and full-row rows (drawn
// by the split kernels) in one batch; each row's token must come from exactly one of them.
TEST(SamplingCdfSplitGpu, MixedCandidateAndFullRows) {
  ES_SKIP_IF_NO_GPU();
  const SplitCase c{151936, 6, DType::kF32, 1.0f, 1.0f};
  const std::vector<int32_t> ks = {50, 0, 600, 0, 1, 20000};
  const std::vector<float> ts = {1.0f, 0.7f, 1.3f, 2.0f, 1.0f, 0.5f};
  for (uint32_t seed = 0; seed < 6; ++seed) {
    const auto x = make_logits(c, 300 + seed, false);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    std::vector<float> u(c.batch);
    for (auto& v : u) v = uni(rng);
    SamplingParams p = params_of(c);
    p.topKs = ks.data();
    p.temperatures = ts.data();
    p.logits = x.data();
    p.uniforms = u.data();
    std::vector<int32_t> want(c.batch, -77);
    p.tokens = want.data();
    ref::sampleRows(p);

    test::DeviceArray<float> d_x(x), d_u(u), d_t(ts);
    test::DeviceArray<int32_t> d_k(ks), d_tokens(c.batch);
    p.logits = d_x.get();
    p.uniforms = d_u.get();
    p.topKs = d_k.get();
    p.temperatures = d_t.get();
    p.tokens = d_tokens.get();
    ASSERT_TRUE(sampling::planGeneral(p).cdfSplit);
    const size_t ws = samplingWorkspaceBytes(p);
    test::DeviceArray<uint8_t> d_ws(ws);
    p.workspace = d_ws.get();
    p.workspaceBytes = ws;
    kernel::sampleRows(p, nullptr);
    const auto got = d_tokens.download();
    for (int32_t b = 0; b < c.batch; ++b) {
      EXPECT_EQ(got[b], want[b]) << "seed " << seed << " row " << b << " k " << ks[b];
    }
  }
}

}  // namespace
}  // namespace es
