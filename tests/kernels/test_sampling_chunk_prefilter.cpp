// CPU tests of the chunk and final stages' selections (chunkFastKernel and
// finalFastKernel in kernels/sampling.cu, their arithmetic in kernels/sampling_chunk_prefilter.h):
// a host model of one CTA (512 threads of
// 4 R register slots in the kernel's layouts, 16 warps) runs the kernel's steps (thread maxima,
// each warp's jp largest, theta = the kc-th largest of their union, survivors, the one-survivor
// shortcut, the fallback above 512 survivors) and must give each chunk's top-kc composites
// exactly; the model of finalFastKernel's merge must give the top-k of the records; a whole row
// of model chunks and model merge must keep exactly the support of the CPU reference
// (ref::rowProbs). Mutants (a wrong theta, absent entries read as
// 0, the scalar layout's offsets for vector loads) must fail, so the test can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "kernels/sampling_chunk_prefilter.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es {
namespace {

using namespace es::sampling;
namespace pf = es::sampling::prefilter;

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Mutant {
  kNone,
  kThetaTooHigh,        // theta = the (kc-1)-th largest of U: can drop a top-kc entry
  kAbsentAsZero,        // absent slots of a short chunk read as 0 instead of NaN: phantom entries
  kScalarOffsetsForVec  // survivors' indices from the scalar layout although the loads were vec
};

struct ChunkOut {
  bool poisoned = false;
  bool fallback = false;  // > kMaxCandidateTopK survivors: the exact radix select runs
  int survivors = 0;
  std::vector<uint64_t> top;  // the top-kc composites, descending
};

// The brute-force answer: the kc largest composites of the chunk (as the reference orders them).
std::vector<uint64_t> brute_top(const std::vector<float>& s, int len, uint32_t start, int kc) {
  std::vector<uint64_t> all(len);
  for (int i = 0; i < len; ++i)
    all[i] = composite(orderKey(s[i]), start + static_cast<uint32_t>(i));
  std::partial_sort(all.begin(), all.begin() + kc, all.end(), std::greater<>());
  all.resize(kc);
  return all;
}

// U: each warp's jp largest of its 32 thread keys (keys[32 w, 32 w + 32)), as warpTopValues:
// rounds of (maximum, the lowest holder drops out, marked 0) for jp <= 8, else a sort; both give
// the same values.
std::vector<uint32_t> union_of_warp_tops(const std::vector<uint32_t>& keys, int jp) {
  std::vector<uint32_t> uni;
  for (int w = 0; w < pf::kWarps; ++w) {
    std::vector<uint32_t> v(keys.begin() + 32 * w, keys.begin() + 32 * w + 32);
    for (int r = 0; r < jp; ++r) {
      const auto it = std::max_element(v.begin(), v.end());  // the first (lowest) holder
      uni.push_back(*it);
      *it = 0;  // removed; 0 also stands for a thread without candidates
    }
  }
  return uni;
}

// Every value of U that isKthLargest accepts as its k-th largest, tested as the kernels'
// threads test them (one entry per qualifying element of U, in U's order).
std::vector<uint32_t> kth_largest_candidates(const std::vector<uint32_t>& uni, int k) {
  std::vector<uint32_t> out;
  for (uint32_t v : uni) {
    int gt = 0, ge = 0;
    for (uint32_t u : uni) {
      gt += u > v ? 1 : 0;
      ge += u >= v ? 1 : 0;
    }
    if (pf::isKthLargest(gt, ge, k)) out.push_back(v);
  }
  return out;
}

// One item of chunkFastKernel on the host: s[0, len) are the chunk's scaled logits.
ChunkOut model_chunk(const std::vector<float>& s, int len, uint32_t start, int groups, bool vec,
                     int kc, Mutant mutant = Mutant::kNone) {
  const int per = 4 * groups;
  EXPECT_LE(len, per * kThreads);
  ChunkOut out;
  std::vector<std::vector<float>> val(kThreads, std::vector<float>(per));
  std::vector<float> tmax(kThreads, -kInf);
  for (int t = 0; t < kThreads; ++t) {
    for (int j = 0; j < per; ++j) {
      const int off = pf::slotOffset(j, t, vec);
      float v = off < len ? s[off] : 0.0f;  // the loads fill absent slots with 0
      out.poisoned |= poisonsRow(v);
      if (off >= len)
        v = mutant == Mutant::kAbsentAsZero ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      val[t][j] = v;
      tmax[t] = std::fmax(tmax[t], v);  // fmaxf: a NaN operand is ignored
    }
  }
  if (out.poisoned) return out;
  // Each warp's jp largest thread maxima (as order keys).
  std::vector<uint32_t> tkeys(kThreads);
  for (int t = 0; t < kThreads; ++t) tkeys[t] = orderKey(tmax[t]);
  const std::vector<uint32_t> uni = union_of_warp_tops(tkeys, pf::unionPerWarp(kc));
  EXPECT_GE(static_cast<int>(uni.size()), kc);
  // theta: every value of U tested as the kernel's threads test it; exactly one distinct value.
  const int kth = mutant == Mutant::kThetaTooHigh && kc > 1 ? kc - 1 : kc;
  const std::vector<uint32_t> qualifying = kth_largest_candidates(uni, kth);
  EXPECT_FALSE(qualifying.empty()) << "no kc-th largest";
  for (uint32_t v : qualifying) {
    EXPECT_EQ(v, qualifying.front()) << "two distinct values qualify as the kc-th largest";
  }
  const uint32_t theta = qualifying.empty() ? 0 : qualifying.back();
  // Survivors: float compare against keyValue(theta), as the kernel does.
  const float thetaF = keyValue(theta);
  std::vector<uint64_t> surv;
  for (int t = 0; t < kThreads; ++t) {
    uint32_t mask = 0;
    for (int j = 0; j < per; ++j) mask |= (val[t][j] >= thetaF ? 1u : 0u) << j;
    const bool vec_for_index = mutant == Mutant::kScalarOffsetsForVec ? false : vec;
    for (int j = 0; j < per; ++j) {
      if (!((mask >> j) & 1u)) continue;
      // The key-domain meaning of the float compare.
      EXPECT_GE(orderKey(val[t][j]), theta);
      const uint64_t c = composite(
          orderKey(val[t][j]), start + static_cast<uint32_t>(pf::slotOffset(j, t, vec_for_index)));
      if (__builtin_popcount(mask) == 1) {  // the kernel's shortcut: the thread maximum's key
        EXPECT_EQ(composite(orderKey(tmax[t]),
                            start + static_cast<uint32_t>(pf::slotOffset(j, t, vec_for_index))),
                  c);
      }
      surv.push_back(c);
    }
  }
  out.survivors = static_cast<int>(surv.size());
  if (out.survivors > kMaxCandidateTopK) {  // the fallback's exact selection
    out.fallback = true;
    out.top = brute_top(s, len, start, kc);
    return out;
  }
  std::sort(surv.begin(), surv.end(), std::greater<>());
  if (static_cast<int>(surv.size()) < kc) {
    out.top = surv;  // too few: a wrong result the comparison reports
    return out;
  }
  surv.resize(kc);
  out.top = surv;
  return out;
}

// finalFastKernel's merge on the host: cand[] are the concatenated chunk records (index order
// within equal keys); thread t holds candidates t + r kThreads (absent: 0). Returns the top-k
// composites, descending; *survivors gets the rank-sorted count (> 512: the fallback's select).
std::vector<uint64_t> model_final(const std::vector<uint64_t>& cand, int k, int* survivors) {
  const int n = static_cast<int>(cand.size());
  const int per = (n + kThreads - 1) / kThreads;
  std::vector<uint32_t> tmax(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    for (int r = 0; r < per; ++r) {
      const int i = t + r * kThreads;
      if (i < n) tmax[t] = std::max(tmax[t], compositeKey(cand[i]));
    }
  }
  const std::vector<uint32_t> qualifying =
      kth_largest_candidates(union_of_warp_tops(tmax, pf::unionPerWarp(k)), k);
  const uint32_t theta = qualifying.empty() ? 0 : qualifying.back();
  std::vector<uint64_t> surv;
  for (uint64_t c : cand) {
    if (compositeKey(c) >= theta) surv.push_back(c);
  }
  *survivors = static_cast<int>(surv.size());
  if (surv.size() > static_cast<size_t>(kMaxCandidateTopK)) surv = cand;  // the exact select
  std::sort(surv.begin(), surv.end(), std::greater<>());
  if (surv.size() > static_cast<size_t>(k)) surv.resize(k);
  return surv;
}

// Rows of scaled logits of several shapes.
enum class Shape {
  kNormal,
  kGrid,
  kConstant,
  kPeak,
  kHalfMinusInf,
  kAllMinusInf,
  kSignedZeros,
  kGumbel
};
const char* shape_name(Shape s) {
  switch (s) {
    case Shape::kNormal:
      return "normal";
    case Shape::kGrid:
      return "grid0.5";
    case Shape::kConstant:
      return "constant";
    case Shape::kPeak:
      return "peak";
    case Shape::kHalfMinusInf:
      return "half-inf";
    case Shape::kAllMinusInf:
      return "all-inf";
    case Shape::kSignedZeros:
      return "zeros";
    case Shape::kGumbel:
      return "gumbel";
  }
  return "?";
}
std::vector<float> make_values(Shape shape, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::extreme_value_distribution<float> gd(0.0f, 2.0f);
  std::uniform_int_distribution<int> coin(0, 1);
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) {
    switch (shape) {
      case Shape::kNormal:
        v[i] = nd(rng) / 0.8f;
        break;
      case Shape::kGrid:
        v[i] = std::round(nd(rng) * 2.0f) * 0.5f;
        break;
      case Shape::kConstant:
        v[i] = 0.25f;
        break;
      case Shape::kPeak:
        v[i] = nd(rng) / 3.0f;
        break;
      case Shape::kHalfMinusInf:
        v[i] = coin(rng) ? -kInf : nd(rng);
        break;
      case Shape::kAllMinusInf:
        v[i] = -kInf;
        break;
      case Shape::kSignedZeros:
        v[i] = coin(rng) ? 0.0f : -0.0f;
        break;
      case Shape::kGumbel:
        v[i] = gd(rng);
        break;
    }
  }
  if (shape == Shape::kPeak) v[(seed * 7919u) % n] = 12.0f;
  if (shape == Shape::kSignedZeros && n > 3) v[n / 3] = 1e-30f;  // one positive above the zeros
  return v;
}

struct Tally {
  int cases = 0, wrong = 0, fallbacks = 0;
  std::string first;
};

void run_case(Shape shape, int len, int groups, bool vec, int kc, uint32_t seed, Mutant mutant,
              Tally* tally) {
  const std::vector<float> s = make_values(shape, len, seed);
  const uint32_t start = 8192u * (seed % 19u);
  const ChunkOut got = model_chunk(s, len, start, groups, vec, kc, mutant);
  ++tally->cases;
  ASSERT_FALSE(got.poisoned);
  tally->fallbacks += got.fallback ? 1 : 0;
  if (got.top != brute_top(s, len, start, kc)) {
    if (tally->wrong++ == 0) {
      tally->first = std::string(shape_name(shape)) + " len=" + std::to_string(len) +
                     " R=" + std::to_string(groups) + (vec ? " vec" : " scalar") +
                     " kc=" + std::to_string(kc) + " seed=" + std::to_string(seed);
    }
  }
}

// Every shape, chunk length (short last chunks included), layout, R and kc.
Tally sweep(Mutant mutant) {
  Tally tally;
  const Shape shapes[] = {Shape::kNormal,      Shape::kGrid,         Shape::kConstant,
                          Shape::kPeak,        Shape::kHalfMinusInf, Shape::kAllMinusInf,
                          Shape::kSignedZeros, Shape::kGumbel};
  const int lens[] = {1, 3, 50, 511, 513, 2047, 2048, 3001, 4748, 6144, 8191, 8192};
  const int kcs[] = {1, 2, 16, 17, 50, 64, 128, 256, 512};
  uint32_t seed = 1;
  for (Shape shape : shapes) {
    for (int len : lens) {
      for (int kc_want : kcs) {
        const int kc = std::min(kc_want, len);
        for (bool vec : {true, false}) {
          const int gmin = pf::groupsFor(len);
          for (int groups = gmin; groups <= 4;
               groups += (gmin == 4 ? 1 : 4 - gmin)) {  // minimal and R = 4
            run_case(shape, len, groups, vec, kc, seed++, mutant, &tally);
          }
        }
      }
    }
  }
  return tally;
}

TEST(SamplingChunkPrefilter, Helpers) {
  EXPECT_EQ(pf::unionPerWarp(1), 2);
  EXPECT_EQ(pf::unionPerWarp(16), 2);
  EXPECT_EQ(pf::unionPerWarp(17), 3);
  EXPECT_EQ(pf::unionPerWarp(50), 5);
  EXPECT_EQ(pf::unionPerWarp(496), 32);
  EXPECT_EQ(pf::unionPerWarp(512), 32);
  for (int kc = 1; kc <= kMaxCandidateTopK; ++kc) {
    EXPECT_GE(pf::kWarps * pf::unionPerWarp(kc), kc);
    EXPECT_LE(pf::unionPerWarp(kc), 32);
  }
  EXPECT_EQ(pf::groupsFor(1), 1);
  EXPECT_EQ(pf::groupsFor(2048), 1);
  EXPECT_EQ(pf::groupsFor(2049), 2);
  EXPECT_EQ(pf::groupsFor(8192), 4);
  // Layouts: every offset in [0, 4 R kThreads) exactly once, for both.
  for (bool vec : {true, false}) {
    for (int groups = 1; groups <= 4; ++groups) {
      std::vector<int> hits(4 * groups * kThreads, 0);
      for (int t = 0; t < kThreads; ++t) {
        for (int j = 0; j < 4 * groups; ++j) ++hits.at(pf::slotOffset(j, t, vec));
      }
      EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), static_cast<long>(hits.size()));
    }
  }
  // isKthLargest: the 3rd largest of {9, 7, 7, 7, 1} is 7; of {9, 9, 9} it is 9.
  EXPECT_TRUE(pf::isKthLargest(1, 4, 3));
  EXPECT_FALSE(pf::isKthLargest(0, 1, 3));
  EXPECT_FALSE(pf::isKthLargest(4, 5, 3));
  EXPECT_TRUE(pf::isKthLargest(0, 3, 3));
}

TEST(SamplingChunkPrefilter, ModelMatchesBruteForce) {
  const Tally t = sweep(Mutant::kNone);
  std::printf("%d cases, %d through the fallback\n", t.cases, t.fallbacks);
  EXPECT_EQ(t.wrong, 0) << "of " << t.cases << " cases; first: " << t.first;
  EXPECT_GT(t.fallbacks, 0)
      << "the sweep should reach the > 512 survivors fallback (ties, -inf rows)";
  EXPECT_LT(t.fallbacks, t.cases / 2);
}

TEST(SamplingChunkPrefilter, CatchesMutants) {
  for (Mutant m : {Mutant::kThetaTooHigh, Mutant::kAbsentAsZero, Mutant::kScalarOffsetsForVec}) {
    const Tally t = sweep(m);
    std::printf("mutant %d: %d of %d cases wrong\n", static_cast<int>(m), t.wrong, t.cases);
    EXPECT_GT(t.wrong, 0) << "mutant " << static_cast<int>(m) << " passed all " << t.cases
                          << " cases";
  }
}

TEST(SamplingChunkPrefilter, PoisonedChunks) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), kInf, -std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> s = make_values(Shape::kNormal, 4748, 3);
    s[4000] = bad;
    EXPECT_TRUE(model_chunk(s, 4748, 0, 3, true, 50).poisoned);
    EXPECT_TRUE(model_chunk(s, 4748, 0, 3, false, 50).poisoned);
  }
  std::vector<float> s = make_values(Shape::kNormal, 100, 3);
  s[7] = -kInf;  // -inf does not poison
  EXPECT_FALSE(model_chunk(s, 100, 0, 1, true, 50).poisoned);
}

// The threshold is tight on typical rows: few survivors, so the O(m^2) rank sort is cheap and
// the fallback does not run (docs/sampling.md's figures; a regression here is a slowdown).
TEST(SamplingChunkPrefilter, FewSurvivorsOnTypicalRows) {
  for (int kc : {1, 50, 128, 256}) {
    double sum = 0;
    int worst = 0;
    const int trials = 40;
    for (int trial = 0; trial < trials; ++trial) {
      const std::vector<float> s =
          make_values(trial % 2 ? Shape::kNormal : Shape::kGumbel, 8192, 100 + trial);
      const ChunkOut o = model_chunk(s, 8192, 0, 4, true, kc);
      ASSERT_FALSE(o.fallback) << "kc " << kc << " trial " << trial;
      sum += o.survivors;
      worst = std::max(worst, o.survivors);
    }
    const double mean = sum / trials;
    std::printf("kc %d: %.1f survivors of 8192 on average, %d at most\n", kc, mean, worst);
    const double bound = kc == 1 ? 1.5 : kc == 50 ? 70 : kc == 128 ? 200 : 450;
    EXPECT_LT(mean, bound) << "kc " << kc << " worst " << worst;
  }
}

// The final merge on the concatenated records of model chunks (every shape, chunk length and k):
// the top-k of the union, as sorting all records gives it.
TEST(SamplingChunkPrefilter, FinalMergeMatchesBruteForce) {
  const Shape shapes[] = {Shape::kNormal,      Shape::kGrid,         Shape::kConstant,
                          Shape::kPeak,        Shape::kHalfMinusInf, Shape::kAllMinusInf,
                          Shape::kSignedZeros, Shape::kGumbel};
  int cases = 0, fallbacks = 0;
  uint32_t seed = 5;
  for (Shape shape : shapes) {
    for (int chunkLen : {2048, 6135, 8192}) {
      for (int k : {1, 17, 50, 256}) {
        const int vocab = chunkLen * std::max(1, std::min(16, 8192 / std::min(k, chunkLen))) - 77;
        const std::vector<float> s = make_values(shape, vocab, seed++);
        std::vector<uint64_t> records;
        for (int start = 0; start < vocab; start += chunkLen) {
          const int len = std::min(chunkLen, vocab - start);
          const std::vector<float> part(s.begin() + start, s.begin() + start + len);
          const std::vector<uint64_t> top =
              brute_top(part, len, static_cast<uint32_t>(start), std::min(k, len));
          records.insert(records.end(), top.begin(), top.end());
        }
        if (records.size() > static_cast<size_t>(kMaxFinalCandidates)) continue;
        int survivors = 0;
        std::vector<uint64_t> want = records;
        std::sort(want.begin(), want.end(), std::greater<>());
        want.resize(k);
        EXPECT_EQ(model_final(records, k, &survivors), want)
            << shape_name(shape) << " chunk_len " << chunkLen << " k " << k;
        ++cases;
        fallbacks += survivors > kMaxCandidateTopK ? 1 : 0;
      }
    }
  }
  std::printf("%d final merges, %d through the fallback\n", cases, fallbacks);
  EXPECT_GT(cases, 60);
}

// A whole row: the model chunks of the general path's plan, merged as finalFastKernel merges
// them (the top-k of the concatenated chunk lists), keep exactly the entries the CPU reference
// gives a nonzero probability (top-p off; N(0, 1)-sized logits so that every top-k mass is
// nonzero).
TEST(SamplingChunkPrefilter, RowMatchesReferenceSupport) {
  const int vocabs[] = {151936, 128256, 100003};
  const int batches[] = {1, 16, 256};
  const int ks[] = {1, 50, 512};
  uint32_t seed = 77;
  for (int vocab : vocabs) {
    for (int batch : batches) {
      for (int k : ks) {
        SamplingParams p;
        p.batch = batch;
        p.vocab = vocab;
        p.temperature = 0.7f;
        p.topK = k;
        p.topP = 1.0f;
        const GeneralPlan plan = planGeneral(p);
        if (!plan.anyCandidate) continue;  // e.g. k = 512 at V = 151936 goes full-row
        for (int shape = 0; shape < 2; ++shape) {
          std::mt19937 rng(seed++);
          std::normal_distribution<float> nd(0.0f, 1.0f);
          std::vector<float> x(vocab);
          for (auto& v : x) v = shape == 0 ? nd(rng) : std::round(nd(rng) * 4.0f) * 0.25f;  // ties
          const RowParams rp = makeRowParams(p.temperature, k, 1.0f, vocab);
          std::vector<uint64_t> merged;
          for (int c = 0; c < plan.chunks; ++c) {
            const int start = c * plan.chunkLen;
            const int len = std::min(plan.chunkLen, vocab - start);
            std::vector<float> s(len);
            for (int i = 0; i < len; ++i) s[i] = scaleLogit(x[start + i], rp.invT, rp.greedy);
            const int kc = std::min(rp.k, len);
            const ChunkOut o = model_chunk(s, len, static_cast<uint32_t>(start),
                                           pf::groupsFor(plan.chunkLen), (c + shape) % 2 == 0, kc);
            ASSERT_EQ(o.top, brute_top(s, len, static_cast<uint32_t>(start), kc));
            merged.insert(merged.end(), o.top.begin(), o.top.end());
          }
          int final_survivors = 0;
          std::vector<uint64_t> all_sorted = merged;
          std::sort(all_sorted.begin(), all_sorted.end(), std::greater<>());
          all_sorted.resize(rp.k);
          merged = model_final(merged, rp.k, &final_survivors);
          ASSERT_EQ(merged, all_sorted)
              << "final merge, V=" << vocab << " B=" << batch << " k=" << k;
          if (shape == 0 && k == 50) {
            EXPECT_LE(final_survivors, 120) << "final survivors, V=" << vocab << " B=" << batch;
          }
          std::vector<int32_t> ours;
          for (uint64_t c : merged) ours.push_back(static_cast<int32_t>(compositeIndex(c)));
          std::sort(ours.begin(), ours.end());
          std::vector<float> probs(vocab);
          ASSERT_FALSE(ref::rowProbs(x.data(), vocab, p.temperature, k, 1.0f, TopPMode::kNucleus,
                                     probs.data()));
          std::vector<int32_t> support;
          for (int i = 0; i < vocab; ++i) {
            if (probs[i] > 0.0f) support.push_back(i);
          }
          EXPECT_EQ(ours, support)
              << "V=" << vocab << " B=" << batch << " k=" << k << " shape " << shape;
        }
      }
    }
  }
}

}  // namespace
}  // namespace es
