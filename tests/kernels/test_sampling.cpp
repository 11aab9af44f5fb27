// CPU tests of the sampling reference (spec §3.1-3.6) and of the shared arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/rng.h"
#include "kernels/sampling.h"
#include "kernels/sampling_math.h"

namespace es {
namespace {

using namespace es::sampling;

std::vector<float> probs_of(const std::vector<float>& logits, float t, int32_t k, float p,
                            TopPMode mode = TopPMode::kNucleus, bool* uniform = nullptr) {
  std::vector<float> out(logits.size(), -7.0f);  // poison
  const bool u =
      ref::rowProbs(logits.data(), static_cast<int32_t>(logits.size()), t, k, p, mode, out.data());
  if (uniform) *uniform = u;
  return out;
}

// Pearson chi-square of counts against probabilities (bins with expectation >= 5).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n,
                  int* dof) {
  double chi = 0;
  int bins = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    if (e < 5) continue;
    chi += (counts[i] - e) * (counts[i] - e) / e;
    ++bins;
  }
  *dof = bins - 1;
  return chi;
}
// Upper 0.001 quantiles of chi-square (fixed p-value 1e-3, seeds fixed: the tests are
// deterministic; the threshold only says how unlikely a correct sampler's statistic is).
double chi_square_limit(int dof) {
  static const double q999[] = {0,      10.828, 13.816, 16.266, 18.467, 20.515,
                                22.458, 24.322, 26.124, 27.877, 29.588, 31.264,
                                32.909, 34.528, 36.123, 37.697, 39.252};
  return q999[dof];
}

TEST(SamplingMath, ExpMatchesLibmAndIsExactAtZero) {
  EXPECT_EQ(expNonpos(0.0f), 1.0f);
  EXPECT_EQ(expNonpos(-200.0f), 0.0f);
  EXPECT_EQ(expNonpos(-__builtin_huge_valf()), 0.0f);
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float d = -87.0f * static_cast<float>(i) / 2000000.0f;
    const double want = std::exp(static_cast<double>(d));
    const double rel = std::fabs(expNonpos(d) - want) / want;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 4e-7);
  // Subnormal results: absolute error below one subnormal step.
  for (float d = -103.0f; d < -87.5f; d += 0.37f) {
    EXPECT_NEAR(expNonpos(d), std::exp(static_cast<double>(d)), 1.5e-45) << d;
  }
}

// massBelowMax skips the exp below d = -28; it must equal massOf(expNonpos(d)) for every d.
// Exhaustive over the floats in [-64, -16] (every d around the shortcut), sampled elsewhere.
TEST(SamplingMath, MassBelowMaxEqualsMassOfExp) {
  auto check = [](float d) { ASSERT_EQ(massBelowMax(d, 0.0f), massOf(expNonpos(d))) << "d " << d; };
  for (uint32_t b = f2u(-16.0f); b <= f2u(-64.0f); ++b) {
    const float d = u2f(b);
    if (massBelowMax(d, 0.0f) != massOf(expNonpos(d))) check(d);  // fast path, then report
  }
  EXPECT_GT(massOf(expNonpos(-27.0f)), 0u);  // the shortcut sits near the real edge (~-27.7)
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-200.0f, 0.0f);
  for (int i = 0; i < 100000; ++i) check(uni(rng));
  for (float d : {0.0f, -0.0f, -1e-30f, -27.7f, -28.0f, -103.9f, -104.0f, -__builtin_huge_valf()})
    check(d);
  EXPECT_EQ(massBelowMax(3.0f, 5.0f), massOf(expNonpos(-2.0f)));
}

TEST(SamplingMath, OrderKeyIsMonotoneAndZerosTie) {
  const float values[] = {
      -__builtin_huge_valf(), -1e30f, -2.5f, -1e-40f, -0.0f, 0.0f, 1e-40f, 1.0f, 3e38f,
      __builtin_huge_valf()};
  for (size_t i = 0; i + 1 < sizeof(values) / sizeof(values[0]); ++i) {
    if (values[i] == values[i + 1]) {
      EXPECT_EQ(orderKey(values[i]), orderKey(values[i + 1]));
    } else {
      EXPECT_LT(orderKey(values[i]), orderKey(values[i + 1])) << values[i];
    }
    EXPECT_EQ(keyValue(orderKey(values[i])), values[i]);
  }
  EXPECT_GT(composite(5, 3), composite(5, 4));  // same key: lower index ranks first
  EXPECT_EQ(compositeIndex(composite(9, 1234)), 1234u);
}

TEST(SamplingRef, TopKTiesResolveToLowerIndex) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f, 0.5f};
  const std::vector<float> p = probs_of(logits, 1.0f, 2, 1.0f);
  EXPECT_FLOAT_EQ(p[1], 0.5f);
  EXPECT_FLOAT_EQ(p[3], 0.5f);
  EXPECT_EQ(p[4], 0.0f);  // tied with 1 and 3, higher index: out
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[2], 0.0f);
  // Greedy picks the first maximum; -0 and +0 tie.
  const std::vector<float> g = probs_of(logits, 0.0f, 0, 1.0f);
  EXPECT_EQ(g[1], 1.0f);
  const std::vector<float> z = probs_of({-0.0f, 0.0f, -1.0f}, 0.0f, 0, 1.0f);
  EXPECT_EQ(z[0], 1.0f);
}

TEST(SamplingRef, TopKOffWhenNonPositiveOrAtLeastVocab) {
  const std::vector<float> logits = {0.1f, -2.0f, 1.5f, 0.7f};
  const std::vector<float> off = probs_of(logits, 1.0f, 0, 1.0f);
  EXPECT_EQ(probs_of(logits, 1.0f, -3, 1.0f), off);
  EXPECT_EQ(probs_of(logits, 1.0f, 4, 1.0f), off);
  EXPECT_EQ(probs_of(logits, 1.0f, 99, 1.0f), off);
  for (float v : off) EXPECT_GT(v, 0.0f);
  EXPECT_EQ(probs_of(logits, 1.0f, 3, 1.0f)[1], 0.0f);
  double sum = 0, expsum = 0;
  for (float l : logits) expsum += std::exp(static_cast<double>(l));
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(off[i], std::exp(static_cast<double>(logits[i])) / expsum, 1e-6);
    sum += off[i];
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(SamplingRef, TemperatureScalesLogits) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    const std::vector<float> p = probs_of(logits, t, 0, 1.0f);
    double z = 0;
    for (float l : logits) z += std::exp(l / t);
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(p[i], std::exp(logits[i] / t) / z, 1e-6);
  }
  // Just below the greedy threshold: one-hot; just above: a real distribution.
  EXPECT_EQ(probs_of(logits, 0.00099f, 0, 1.0f)[1], 1.0f);
  EXPECT_LT(probs_of({1.0f, 1.001f}, 0.001f, 0, 1.0f)[1], 1.0f);
}

TEST(SamplingRef, NucleusAndTruncateWorkedExample) {
  // Masses 0.5, 0.3, 0.2 (index order scrambled); p = 0.6.
  const std::vector<float> logits = {std::log(0.3f), std::log(0.2f), std::log(0.5f)};
  const std::vector<float> n = probs_of(logits, 1.0f, 0, 0.6f, TopPMode::kNucleus);
  EXPECT_NEAR(n[2], 0.625, 1e-6);  // 0.5 / 0.8
  EXPECT_NEAR(n[0], 0.375, 1e-6);  // 0.3 / 0.8
  EXPECT_EQ(n[1], 0.0f);
  const std::vector<float> t = probs_of(logits, 1.0f, 0, 0.6f, TopPMode::kTruncate);
  EXPECT_NEAR(t[2], 0.5 / 0.6, 1e-6);  // full
  EXPECT_NEAR(t[0], 0.1 / 0.6, 1e-6);  // boundary token partially kept: 0.6 - 0.5
  EXPECT_EQ(t[1], 0.0f);
  // p = 0.5 exactly reached by the first token: nucleus keeps one, truncate keeps one.
  EXPECT_EQ(probs_of(logits, 1.0f, 0, 0.4f, TopPMode::kNucleus)[2], 1.0f);
  EXPECT_EQ(probs_of(logits, 1.0f, 0, 0.4f, TopPMode::kTruncate)[2], 1.0f);
  // top-k 2 first, then top-p over the kept mass 0.8: budget 0.48 -> first token only (nucleus).
  EXPECT_EQ(probs_of(logits, 1.0f, 2, 0.6f, TopPMode::kNucleus)[2], 1.0f);
  // p = 1 is off.
  EXPECT_GT(probs_of(logits, 1.0f, 0, 1.0f)[1], 0.0f);
}

TEST(SamplingRef, NonFiniteRowsFallBackToUniform) {
  const float nan = std::nanf(""), inf = __builtin_huge_valf();
  for (const std::vector<float>& row :
       {std::vector<float>{0.0f, nan, 1.0f, 2.0f}, std::vector<float>{inf, 0.0f, 1.0f, 2.0f},
        std::vector<float>{-inf, -inf, -inf, -inf}}) {
    bool uniform = false;
    const std::vector<float> p = probs_of(row, 1.0f, 2, 0.5f, TopPMode::kNucleus, &uniform);
    EXPECT_TRUE(uniform);
    for (float v : p) EXPECT_EQ(v, 0.25f);
  }
  // Overflow by temperature also poisons the row.
  bool uniform = false;
  probs_of({3e38f, 1.0f}, 0.01f, 0, 1.0f, TopPMode::kNucleus, &uniform);
  EXPECT_TRUE(uniform);
  // -inf entries alone are fine: they get zero probability.
  const std::vector<float> p =
      probs_of({-inf, 0.0f, -inf}, 1.0f, 0, 1.0f, TopPMode::kNucleus, &uniform);
  EXPECT_FALSE(uniform);
  EXPECT_EQ(p[1], 1.0f);
  EXPECT_EQ(p[0], 0.0f);
  // Uniform fallback sample is floor(u * V).
  EXPECT_EQ(uniformRowToken(0.0001f, 4), 0);
  EXPECT_EQ(uniformRowToken(0.5f, 4), 2);
  EXPECT_EQ(uniformRowToken(1.0f - 1e-7f, 4), 3);
}

TEST(SamplingRef, InverseCdfStrictSkipsZerosAndFallsBack) {
  const std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.25f, 0.5f, 0.0f};
  EXPECT_EQ(ref::sampleFromProbs(p.data(), 6, 0.1f), 1);
  EXPECT_EQ(ref::sampleFromProbs(p.data(), 6, 0.25f), 3);  // running 0.25 is not > 0.25
  EXPECT_EQ(ref::sampleFromProbs(p.data(), 6, 0.4999f), 3);
  EXPECT_EQ(ref::sampleFromProbs(p.data(), 6, 0.5f), 4);
  EXPECT_EQ(ref::sampleFromProbs(p.data(), 6, 1.0f), 4);  // nothing > total: last positive
  const std::vector<float> none = {0.0f, -1.0f};
  EXPECT_EQ(ref::sampleFromProbs(none.data(), 2, 0.5f), -1);
}

TEST(SamplingRef, BadParametersThrowNamingTheArgument) {
  std::vector<float> logits(8, 0.0f);
  std::vector<int32_t> tokens(1);
  std::vector<float> u(1, 0.5f);
  auto expect_throw = [&](auto mutate, const std::string& name) {
    SamplingParams p;
    p.logits = logits.data();
    p.batch = 1;
    p.vocab = 8;
    p.tokens = tokens.data();
    p.uniforms = u.data();
    mutate(p);
    try {
      ref::sampleRows(p);
      ADD_FAILURE() << "no throw for " << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + name + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ref::sample_rows"), std::string::npos) << e.what();
    }
  };
  expect_throw([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature");
  expect_throw([](SamplingParams& p) { p.temperature = std::nanf(""); }, "temperature");
  expect_throw([](SamplingParams& p) { p.topP = 0.0f; }, "top_p");
  expect_throw([](SamplingParams& p) { p.topP = 1.5f; }, "top_p");
  expect_throw([](SamplingParams& p) { p.topP = -0.1f; }, "top_p");
  expect_throw([](SamplingParams& p) { p.vocab = 0; }, "vocab");
  expect_throw([](SamplingParams& p) { p.batch = -1; }, "batch");
  expect_throw([](SamplingParams& p) { p.logits = nullptr; }, "logits");
  expect_throw([](SamplingParams& p) { p.uniforms = nullptr; }, "uniforms");
  expect_throw([](SamplingParams& p) { p.logitsDtype = DType::kI32; }, "logits_dtype");
  expect_throw(
      [](SamplingParams& p) {
        p.path = SamplingPath::kSmallVocab;
        p.vocab = 5000;
      },
      "vocab");
  // Valid edge values do not throw.
  SamplingParams ok;
  ok.logits = logits.data();
  ok.batch = 1;
  ok.vocab = 8;
  ok.tokens = tokens.data();
  ok.uniforms = u.data();
  ok.topP = 1.0f;
  ok.temperature = 0.0f;
  ok.topK = -5;
  EXPECT_NO_THROW(ref::sampleRows(ok));
}

// Independent brute force: double softmax, std::stable_sort for the order, top-p in double.
std::vector<double> brute_probs(const std::vector<float>& logits, float t, int32_t k, float p,
                                TopPMode mode, double* boundary_gap) {
  const int32_t v = static_cast<int32_t>(logits.size());
  std::vector<double> s(v);
  for (int32_t i = 0; i < v; ++i) s[i] = static_cast<double>(logits[i]) / t;
  std::vector<int32_t> idx(v);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  const int32_t kept = (k <= 0 || k >= v) ? v : k;
  std::vector<double> e(kept);
  double total = 0;
  for (int32_t j = 0; j < kept; ++j) total += (e[j] = std::exp(s[idx[j]] - s[idx[0]]));
  std::vector<double> out(v, 0.0);
  *boundary_gap = 1.0;
  if (p >= 1.0f - 1e-6f) {
    for (int32_t j = 0; j < kept; ++j) out[idx[j]] = e[j] / total;
    return out;
  }
  const double budget = p * total;
  double prefix = 0;
  for (int32_t j = 0; j < kept; ++j) {
    const double before = prefix;
    prefix += e[j];
    *boundary_gap = std::min(*boundary_gap, std::fabs(prefix - budget) / total);
    if (mode == TopPMode::kNucleus) {
      out[idx[j]] = e[j];
      if (prefix >= budget) {
        for (double& x : out) x /= prefix;
        return out;
      }
    } else {
      out[idx[j]] = std::min(e[j], budget - before);
      if (prefix >= budget) {
        for (double& x : out) x /= budget;
        return out;
      }
    }
  }
  return out;
}

TEST(SamplingRef, MatchesBruteForceOnRandomRows) {
  std::mt19937 rng(1234);
  int compared = 0, ambiguous = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t v = 1 + static_cast<int32_t>(rng() % 300);
    const float scale = (trial % 3 == 0) ? 8.0f : 2.0f;
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> logits(v);
    for (float& x : logits) x = nd(rng);
    if (trial % 5 == 0) {  // many exact ties
      for (float& x : logits) x = std::round(x);
    }
    const float t = (trial % 4 == 0) ? 0.7f : 1.0f;
    const int32_t k = (trial % 3 == 0) ? 0 : 1 + static_cast<int32_t>(rng() % (v + 2));
    const float p =
        (trial % 2 == 0) ? 1.0f : 0.05f + 0.9f * static_cast<float>(rng() % 1000) / 1000;
    const TopPMode mode = (trial % 4 < 2) ? TopPMode::kNucleus : TopPMode::kTruncate;
    double gap = 0;
    const std::vector<double> want = brute_probs(logits, t, k, p, mode, &gap);
    if (gap < 1e-5) {  // budget within rounding of a prefix: either cut is right
      ++ambiguous;
      continue;
    }
    const std::vector<float> got = probs_of(logits, t, k, p, mode);
    for (int32_t i = 0; i < v; ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-6) << "trial " << trial << " index " << i;
      ASSERT_EQ(got[i] > 0, want[i] > 1e-11 || (want[i] > 0 && got[i] > 0))
          << "support differs, trial " << trial << " index " << i;
    }
    ++compared;
  }
  EXPECT_GT(compared, 380);
  EXPECT_LT(ambiguous, 20);
}

// The spec's definition run literally: all V ranks sorted, masses and prefixes over the whole
// top-k set (ref::rowProbs sorts only the prefix of the order it reads).
std::vector<float> full_sort_probs(const std::vector<float>& logits, float temperature,
                                   int32_t topK, float topP, TopPMode mode) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const sampling::RowParams rp = sampling::makeRowParams(temperature, topK, topP, vocab);
  std::vector<float> s(vocab), probs(vocab, 0.0f);
  bool poisoned = false;
  for (int32_t i = 0; i < vocab; ++i) {
    s[i] = sampling::scaleLogit(logits[i], rp.invT, rp.greedy);
    poisoned = poisoned || sampling::poisonsRow(s[i]);
  }
  std::vector<uint64_t> order(vocab);
  for (int32_t i = 0; i < vocab; ++i) order[i] = sampling::composite(sampling::orderKey(s[i]), i);
  std::sort(order.begin(), order.end(), std::greater<uint64_t>());
  const float rowMax = s[sampling::compositeIndex(order[0])];
  if (poisoned || rowMax == -__builtin_huge_valf()) {
    std::fill(probs.begin(), probs.end(), sampling::fdivRn(1.0f, static_cast<float>(vocab)));
    return probs;
  }
  const int32_t kept = rp.k;
  std::vector<uint64_t> mass(kept), prefix(kept);
  uint64_t running = 0;
  for (int32_t j = 0; j < kept; ++j) {
    mass[j] = sampling::massOf(
        sampling::expNonpos(sampling::fsubRn(s[sampling::compositeIndex(order[j])], rowMax)));
    prefix[j] = (running += mass[j]);
  }
  int32_t cut = kept;
  uint64_t norm = running, lastWeight = mass[kept - 1];
  if (rp.topPOn) {
    const uint64_t budget = sampling::topPBudget(rp.topP, running);
    cut = 0;
    while (prefix[cut] < budget) ++cut;
    ++cut;
    norm = mode == TopPMode::kNucleus ? prefix[cut - 1] : budget;
    lastWeight =
        mode == TopPMode::kNucleus ? mass[cut - 1] : budget - (cut >= 2 ? prefix[cut - 2] : 0);
  }
  for (int32_t j = 0; j < cut; ++j) {
    probs[sampling::compositeIndex(order[j])] =
        sampling::probOf(j == cut - 1 ? lastWeight : mass[j], norm);
  }
  return probs;
}

// ref::rowProbs selects and sorts only the prefix of the order it reads (growing it from 1,024
// ranks for top-p): bit for bit the full sort's probabilities, at vocabularies where the nucleus
// needs one, two or three rounds of growth, with ties, signed zeros and -inf entries.
TEST(SamplingRef, PrefixSelectionEqualsTheFullSort) {
  std::mt19937 rng(77);
  int rows = 0, wide_nuclei = 0;
  for (int32_t v : {1, 2, 1023, 1025, 5000, 49152, 151936}) {
    for (int trial = 0; trial < (v > 50000 ? 8 : 32); ++trial) {
      // Small scales make flat rows whose nucleus spans thousands of entries.
      const float scale = std::array<float, 4>{0.05f, 0.5f, 3.0f, 12.0f}[trial % 4];
      std::normal_distribution<float> nd(0.0f, scale);
      std::vector<float> logits(v);
      for (float& x : logits) x = nd(rng);
      if (trial % 6 == 1)
        for (float& x : logits) x = std::round(x * 4.0f) / 4.0f;  // many ties
      if (trial % 6 == 2)
        for (int32_t i = 0; i < v; i += 7) logits[i] = (i % 2) ? 0.0f : -0.0f;
      if (trial % 6 == 3)
        for (int32_t i = 0; i < v; i += 3) logits[i] = -INFINITY;
      const float t = std::array<float, 4>{0.0f, 0.6f, 1.0f, 1.0f}[rng() % 4];  // 0: greedy
      const int32_t k = std::array<int32_t, 6>{0, 1, 50, 2000, v, 0}[rng() % 6];
      const float p = std::array<float, 4>{1.0f, 0.9f, 0.99f, 0.3f}[rng() % 4];
      const TopPMode mode = (rng() % 2) ? TopPMode::kTruncate : TopPMode::kNucleus;
      const std::vector<float> want = full_sort_probs(logits, t, k, p, mode);
      const std::vector<float> got = probs_of(logits, t, k, p, mode);
      int32_t support = 0;
      for (int32_t i = 0; i < v; ++i) {
        ASSERT_EQ(sampling::f2u(got[i]), sampling::f2u(want[i]))
            << "V " << v << " trial " << trial << " index " << i << " got " << got[i] << " want "
            << want[i];
        support += want[i] > 0.0f;
      }
      wide_nuclei += (p < 1.0f && support > 1024);
      ++rows;
    }
  }
  EXPECT_EQ(rows, 6 * 32 + 8);
  EXPECT_GE(wide_nuclei, 10);  // the growth rounds ran
}

std::vector<int64_t> draw_counts(const std::vector<float>& probs, int64_t n, uint64_t seed) {
  std::vector<int64_t> counts(probs.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const float u = request_uniform(seed, i, RngPurpose::kTarget, 0);
    const int32_t t = ref::sampleFromProbs(probs.data(), static_cast<int32_t>(probs.size()), u);
    ++counts.at(t);
  }
  return counts;
}

TEST(SamplingRef, ChiSquareFrequenciesMatchProbabilities) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> logits(16);
  for (float& x : logits) x = nd(rng);
  const std::vector<float> p = probs_of(logits, 1.0f, 0, 1.0f);
  const int64_t n = 200000;
  const std::vector<int64_t> counts = draw_counts(p, n, 0x5eedull);
  std::vector<double> pd(p.begin(), p.end());
  int dof = 0;
  const double chi = chi_square(counts, pd, n, &dof);
  EXPECT_EQ(dof, 15);
  EXPECT_LT(chi, chi_square_limit(dof)) << "chi-square " << chi;
  // Power check: the same counts against a slightly perturbed distribution must fail.
  std::vector<double> shifted = pd;
  shifted[0] += 0.01;
  shifted[1] -= 0.01;
  EXPECT_GT(chi_square(counts, shifted, n, &dof), chi_square_limit(dof));
}

TEST(SamplingRef, FilteredTokensAreNeverSampled) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> logits(16);
  for (float& x : logits) x = nd(rng);
  logits[9] = -__builtin_huge_valf();  // zero probability even without filtering
  for (TopPMode mode : {TopPMode::kNucleus, TopPMode::kTruncate}) {
    const std::vector<float> p = probs_of(logits, 0.8f, 6, 0.7f, mode);
    int kept = 0;
    for (float x : p) kept += x > 0;
    EXPECT_GE(kept, 2);
    EXPECT_LE(kept, 6);
    const int64_t n = 200000;
    const std::vector<int64_t> counts = draw_counts(p, n, 0xabcdefull + static_cast<int>(mode));
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0.0f) {
        EXPECT_EQ(counts[i], 0) << "filtered token " << i << " sampled";
      }
    }
    int dof = 0;
    const double chi = chi_square(counts, std::vector<double>(p.begin(), p.end()), n, &dof);
    EXPECT_LT(chi, chi_square_limit(dof)) << "mode " << static_cast<int>(mode);
  }
}

TEST(SamplingRef, SampleRowsUsesRequestUniformsAndPerRowParams) {
  const int32_t v = 32, b = 3;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(v * b);
  for (float& x : logits) x = nd(rng);
  std::vector<uint64_t> seeds = {1, 2, 3};
  std::vector<int64_t> positions = {10, 20, (int64_t{1} << 33)};
  std::vector<float> temps = {0.0f, 1.0f, 0.5f};
  std::vector<int32_t> ks = {0, 5, 0};
  std::vector<float> ps = {1.0f, 0.9f, 0.5f};
  std::vector<int32_t> tokens(b, -9);
  std::vector<float> probs(v * b, -9.0f);
  SamplingParams p;
  p.logits = logits.data();
  p.batch = b;
  p.vocab = v;
  p.temperatures = temps.data();
  p.topKs = ks.data();
  p.topPs = ps.data();
  p.seeds = seeds.data();
  p.positions = positions.data();
  p.tokens = tokens.data();
  p.probs = probs.data();
  ref::sampleRows(p);
  for (int32_t r = 0; r < b; ++r) {
    const std::vector<float> row(logits.begin() + r * v, logits.begin() + (r + 1) * v);
    const std::vector<float> want = probs_of(row, temps[r], ks[r], ps[r]);
    for (int32_t i = 0; i < v; ++i) EXPECT_EQ(probs[r * v + i], want[i]);
    const float u = request_uniform(seeds[r], positions[r], RngPurpose::kTarget, 0);
    EXPECT_EQ(tokens[r], ref::sampleFromProbs(want.data(), v, u));
  }
  // Greedy row returns the argmax.
  EXPECT_EQ(tokens[0], std::max_element(logits.begin(), logits.begin() + v) - logits.begin());
}

// Draft proposals: rowsPerRequest rows share one request's parameters and (seed, position),
// and row r draws request_uniform(seed, position, purpose, r % rowsPerRequest).
TEST(SamplingRef, RowsPerRequestShareParametersAndTakeLaneUniforms) {
  const int32_t v = 32, requests = 2, rows = 4, b = requests * rows;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(v * b);
  for (float& x : logits) x = nd(rng);
  std::vector<uint64_t> seeds = {41, 42};
  std::vector<int64_t> positions = {100, 7};
  std::vector<float> temps = {1.0f, 0.7f};
  std::vector<int32_t> ks = {6, 0};
  std::vector<float> ps = {1.0f, 0.8f};
  std::vector<int32_t> tokens(b, -9);
  std::vector<float> probs(v * b, -9.0f);
  SamplingParams p;
  p.logits = logits.data();
  p.batch = b;
  p.vocab = v;
  p.rowsPerRequest = rows;
  p.temperatures = temps.data();
  p.topKs = ks.data();
  p.topPs = ps.data();
  p.seeds = seeds.data();
  p.positions = positions.data();
  p.purpose = RngPurpose::kProposal;
  p.tokens = tokens.data();
  p.probs = probs.data();
  ref::sampleRows(p);
  for (int32_t r = 0; r < b; ++r) {
    const int32_t q = r / rows;
    const std::vector<float> row(logits.begin() + r * v, logits.begin() + (r + 1) * v);
    const std::vector<float> want = probs_of(row, temps[q], ks[q], ps[q]);
    for (int32_t i = 0; i < v; ++i) EXPECT_EQ(probs[r * v + i], want[i]) << "row " << r;
    const float u = request_uniform(seeds[q], positions[q], RngPurpose::kProposal,
                                    static_cast<uint32_t>(r % rows));
    EXPECT_EQ(tokens[r], ref::sampleFromProbs(want.data(), v, u)) << "row " << r;
  }
  p.batch = b - 1;  // not a whole number of requests
  EXPECT_THROW(ref::sampleRows(p), InvalidArgument);
  p.batch = b;
  p.rowsPerRequest = 0;
  EXPECT_THROW(ref::sampleRows(p), InvalidArgument);
}

}  // namespace
}  // namespace es
