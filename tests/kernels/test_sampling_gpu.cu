// GPU sampling kernels against the CPU reference and against each other (both paths on the
// same rows and uniforms).
//
// Agreement rules (docs/sampling.md):
//  * probabilities: per entry <= 1e-5, total variation < 1e-4 (in practice bit-identical: the
//    kernels and the reference share sampling_math.h);
//  * tokens: exact whenever the kept set has <= 512 entries (candidate mode: the same sequential
//    fp32 CDF); in full-row mode the GPU sums the CDF as a block scan, so a mismatch is allowed
//    only at a documented CDF boundary, |u*total - cumsum_ref| <= 1e-5 * total, counted and
//    bounded per case;
//  * small-vocab vs general path: identical probabilities and identical tokens, always.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "support/gpu_test_util.h"
#include "support/sampling_gpu_run.h"

namespace es {
namespace {

struct Case {
  int32_t vocab;
  int32_t batch;
  DType dtype;
  float temperature;
  int32_t topK;
  float topP;
  TopPMode mode;
};

std::string describe(const Case& c) {
  return "V=" + std::to_string(c.vocab) + " B=" + std::to_string(c.batch) + " " +
         std::string(dtype_name(c.dtype)) + " T=" + std::to_string(c.temperature) +
         " k=" + std::to_string(c.topK) + " p=" + std::to_string(c.topP) +
         (c.mode == TopPMode::kNucleus ? " nucleus" : " truncate");
}

struct HostRows {
  std::vector<float> f32;  // as the reference sees them (fp16 rows already rounded)
  std::vector<fp16> f16;
  std::vector<float> uniforms;
};

HostRows make_rows(const Case& c, uint32_t seed, bool poison_some) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  HostRows h;
  const size_t n = static_cast<size_t>(c.batch) * c.vocab;
  h.f32.resize(n);
  for (int32_t b = 0; b < c.batch; ++b) {
    const bool ties = b % 3 == 1;  // coarse values: many exact ties
    for (int32_t i = 0; i < c.vocab; ++i) {
      float v = nd(rng);
      if (ties) v = std::round(v * 2.0f) * 0.5f;
      h.f32[static_cast<size_t>(b) * c.vocab + i] = v;
    }
    if (b % 5 == 4)
      h.f32[static_cast<size_t>(b) * c.vocab + (b * 7919) % c.vocab] = 25.0f;  // peaked
    if (poison_some && b % 4 == 2) {
      h.f32[static_cast<size_t>(b) * c.vocab + (b * 31) % c.vocab] = std::nanf("");
    }
  }
  if (c.dtype == DType::kF16) {
    h.f16.resize(n);
    for (size_t i = 0; i < n; ++i) {
      h.f16[i] = to_fp16(h.f32[i]);
      h.f32[i] = to_float(h.f16[i]);
    }
  }
  h.uniforms.resize(c.batch);
  for (int32_t b = 0; b < c.batch; ++b) {
    h.uniforms[b] = request_uniform(seed, 1000 + b, RngPurpose::kTarget, 0);
  }
  return h;
}

using Result = test::SampleOutputs;

SamplingParams params_of(const Case& c, SamplingPath path = SamplingPath::kAuto) {
  return test::sampling_params(c.batch, c.vocab, c.dtype, c.temperature, c.topK, c.topP, c.mode,
                               path);
}

// The device gets the f16 rows as made (not re-rounded from f32).
Result run_gpu(const Case& c, const HostRows& h, SamplingPath path) {
  const test::DeviceLogits logits =
      c.dtype == DType::kF32 ? test::DeviceLogits(DType::kF32, h.f32) : test::DeviceLogits(h.f16);
  return test::run_sample_rows_gpu(params_of(c, path), logits, h.uniforms);
}

// The reference reads the rows in the case's dtype (f16 as f16), unlike run_sample_rows_ref.
Result run_ref(const Case& c, const HostRows& h) {
  SamplingParams p = params_of(c);
  p.logits = c.dtype == DType::kF32 ? static_cast<const void*>(h.f32.data())
                                    : static_cast<const void*>(h.f16.data());
  p.uniforms = h.uniforms.data();
  Result r;
  r.tokens.assign(c.batch, -77);
  r.probs.assign(static_cast<size_t>(c.batch) * c.vocab, -77.0f);
  p.tokens = r.tokens.data();
  p.probs = r.probs.data();
  ref::sampleRows(p);
  return r;
}

// Whether a path sums the CDF over the whole row (block scan) rather than over <= 512 candidates.
bool full_row_mode(const Case& c, SamplingPath path) {
  const bool greedy = c.temperature < 1e-3f;
  const int32_t k = greedy ? 1 : (c.topK <= 0 || c.topK >= c.vocab) ? c.vocab : c.topK;
  if (path == SamplingPath::kSmallVocab) return k > kMaxCandidateTopK;
  SamplingParams p;
  p.batch = c.batch;
  p.vocab = c.vocab;
  p.temperature = c.temperature;
  p.topK = c.topK;
  p.path = SamplingPath::kGeneral;
  const sampling::GeneralPlan plan = sampling::planGeneral(p);
  return !(plan.anyCandidate && k <= plan.kcap);
}

// |u*total - cumsum| at the earlier of the two tokens, relative to total (reference sums).
double cdf_gap(const float* probs, int32_t vocab, float u, int32_t a, int32_t b) {
  float total = 0, run = 0, at = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    if (probs[i] > 0) total += probs[i];
  }
  for (int32_t i = 0; i <= std::min(a, b); ++i) {
    if (probs[i] > 0) run += probs[i];
  }
  at = run;
  return std::fabs(static_cast<double>(u) * total - at) / total;
}

void compare(const Case& c, const HostRows& h, const Result& want, const Result& got,
             const std::string& what, bool allow_boundary) {
  int boundary = 0;
  for (int32_t b = 0; b < c.batch; ++b) {
    const size_t base = static_cast<size_t>(b) * c.vocab;
    double tv = 0, worst = 0;
    int32_t nonzero = 0;
    for (int32_t i = 0; i < c.vocab; ++i) {
      const double d = std::fabs(static_cast<double>(want.probs[base + i]) - got.probs[base + i]);
      tv += d;
      worst = std::max(worst, d);
      nonzero += got.probs[base + i] != 0.0f;
      ASSERT_EQ(want.probs[base + i] == 0.0f, got.probs[base + i] == 0.0f)
          << what << " support differs row " << b << " index " << i;
    }
    ASSERT_LE(worst, 1e-5) << what << " row " << b;
    ASSERT_LT(tv / 2, 1e-4) << what << " row " << b;
    ASSERT_GT(nonzero, 0) << what << " row " << b;
    const int32_t tw = want.tokens[b], tg = got.tokens[b];
    ASSERT_GE(tg, 0) << what << " row " << b;
    ASSERT_LT(tg, c.vocab) << what << " row " << b;
    ASSERT_GT(want.probs[base + tg], 0.0f)
        << what << " sampled a zero-probability token, row " << b;
    if (tw != tg) {
      ASSERT_TRUE(allow_boundary) << what << " token mismatch row " << b << ": " << tw << " vs "
                                  << tg;
      const double gap = cdf_gap(&want.probs[base], c.vocab, h.uniforms[b], tw, tg);
      ASSERT_LE(gap, 1e-5) << what << " token mismatch off a CDF boundary, row " << b;
      ++boundary;
    }
  }
  EXPECT_LE(boundary, std::max(1, c.batch / 16)) << what << " too many CDF-boundary cases";
  if (boundary) std::printf("%s: %d CDF-boundary token differences\n", what.c_str(), boundary);
}

void check_case(const Case& c, bool poison_some = false) {
  SCOPED_TRACE(describe(c));
  const HostRows h = make_rows(c, 977u + c.vocab + c.batch, poison_some);
  const Result want = run_ref(c, h);
  const Result general = run_gpu(c, h, SamplingPath::kGeneral);
  compare(c, h, want, general, "general vs ref", full_row_mode(c, SamplingPath::kGeneral));
  if (c.vocab <= kSmallVocabMax) {
    const Result small = run_gpu(c, h, SamplingPath::kSmallVocab);
    compare(c, h, want, small, "small vs ref", full_row_mode(c, SamplingPath::kSmallVocab));
    EXPECT_EQ(small.tokens, general.tokens) << "paths disagree on tokens";
    for (size_t i = 0; i < small.probs.size(); ++i) {
      ASSERT_LE(std::fabs(small.probs[i] - general.probs[i]), 1e-5)
          << "paths disagree, entry " << i;
    }
  }
}

constexpr TopPMode kN = TopPMode::kNucleus;
constexpr TopPMode kT = TopPMode::kTruncate;

TEST(SamplingGpu, LargeVocabTopKTopP) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t batch : {1, 7, 64}) {
    check_case({151936, batch, DType::kF32, 0.8f, 50, 0.9f, kN});
  }
  check_case({151936, 7, DType::kF16, 1.0f, 50, 0.9f, kT});
  check_case({128256, 7, DType::kF32, 0.7f, 40, 0.95f, kN});
  check_case({128256, 1, DType::kF16, 1.0f, 512, 0.8f, kN});
  check_case({1000003, 1, DType::kF32, 1.0f, 50, 0.9f, kN});
  check_case({151936, 7, DType::kF32, 0.0f, 0, 1.0f, kN});  // greedy
  check_case({151936, 7, DType::kF32, 1.0f, 1, 1.0f, kN});  // top-k 1
}

TEST(SamplingGpu, LargeVocabFullRowMode) {
  ES_SKIP_IF_NO_GPU();
  check_case({151936, 7, DType::kF32, 1.0f, 0, 0.9f, kN});
  check_case({151936, 7, DType::kF32, 1.0f, 0, 0.9f, kT});
  check_case({128256, 7, DType::kF16, 0.9f, 0, 1.0f, kN});
  check_case({151936, 7, DType::kF32, 1.0f, 2000, 0.95f, kN});
  check_case({1000003, 1, DType::kF32, 1.0f, 0, 0.5f, kT});
}

TEST(SamplingGpu, SmallAndOddVocabBothPaths) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t v : {257, 2048, 4095, 4096}) {
    for (DType dt : {DType::kF32, DType::kF16}) {
      check_case({v, 64, dt, 1.0f, 50, 0.8f, kN});
      check_case({v, 7, dt, 0.7f, 50, 0.8f, kT});
    }
    check_case({v, 7, DType::kF32, 1.0f, 0, 0.9f, kN});    // full sort / full row
    check_case({v, 7, DType::kF32, 1.0f, 600, 1.0f, kN});  // k > 512
    check_case({v, 7, DType::kF32, 1.0f, 300, 0.95f, kT});
    check_case({v, 1, DType::kF32, 0.0f, 0, 1.0f, kN});
  }
  check_case({4097, 7, DType::kF32, 1.0f, 50, 0.8f, kN});  // just above the small-vocab path
  check_case({4097, 7, DType::kF16, 1.0f, 0, 0.8f, kT});
  check_case({100, 7, DType::kF32, 1.0f, 0, 1.0f, kN});  // V <= 512, top-k off: candidates
}

TEST(SamplingGpu, NonFiniteRowsTakeTheUniformFallback) {
  ES_SKIP_IF_NO_GPU();
  check_case({2048, 16, DType::kF32, 1.0f, 50, 0.8f, kN}, true);
  check_case({151936, 8, DType::kF32, 1.0f, 50, 0.9f, kN}, true);
  check_case({151936, 8, DType::kF32, 1.0f, 0, 0.9f, kN}, true);
}

TEST(SamplingGpu, DeviceUniformsAndPerRowParameters) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t v : {2048, 151936}) {
    const int32_t b = 6;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(b) * v);
    for (float& x : logits) x = nd(rng);
    std::vector<uint64_t> seeds = {1, 2, 3, 4, 5, 6};
    std::vector<int64_t> positions = {7, 8, int64_t{1} << 35, 10, 11, 12};
    std::vector<float> temps = {1.0f, 0.0f, 0.5f, 1.3f, 1.0f, 0.9f};
    std::vector<int32_t> ks = {50, 0, 10, -1, 600, 1};
    std::vector<float> ps = {0.9f, 1.0f, 0.5f, 0.3f, 1.0f, 0.7f};
    SamplingParams p;
    p.batch = b;
    p.vocab = v;
    p.topPMode = TopPMode::kTruncate;
    std::vector<int32_t> want_tokens(b);
    std::vector<float> want_probs(logits.size());
    p.logits = logits.data();
    p.seeds = seeds.data();
    p.positions = positions.data();
    p.temperatures = temps.data();
    p.topKs = ks.data();
    p.topPs = ps.data();
    p.tokens = want_tokens.data();
    p.probs = want_probs.data();
    ref::sampleRows(p);
    test::DeviceArray<float> d_logits(logits);
    test::DeviceArray<uint64_t> d_seeds(seeds);
    test::DeviceArray<int64_t> d_pos(positions);
    test::DeviceArray<float> d_t(temps), d_p(ps);
    test::DeviceArray<int32_t> d_k(ks), d_tokens(b);
    test::DeviceArray<float> d_probs(logits.size());
    p.logits = d_logits.get();
    p.seeds = d_seeds.get();
    p.positions = d_pos.get();
    p.temperatures = d_t.get();
    p.topKs = d_k.get();
    p.topPs = d_p.get();
    p.tokens = d_tokens.get();
    p.probs = d_probs.get();
    const size_t ws = samplingWorkspaceBytes(p);
    test::DeviceArray<uint8_t> d_ws(ws);
    p.workspace = d_ws.get();
    p.workspaceBytes = ws;
    kernel::sampleRows(p, nullptr);
    const std::vector<int32_t> got = d_tokens.download();
    const std::vector<float> got_p = d_probs.download();
    for (int32_t r = 0; r < b; ++r) {
      if (r == 3 || r == 4) continue;  // k off / k = 600: full-row CDF (boundary rule elsewhere)
      EXPECT_EQ(got[r], want_tokens[r]) << "V " << v << " row " << r;
    }
    for (size_t i = 0; i < got_p.size(); ++i)
      ASSERT_LE(std::fabs(got_p[i] - want_probs[i]), 1e-5) << i;
  }
}

TEST(SamplingGpu, ChiSquareOnDevice) {
  ES_SKIP_IF_NO_GPU();
  // 16-token distribution, 200k rows of the same logits, uniforms from request_uniform on device.
  const int32_t v = 16, n = 200000;
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(v);
  for (float& x : row) x = nd(rng);
  std::vector<float> probs(v);
  ref::rowProbs(row.data(), v, 1.0f, 0, 1.0f, TopPMode::kNucleus, probs.data());
  std::vector<float> logits(static_cast<size_t>(n) * v);
  for (int32_t i = 0; i < n; ++i)
    std::copy(row.begin(), row.end(), logits.begin() + static_cast<size_t>(i) * v);
  std::vector<uint64_t> seeds(n, 99);
  std::vector<int64_t> positions(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = i;
  test::DeviceArray<float> d_logits(logits);
  test::DeviceArray<uint64_t> d_seeds(seeds);
  test::DeviceArray<int64_t> d_pos(positions);
  test::DeviceArray<int32_t> d_tokens(n);
  SamplingParams p;
  p.logits = d_logits.get();
  p.batch = n;
  p.vocab = v;
  p.seeds = d_seeds.get();
  p.positions = d_pos.get();
  p.tokens = d_tokens.get();
  kernel::sampleRows(p, nullptr);
  const std::vector<int32_t> tokens = d_tokens.download();
  std::vector<int64_t> counts(v, 0);
  for (int32_t t : tokens) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, v);
    ++counts[t];
  }
  double chi = 0;
  for (int32_t j = 0; j < v; ++j) {
    const double e = probs[j] * static_cast<double>(n);
    chi += (counts[j] - e) * (counts[j] - e) / e;
  }
  EXPECT_LT(chi, 37.697) << "chi-square, 15 dof, p = 1e-3";
}

}  // namespace
}  // namespace es
