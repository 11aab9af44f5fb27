// flagNonFinite of the CPU references of argmax, sampleRows and specVerify
// (kernels/sampling_non_finite.h): a row with NaN or +inf, or only -inf, gives kNonFiniteToken;
// every other row gives what it gives without the flag; specVerify's chain stops at such a row.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/argmax.h"
#include "kernels/sampling.h"
#include "kernels/spec_verify.h"
#include "support/non_finite_rows.h"

namespace es {
namespace {

constexpr int32_t kRows = 48;

template <typename T>
std::vector<int32_t> argmaxOf(const std::vector<T>& x, DType dtype, int32_t vocab, bool flag) {
  std::vector<int32_t> out(kRows, -7);
  ref::argmaxRows({.logits = x.data(),
                   .dtype = dtype,
                   .rows = kRows,
                   .vocab = vocab,
                   .out = out.data(),
                   .flagNonFinite = flag});
  return out;
}

template <typename T>
void checkArgmax(const std::vector<T>& x, DType dtype, int32_t vocab) {
  SCOPED_TRACE(dtype_name(dtype));
  const std::vector<int32_t> off = argmaxOf(x, dtype, vocab, false);
  const std::vector<int32_t> on = argmaxOf(x, dtype, vocab, true);
  for (int32_t r = 0; r < kRows; ++r) {
    EXPECT_GE(off[r], 0) << "row " << r << ": without the flag every row has an index";
    EXPECT_EQ(on[r], test::rowIsNonFinite(r) ? kNonFiniteToken : off[r]) << "row " << r;
  }
}

TEST(NonFiniteRowsRef, ArgmaxFlagsRowsWithNaNOrPlusInfOrOnlyMinusInf) {
  for (int32_t vocab : {5, 384, 4099}) {
    const std::vector<float> x = test::nonFiniteRows(kRows, vocab, 1u + vocab);
    std::vector<fp16> h;
    std::vector<bf16> b;
    for (float v : x) {
      h.push_back(to_fp16(v));
      b.push_back(to_bf16(v));
    }
    checkArgmax(x, DType::kF32, vocab);
    checkArgmax(h, DType::kF16, vocab);
    checkArgmax(b, DType::kBF16, vocab);
  }
}

struct Sampled {
  std::vector<int32_t> tokens;
  std::vector<float> probs;
};

Sampled sample(const std::vector<float>& x, int32_t vocab, float t, int32_t k, float p, bool flag) {
  Sampled s{std::vector<int32_t>(kRows, -7), std::vector<float>(x.size(), -7.0f)};
  std::vector<float> u(kRows);
  for (int32_t r = 0; r < kRows; ++r) u[r] = request_uniform(5, r, RngPurpose::kTarget, 0);
  ref::sampleRows({.logits = x.data(),
                   .batch = kRows,
                   .vocab = vocab,
                   .temperature = t,
                   .topK = k,
                   .topP = p,
                   .uniforms = u.data(),
                   .tokens = s.tokens.data(),
                   .probs = s.probs.data(),
                   .flagNonFinite = flag});
  return s;
}

TEST(NonFiniteRowsRef, SampleRowsFlagsTheUniformFallbackRows) {
  struct Filter {
    float t;
    int32_t k;
    float p;
  };
  for (int32_t vocab : {5, 384, 5000}) {
    const std::vector<float> x = test::nonFiniteRows(kRows, vocab, 7u + vocab);
    for (const Filter f : {Filter{0.0f, 0, 1.0f}, Filter{1.0f, 0, 1.0f}, Filter{0.7f, 20, 0.9f}}) {
      SCOPED_TRACE(testing::Message() << "V " << vocab << " T " << f.t << " k " << f.k);
      const Sampled off = sample(x, vocab, f.t, f.k, f.p, false);
      const Sampled on = sample(x, vocab, f.t, f.k, f.p, true);
      EXPECT_EQ(on.probs, off.probs) << "the probabilities do not depend on the flag";
      for (int32_t r = 0; r < kRows; ++r) {
        EXPECT_GE(off.tokens[r], 0) << "row " << r;
        EXPECT_EQ(on.tokens[r], test::rowIsNonFinite(r) ? kNonFiniteToken : off.tokens[r])
            << "row " << r;
      }
    }
  }
}

// A finite logit that the temperature scales past the largest float is +inf too: flagged at
// T = 0.5, not at T = 2.
TEST(NonFiniteRowsRef, SampleRowsFlagsOverflowByTheTemperature) {
  std::vector<float> x(kRows * 8, 1.0f);
  x[3] = 3e38f;
  for (float t : {0.5f, 2.0f}) {
    const Sampled s = sample(x, 8, t, 0, 1.0f, true);
    EXPECT_EQ(s.tokens[0] == kNonFiniteToken, t == 0.5f) << "T " << t;
    EXPECT_GE(s.tokens[1], 0);
  }
}

// Outputs of one verification: [batch, L + 1] tokens and [batch] accepted counts.
struct Verified {
  std::vector<int32_t> out, accepted;
};

Verified verify(const std::vector<float>& logits, const std::vector<int32_t>& drafts, int32_t batch,
                int32_t L, int32_t vocab, bool flag) {
  Verified v{std::vector<int32_t>(static_cast<size_t>(batch) * (L + 1), -7),
             std::vector<int32_t>(batch, -7)};
  std::vector<uint64_t> seeds(batch);
  std::vector<int64_t> anchors(batch);
  for (int32_t b = 0; b < batch; ++b) {
    seeds[b] = 100 + b;
    anchors[b] = 40 + b;
  }
  ref::specVerify({.targetLogits = logits.data(),
                   .draftTokens = drafts.data(),
                   .batch = batch,
                   .numDraft = L,
                   .vocab = vocab,
                   .temperature = 1.0f,
                   .seeds = seeds.data(),
                   .anchors = anchors.data(),
                   .outTokens = v.out.data(),
                   .numAccepted = v.accepted.data(),
                   .flagNonFinite = flag});
  return v;
}

// Sequence b's rows are finite but for row bad(b) = b % (L + 2) (none when that is L + 1), a
// non-finite row of every kind in turn; drafts are the finite rows' peaks (mostly accepted).
// With the flag a chain that reaches the bad row stops there with kNonFiniteToken, keeping the
// drafts accepted before it; a chain that stops before it is unchanged.
TEST(NonFiniteRowsRef, SpecVerifyStopsTheChainAtANonFiniteRow) {
  constexpr int32_t kBatch = 40, L = 3;
  for (int32_t vocab : {64, 3000}) {
    SCOPED_TRACE(testing::Message() << "V " << vocab);
    const int32_t rows = kBatch * (L + 1);
    const std::vector<float> finite = test::nonFiniteRows(rows * 8, vocab, 3u + vocab);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    std::vector<int32_t> drafts(static_cast<size_t>(kBatch) * L);
    std::vector<int32_t> badRow(kBatch);
    int32_t nextBad = 1;  // the next non-finite source row (kinds cycle through all of them)
    for (int32_t b = 0; b < kBatch; ++b) {
      badRow[b] = b % (L + 2);
      for (int32_t s = 0; s <= L; ++s) {
        int32_t src = 8 * (b * (L + 1) + s);  // a finite row (kind 0)
        if (s == badRow[b]) {
          while (!test::rowIsNonFinite(nextBad)) ++nextBad;
          src = nextBad++;
        }
        const float* from = finite.data() + static_cast<size_t>(src) * vocab;
        std::copy(from, from + vocab,
                  logits.begin() + (static_cast<size_t>(b) * (L + 1) + s) * vocab);
        if (s < L) {
          drafts[static_cast<size_t>(b) * L + s] =
              static_cast<int32_t>(std::max_element(from, from + vocab) - from);
        }
      }
    }
    const Verified off = verify(logits, drafts, kBatch, L, vocab, false);
    const Verified on = verify(logits, drafts, kBatch, L, vocab, true);
    int32_t reached = 0;
    for (int32_t b = 0; b < kBatch; ++b) {
      const int32_t s = badRow[b];
      const int32_t* o = off.out.data() + static_cast<size_t>(b) * (L + 1);
      const int32_t* n = on.out.data() + static_cast<size_t>(b) * (L + 1);
      if (s > L || off.accepted[b] < s) {  // no bad row, or the chain stops before it
        EXPECT_EQ(on.accepted[b], off.accepted[b]) << "seq " << b;
        EXPECT_EQ(std::vector<int32_t>(n, n + L + 1), std::vector<int32_t>(o, o + L + 1))
            << "seq " << b;
        continue;
      }
      ++reached;
      EXPECT_EQ(on.accepted[b], s) << "seq " << b;
      for (int32_t j = 0; j < s; ++j) EXPECT_EQ(n[j], o[j]) << "seq " << b << " token " << j;
      EXPECT_EQ(n[s], kNonFiniteToken) << "seq " << b;
      for (int32_t j = s + 1; j <= L; ++j) EXPECT_EQ(n[j], -1) << "seq " << b << " token " << j;
    }
    EXPECT_GE(reached, kBatch / 2) << "most chains must reach their bad row for the test to count";
  }
}

}  // namespace
}  // namespace es
