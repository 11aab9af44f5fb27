// flagNonFinite of the GPU argmax, sampling and chain-verification kernels against the CPU
// references (kernels/sampling_non_finite.h): rows with NaN (either sign) or +inf at random
// indices, only -inf, mixtures, and legal rows with -inf entries, through every launch shape
// (argmax: cluster-split and one CTA per row; sampling: small-vocab, chunk candidates, full row;
// verification: list and dense rows). The flagged rows must be exactly the non-finite ones, with
// kNonFiniteToken; the other rows give the reference's tokens (full-row sampling: up to the
// documented CDF-boundary tolerance).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/argmax.h"
#include "kernels/sampling.h"
#include "kernels/spec_verify.h"
#include "support/gpu_test_util.h"
#include "support/non_finite_rows.h"

namespace es {
namespace {

template <typename T>
std::vector<T> as(const std::vector<float>& x) {
  std::vector<T> y;
  y.reserve(x.size());
  for (float v : x) {
    if constexpr (std::is_same_v<T, float>)
      y.push_back(v);
    else if constexpr (std::is_same_v<T, fp16>)
      y.push_back(to_fp16(v));
    else
      y.push_back(to_bf16(v));
  }
  return y;
}

// Rows [first, first + rows) of x, kernel against reference, flag on.
template <typename T>
void checkArgmax(const std::vector<T>& x, int32_t first, int32_t rows, int32_t vocab) {
  SCOPED_TRACE(testing::Message() << "argmax " << dtype_name(dtype_of<T>) << " V " << vocab
                                  << " rows [" << first << ", " << first + rows << ")");
  const std::vector<T> part(x.begin() + static_cast<size_t>(first) * vocab,
                            x.begin() + static_cast<size_t>(first + rows) * vocab);
  std::vector<int32_t> want(rows, -7);
  ArgmaxParams p{.logits = part.data(),
                 .dtype = dtype_of<T>,
                 .rows = rows,
                 .vocab = vocab,
                 .out = want.data(),
                 .flagNonFinite = true};
  ref::argmaxRows(p);
  test::DeviceArray<T> d_x(part);
  test::DeviceArray<int32_t> d_out(rows);  // poisoned
  p.logits = d_x.get();
  p.out = d_out.get();
  kernel::argmaxRows(p, nullptr);
  const std::vector<int32_t> got = d_out.download();
  for (int32_t r = 0; r < rows; ++r) {
    EXPECT_EQ(want[r] == kNonFiniteToken, test::rowIsNonFinite(first + r)) << "row " << first + r;
    EXPECT_EQ(got[r], want[r]) << "row " << first + r;
  }
}

template <typename T>
void argmaxAllShapes(int32_t vocab) {
  const int32_t rows = 64;
  const std::vector<T> x = as<T>(test::nonFiniteRows(rows, vocab, 11u + vocab));
  checkArgmax(x, 0, rows, vocab);  // one CTA per row
  checkArgmax(x, 0, 16, vocab);    // cluster-split rows for a long vocabulary
  for (int32_t r = 0; r < test::kNonFiniteRowKinds; ++r) checkArgmax(x, r, 1, vocab);
}

TEST(NonFiniteRowsGpu, Argmax) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t vocab : {151936, 4099, 5}) {
    argmaxAllShapes<float>(vocab);
    argmaxAllShapes<fp16>(vocab);
    argmaxAllShapes<bf16>(vocab);
  }
}

struct SampleCase {
  int32_t vocab, batch;
  float temperature;
  int32_t topK;
  float topP;
  SamplingPath path;
  bool fullRow;  // the GPU sums the CDF over the whole row: boundary differences allowed
};

void checkSampling(const SampleCase& c) {
  SCOPED_TRACE(testing::Message() << "sampleRows V " << c.vocab << " B " << c.batch << " T "
                                  << c.temperature << " k " << c.topK << " p " << c.topP << " path "
                                  << static_cast<int>(c.path));
  const std::vector<float> x = test::nonFiniteRows(c.batch, c.vocab, 23u + c.vocab + c.batch);
  std::vector<float> u(c.batch);
  for (int32_t r = 0; r < c.batch; ++r) u[r] = request_uniform(9, r, RngPurpose::kTarget, 0);
  std::vector<int32_t> want(c.batch, -7);
  SamplingParams p{.logits = x.data(),
                   .batch = c.batch,
                   .vocab = c.vocab,
                   .temperature = c.temperature,
                   .topK = c.topK,
                   .topP = c.topP,
                   .uniforms = u.data(),
                   .tokens = want.data(),
                   .flagNonFinite = true,
                   .path = c.path};
  ref::sampleRows(p);
  test::DeviceArray<float> d_x(x), d_u(u);
  test::DeviceArray<int32_t> d_tokens(c.batch);  // poisoned
  p.logits = d_x.get();
  p.uniforms = d_u.get();
  p.tokens = d_tokens.get();
  const size_t ws = samplingWorkspaceBytes(p);
  test::DeviceArray<uint8_t> d_ws(ws);
  p.workspace = ws ? d_ws.get() : nullptr;
  p.workspaceBytes = ws;
  kernel::sampleRows(p, nullptr);
  ES_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> got = d_tokens.download();
  int32_t differing = 0;
  for (int32_t r = 0; r < c.batch; ++r) {
    const bool bad = test::rowIsNonFinite(r);
    EXPECT_EQ(want[r] == kNonFiniteToken, bad) << "reference, row " << r;
    EXPECT_EQ(got[r] == kNonFiniteToken, bad) << "kernel, row " << r;
    if (bad) continue;
    ASSERT_GE(got[r], 0) << "row " << r;
    ASSERT_LT(got[r], c.vocab) << "row " << r;
    differing += got[r] != want[r];
  }
  EXPECT_LE(differing, c.fullRow ? std::max(1, c.batch / 16) : 0);
}

TEST(NonFiniteRowsGpu, SampleRowsEveryPath) {
  ES_SKIP_IF_NO_GPU();
  constexpr SamplingPath kAuto = SamplingPath::kAuto, kSmall = SamplingPath::kSmallVocab,
                         kGeneral = SamplingPath::kGeneral;
  // Full rows of a long vocabulary: for batch <= 64 split over a cluster with the split CDF
  // drawing the token, for 80 one CTA per row.
  for (int32_t batch : {8, 80}) {
    checkSampling({2048, batch, 1.0f, 50, 0.9f, kSmall, false});
    checkSampling({2048, batch, 1.0f, 0, 1.0f, kSmall, true});
    checkSampling({2048, batch, 1.0f, 50, 0.9f, kGeneral, false});
    checkSampling({2048, batch, 0.0f, 0, 1.0f, kGeneral, false});  // greedy rows
    checkSampling({151936, batch, 0.8f, 50, 0.9f, kAuto, false});  // chunk candidates
    checkSampling({151936, batch, 1.0f, 0, 0.9f, kAuto, true});    // full row, top-p
    checkSampling({151936, batch, 1.0f, 0, 1.0f, kAuto, true});    // full row
    checkSampling({151936, batch, 0.0f, 0, 1.0f, kAuto, false});   // greedy rows
  }
}

struct VerifyCase {
  int32_t vocab, topK;
  bool withQ;
};

// Sequence b's target rows are finite but for row b % (L + 2) (none when that is L + 1), a
// non-finite row of each kind in turn; drafts are the finite rows' peaks. Kernel against
// reference, flag on: accepted counts and accepted tokens exactly, kNonFiniteToken exactly where
// the reference has it; the residual / bonus token exactly on list rows (top-k <= 512).
void checkVerify(const VerifyCase& c) {
  SCOPED_TRACE(testing::Message() << "specVerify V " << c.vocab << " k " << c.topK << " q "
                                  << c.withQ);
  constexpr int32_t kBatch = 40, L = 3;
  const int32_t V = c.vocab, rows = kBatch * (L + 1);
  const std::vector<float> source = test::nonFiniteRows(rows * 8, V, 5u + V);
  std::vector<float> logits(static_cast<size_t>(rows) * V), q;
  std::vector<int32_t> drafts(static_cast<size_t>(kBatch) * L);
  int32_t nextBad = 1;
  for (int32_t b = 0; b < kBatch; ++b) {
    for (int32_t s = 0; s <= L; ++s) {
      int32_t src = 8 * (b * (L + 1) + s);  // kind 0: finite
      if (s == b % (L + 2)) {
        while (!test::rowIsNonFinite(nextBad)) ++nextBad;
        src = nextBad++;
      }
      const float* from = source.data() + static_cast<size_t>(src) * V;
      std::copy(from, from + V, logits.begin() + (static_cast<size_t>(b) * (L + 1) + s) * V);
      if (s < L) {
        const float* peakRow = source.data() + static_cast<size_t>(8 * (b * (L + 1) + s)) * V;
        drafts[static_cast<size_t>(b) * L + s] =
            static_cast<int32_t>(std::max_element(peakRow, peakRow + V) - peakRow);
      }
    }
  }
  if (c.withQ) {  // q(x) = 0.5, the rest spread evenly
    q.assign(static_cast<size_t>(kBatch) * L * V, 0.5f / static_cast<float>(V - 1));
    for (size_t r = 0; r < drafts.size(); ++r) q[r * V + drafts[r]] = 0.5f;
  }
  std::vector<uint64_t> seeds(kBatch);
  std::vector<int64_t> anchors(kBatch);
  for (int32_t b = 0; b < kBatch; ++b) {
    seeds[b] = 300 + b;
    anchors[b] = 20 + b;
  }
  std::vector<int32_t> wantOut(static_cast<size_t>(rows), -7), wantAcc(kBatch, -7);
  SpecVerifyParams p{.targetLogits = logits.data(),
                     .draftTokens = drafts.data(),
                     .draftProbs = c.withQ ? q.data() : nullptr,
                     .batch = kBatch,
                     .numDraft = L,
                     .vocab = V,
                     .temperature = 1.0f,
                     .topK = c.topK,
                     .seeds = seeds.data(),
                     .anchors = anchors.data(),
                     .outTokens = wantOut.data(),
                     .numAccepted = wantAcc.data(),
                     .flagNonFinite = true};
  ref::specVerify(p);
  test::DeviceArray<float> d_logits(logits), d_q(q);
  test::DeviceArray<int32_t> d_drafts(drafts), d_out(rows), d_acc(kBatch);  // outputs poisoned
  test::DeviceArray<uint64_t> d_seeds(seeds);
  test::DeviceArray<int64_t> d_anchors(anchors);
  p.targetLogits = d_logits.get();
  p.draftTokens = d_drafts.get();
  p.draftProbs = c.withQ ? d_q.get() : nullptr;
  p.seeds = d_seeds.get();
  p.anchors = d_anchors.get();
  p.outTokens = d_out.get();
  p.numAccepted = d_acc.get();
  const size_t ws = specVerifyWorkspaceBytes(p);
  test::DeviceArray<uint8_t> d_ws(ws);
  p.workspace = d_ws.get();
  p.workspaceBytes = ws;
  kernel::specVerify(p, nullptr);
  ES_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> gotOut = d_out.download(), gotAcc = d_acc.download();
  EXPECT_EQ(gotAcc, wantAcc);
  int32_t flagged = 0, differing = 0;
  for (int32_t b = 0; b < kBatch; ++b) {
    for (int32_t j = 0; j <= L; ++j) {
      const size_t i = static_cast<size_t>(b) * (L + 1) + j;
      if (j != wantAcc[b] || wantOut[i] == kNonFiniteToken) {
        EXPECT_EQ(gotOut[i], wantOut[i]) << "seq " << b << " token " << j;
        flagged += j == wantAcc[b];
      } else {
        EXPECT_GE(gotOut[i], 0) << "seq " << b;
        EXPECT_LT(gotOut[i], V) << "seq " << b;
        differing += gotOut[i] != wantOut[i];
      }
    }
  }
  EXPECT_GE(flagged, kBatch / 2) << "most chains must reach their non-finite row";
  EXPECT_LE(differing, c.topK > 0 && c.topK <= kMaxCandidateTopK ? 0 : std::max(1, kBatch / 16));
}

TEST(NonFiniteRowsGpu, SpecVerifyStopsAtNonFiniteRows) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t vocab : {2048, 151936}) {
    for (int32_t topK : {50, 0}) {
      checkVerify({vocab, topK, false});
      checkVerify({vocab, topK, true});
    }
  }
}

}  // namespace
}  // namespace es
