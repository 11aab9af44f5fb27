// The general path's candidate mode: its chunk and final stages (chunkFastKernel +
// finalFastKernel in kernels/sampling.cu). Checked against the CPU reference bit for bit
// (probabilities by memcmp, tokens exactly), and the chunk stage's own output in the workspace
// (the records: each run of chunks' top-k composites, every chunk's poison flag) against a host
// brute force, for vocabularies
// 151936 / 128256 / odd sizes (misaligned rows: scalar loads), batch 1, 16, 256, k 1 / 50 / 512,
// f32 and f16, with tie rows, constant rows (every chunk takes the > 512-survivor fallback),
// -inf rows and NaN / +inf rows (uniform fallback).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"
#include "support/gpu_test_util.h"
#include "support/sampling_gpu_run.h"

namespace es {
namespace {

using sampling::composite;
using sampling::orderKey;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct CfCase {
  int32_t vocab;
  int32_t batch;
  DType dtype;
  float temperature;
  int32_t topK;
  float topP = 1.0f;
  TopPMode mode = TopPMode::kNucleus;
};

std::string describe(const CfCase& c, uint32_t seed) {
  return "V=" + std::to_string(c.vocab) + " B=" + std::to_string(c.batch) + " " +
         std::string(dtype_name(c.dtype)) + " T=" + std::to_string(c.temperature) +
         " k=" + std::to_string(c.topK) + " p=" + std::to_string(c.topP) +
         (c.mode == TopPMode::kTruncate ? " truncate" : " nucleus") +
         " seed=" + std::to_string(seed);
}

// Row b by b % 10: 0 N(0, 3); 1 a 0.5 grid (ties); 2 constant (one tie group); 3 a peak over
// N(0, 1); 4 half -inf (a masked vocabulary); 5 every entry -inf (uniform); 6 one NaN (uniform);
// 7 one +inf, or for f32 a finite value that overflows when scaled by 1/T < 1 (uniform);
// 8 signed zeros with a few small positives (ties at 0 across the chunk); 9 N(0, 3) again.
std::vector<float> make_logits(const CfCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int> coin(0, 1);
  std::vector<float> x(static_cast<size_t>(c.batch) * c.vocab);
  for (int32_t b = 0; b < c.batch; ++b) {
    float* row = x.data() + static_cast<size_t>(b) * c.vocab;
    const int shape = b % 10;
    for (int32_t i = 0; i < c.vocab; ++i) {
      float v = nd(rng);
      switch (shape) {
        case 1:
          v = std::round(v * 2.0f) * 0.5f;
          break;
        case 2:
          v = 0.25f;
          break;
        case 3:
          v = v / 3.0f;
          break;
        case 4:
          v = coin(rng) ? -kInf : v;
          break;
        case 5:
          v = -kInf;
          break;
        case 8:
          v = coin(rng) ? 0.0f : -0.0f;
          break;
        default:
          break;
      }
      row[i] = v;
    }
    const int32_t at = static_cast<int32_t>((seed * 7919u + 104729u * static_cast<uint32_t>(b)) %
                                            static_cast<uint32_t>(c.vocab));
    if (shape == 3) row[at] = 12.0f;
    if (shape == 6) row[at] = std::numeric_limits<float>::quiet_NaN();
    if (shape == 7) {
      const bool overflow = c.dtype == DType::kF32 && c.temperature > 0.0f && c.temperature < 1.0f;
      row[at] = overflow ? 3.3e38f : kInf;  // 3.3e38 / 0.95 > FLT_MAX
    }
    if (shape == 8) {
      for (int j = 0; j < 5; ++j)
        row[(at + 977 * j) % c.vocab] = 0.001f * static_cast<float>(j % 3);
    }
  }
  if (c.dtype == DType::kF16) {
    for (auto& v : x) v = to_float(to_fp16(v));
  }
  return x;
}

SamplingParams params_of(const CfCase& c) {
  return test::sampling_params(c.batch, c.vocab, c.dtype, c.temperature, c.topK, c.topP, c.mode,
                               SamplingPath::kGeneral);
}

// The GPU run keeps the chunk stage's records: the workspace as poisoned 64-bit words, read back.
constexpr test::GpuSampleOptions kWithRecords{.probs = true, .download_workspace = true};

// The chunk stage's records (kernels/sampling_layout.h): every chunk's header carries its own
// poison flag (some scaled logit NaN / +inf); in a row without poison, the records (headers with
// a count) cover the row's chunks in contiguous runs, each run exactly once and in order, and each
// record is exactly the top-min(k, entries) composites of its run, descending. How the runs fall
// depends on the grid (the device's resident CTAs), so any tiling passes.
// row_k[b]: row b's effective top-k (rows above the plan's kcap have no records).
void check_records(const SamplingParams& p, const std::vector<float>& x,
                   const std::vector<float>& temps, const std::vector<int32_t>& row_k,
                   const std::vector<uint64_t>& ws, const std::string& what) {
  const sampling::GeneralPlan plan = sampling::planGeneral(p);
  ASSERT_TRUE(plan.anyCandidate) << what;
  const size_t cap = static_cast<size_t>(sampling::recordCap(plan));
  const uint64_t* headers = ws.data() + sampling::recordHeadersOffset(plan, p.batch);
  // A chunk stage whose CTAs walk whole rows finalizes them itself and writes no record
  // (RowsArgs::chunkFinalizesRows): every header keeps the poison. Its outputs were compared
  // already.
  uint64_t poison_word;
  std::memset(&poison_word, test::kPoisonByte, sizeof(poison_word));
  const size_t n_headers = static_cast<size_t>(p.batch) * plan.chunks;
  const auto unwritten = [&](uint64_t h) { return h == poison_word; };
  if (std::all_of(headers, headers + n_headers, unwritten)) return;
  int wrong = 0, checked = 0;
  auto fail = [&](int32_t b, const std::string& why) {
    if (wrong++ < 5) ADD_FAILURE() << what << " row " << b << ": " << why;
  };
  for (int32_t b = 0; b < p.batch; ++b) {
    if (row_k[b] > plan.kcap) continue;
    ++checked;
    const sampling::RowParams rp = sampling::makeRowParams(temps[b], row_k[b], 1.0f, p.vocab);
    std::vector<uint64_t> comp(p.vocab);
    bool row_poisoned = false;
    for (int32_t c = 0; c < plan.chunks; ++c) {
      const int32_t start = c * plan.chunkLen;
      const int32_t len = std::min(plan.chunkLen, p.vocab - start);
      bool poisoned = false;
      for (int32_t i = start; i < start + len; ++i) {
        const float s =
            sampling::scaleLogit(x[static_cast<size_t>(b) * p.vocab + i], rp.invT, rp.greedy);
        poisoned = poisoned || sampling::poisonsRow(s);
        comp[i] = composite(orderKey(s), static_cast<uint32_t>(i));
      }
      const uint64_t h = headers[static_cast<size_t>(b) * plan.chunks + c];
      if (sampling::headerPoisoned(h) != poisoned)
        fail(b, "chunk " + std::to_string(c) + ": poison flag wrong");
      row_poisoned = row_poisoned || poisoned;
    }
    if (row_poisoned) continue;  // finalFastKernel reads no candidates of a poisoned row
    int32_t next_first = 0;
    for (int32_t c = 0; c < plan.chunks; ++c) {
      const uint64_t h = headers[static_cast<size_t>(b) * plan.chunks + c];
      const int32_t n = sampling::headerCount(h), first = sampling::headerFirstChunk(h);
      if (n == 0) continue;
      if (first != next_first) {
        fail(b, "record at chunk " + std::to_string(c) + " starts at chunk " +
                    std::to_string(first) + ", expected " + std::to_string(next_first));
        break;
      }
      const int32_t lo = first * plan.chunkLen, hi = std::min(p.vocab, (c + 1) * plan.chunkLen);
      std::vector<uint64_t> run(comp.begin() + lo, comp.begin() + hi);
      const int32_t kk = std::min<int32_t>(rp.k, hi - lo);
      std::partial_sort(run.begin(), run.begin() + kk, run.end(), std::greater<>());
      bool ok = n == kk;
      const uint64_t* rec = ws.data() + (static_cast<size_t>(b) * plan.chunks + first) * cap;
      for (int32_t j = 0; j < kk && ok; ++j) ok = rec[j] == run[j];
      if (!ok) {
        fail(b, "record of chunks " + std::to_string(first) + ".." + std::to_string(c) +
                    " (count " + std::to_string(n) + ", expected " + std::to_string(kk) +
                    ") is not their top-k");
      }
      next_first = c + 1;
    }
    if (next_first != plan.chunks)
      fail(b, "records cover chunks [0, " + std::to_string(next_first) + ") only");
  }
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " wrong of " << checked << " rows";
}

void check(const CfCase& c, uint32_t seed) {
  const SamplingParams p = params_of(c);
  const std::string what = describe(c, seed);
  const sampling::GeneralPlan plan = sampling::planGeneral(p);
  ASSERT_TRUE(plan.anyCandidate && !plan.anyFull) << "not the candidate mode: " << what;
  const auto x = make_logits(c, seed);
  std::mt19937 rng(seed ^ 0x5bd1e995u);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> u(c.batch);
  for (auto& v : u) v = uni(rng);
  const test::SampleOutputs want = test::run_sample_rows_ref(p, x, u);
  const test::SampleOutputs got = test::run_sample_rows_gpu(p, x, u, kWithRecords);
  test::expect_same_samples(got, want, c.batch, c.vocab, what);
  const sampling::RowParams rp = sampling::makeRowParams(c.temperature, c.topK, 1.0f, c.vocab);
  check_records(p, x, std::vector<float>(c.batch, c.temperature),
                std::vector<int32_t>(c.batch, rp.greedy ? 1 : c.topK), got.workspace, what);
}

// The plans these cases rely on: chunk lengths 2048 (R = 1), ~6100 (R = 3), 8192 (R = 4).
TEST(SamplingChunkFastGpu, PlanShapes) {
  EXPECT_EQ(sampling::planGeneral(params_of({151936, 1, DType::kF32, 1.0f, 50})).chunkLen, 2048);
  EXPECT_EQ(sampling::planGeneral(params_of({151936, 256, DType::kF32, 1.0f, 50})).chunkLen, 8192);
  EXPECT_EQ(sampling::planGeneral(params_of({151936, 256, DType::kF32, 1.0f, 50})).chunks, 19);
  const int32_t big =
      sampling::planGeneral(params_of({1000003, 1, DType::kF32, 1.0f, 50})).chunkLen;
  EXPECT_GT(big, 4096);
  EXPECT_LE(big, 6144);
  EXPECT_TRUE(sampling::planGeneral(params_of({128256, 16, DType::kF32, 1.0f, 512})).anyCandidate);
  EXPECT_FALSE(sampling::planGeneral(params_of({151936, 16, DType::kF32, 1.0f, 512})).anyCandidate);
}

TEST(SamplingChunkFastGpu, Vocab151936) {
  ES_SKIP_IF_NO_GPU();
  check({151936, 1, DType::kF32, 0.8f, 50, 0.9f}, 1);
  check({151936, 1, DType::kF32, 1.0f, 1}, 2);
  check({151936, 16, DType::kF32, 0.8f, 50, 0.9f}, 3);
  check({151936, 16, DType::kF32, 0.7f, 50, 0.9f, TopPMode::kTruncate}, 4);
  check({151936, 16, DType::kF16, 1.0f, 50, 0.9f}, 5);
  check({151936, 256, DType::kF32, 0.8f, 50, 0.9f}, 6);  // the verify benchmark's shape
  check({151936, 256, DType::kF32, 0.0f, 0}, 7);         // greedy
  // T = +inf: invT = 0, finite logits scale to 0 and +-inf to NaN (the filter's |logit| maximum)
  check({151936, 16, DType::kF32, kInf, 50, 0.9f}, 8);
  check({151936, 256, DType::kF32, kInf, 50, 0.9f}, 9);
}

TEST(SamplingChunkFastGpu, Vocab128256TopK512) {
  ES_SKIP_IF_NO_GPU();
  check({128256, 1, DType::kF32, 1.0f, 512, 0.8f}, 11);
  check({128256, 16, DType::kF32, 0.9f, 512}, 12);
  check({128256, 16, DType::kF16, 1.0f, 512, 0.95f, TopPMode::kTruncate}, 13);
  check({128256, 256, DType::kF32, 1.0f, 1}, 14);
  check({128256, 256, DType::kF16, 0.8f, 50, 0.9f}, 15);
}

// Odd vocabularies: most rows start misaligned (scalar loads), short last chunks (absent slots).
TEST(SamplingChunkFastGpu, OddVocabularies) {
  ES_SKIP_IF_NO_GPU();
  check({100003, 16, DType::kF32, 0.8f, 50, 0.9f}, 21);
  check({100003, 16, DType::kF16, 0.8f, 50, 0.9f}, 22);
  check({100003, 1, DType::kF32, 1.0f, 512}, 23);
  check({4097, 16, DType::kF32, 1.0f, 50, 0.8f}, 24);  // 3 chunks of 2048, the last of 1 entry
  check({4097, 16, DType::kF16, 0.0f, 0}, 25);
  check({12289, 256, DType::kF32, 0.5f, 50, 0.9f}, 26);  // T 0.5: the overflow rows
  check({1000003, 1, DType::kF32, 1.0f, 50, 0.9f}, 27);  // R = 3
  check({40961, 16, DType::kF32, 1.0f, 17}, 28);
  check({100003, 16, DType::kF32, kInf, 50, 0.9f}, 29);  // T = +inf, misaligned rows
}

// Per-row parameters: rows above the candidate cap (full-row mode) are skipped by the chunk
// stage; greedy rows and rows of every k share one launch.
TEST(SamplingChunkFastGpu, PerRowParameters) {
  ES_SKIP_IF_NO_GPU();
  const CfCase c{128256, 16, DType::kF32, 1.0f, 0};
  const std::vector<int32_t> ks = {50, 1, 512, 0, 600, 7, 256, 50, 2, 50, 511, 64, 50, 3, 100, 50};
  const std::vector<float> ts = {1.0f, 0.7f, 1.3f, 1.0f, 1.0f, 0.0f, 0.5f, 1.0f,
                                 2.0f, 0.9f, 1.0f, 1.0f, 0.0f, 1.0f, 0.8f, 1.0f};
  const std::vector<float> ps = {0.9f, 1.0f, 0.5f, 0.9f, 0.9f, 0.9f, 0.95f, 1.0f,
                                 0.9f, 0.3f, 1.0f, 0.9f, 0.9f, 0.9f, 0.7f,  0.9f};
  for (uint32_t seed = 0; seed < 2; ++seed) {
    const auto x = make_logits(c, 900 + seed);
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
    const std::string what = "per-row parameters seed " + std::to_string(seed);
    const test::SampleOutputs got = test::run_sample_rows_gpu(p, x, u, kWithRecords);
    test::expect_same_samples(got, want, c.batch, c.vocab, what);
    std::vector<int32_t> row_k(c.batch);
    for (int32_t b = 0; b < c.batch; ++b) {
      const sampling::RowParams rp = sampling::makeRowParams(ts[b], ks[b], 1.0f, c.vocab);
      row_k[b] = rp.k;
    }
    check_records(p, x, ts, row_k, got.workspace, what);
  }
}

}  // namespace
}  // namespace es
