// CPU tests of the full-row cut (kernels/sampling_fullrow_cut.h): fullrow::decideCut, the
// template fullRowKernel runs on one CTA or on a cluster of CTAs, here on a host model of a
// cluster (ranks x threads host threads with a barrier, each rank owning fullrow::sliceOf as on
// the GPU), against the CPU reference ref::rowProbs, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "kernels/sampling.h"
#include "kernels/sampling_fullrow_cut.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es {
namespace {

using namespace es::sampling;
using fullrow::Cut;

// Shared state of the model cluster ("shared memory" of all its CTAs).
struct ModelCluster {
  ModelCluster(int ranks, int threads)
      : ranks(ranks),
        threads(threads),
        bar(ranks * threads),
        slot(ranks * threads),
        hist(ranks * threads, std::vector<uint64_t>(256)),
        found(ranks) {}
  int ranks, threads;
  std::barrier<> bar;
  std::vector<uint64_t> slot;
  std::vector<std::vector<uint64_t>> hist;
  std::vector<int> found;
};

// One thread of the model: rank r's thread t owns entries begin + t + m * threads of its slice,
// as a GPU thread does. Every collective ends with the same value on every thread; the mutant
// kNaiveJth finds the j-th match within each rank's slice (no cross-rank prefix), the mistake a
// cluster version could make.
enum class Mutant { kNone, kNaiveJth };

struct ModelGroup {
  ModelCluster* c;
  int rank, t, begin, end;
  Mutant mutant = Mutant::kNone;
  int id() const { return rank * c->threads + t; }
  void sync() const { c->bar.arrive_and_wait(); }
  template <typename F>
  void for_mine(F f) const {
    for (int i = begin + t; i < end; i += c->threads) f(i);
  }
  template <typename F, typename Op>
  uint64_t reduce(F f, uint64_t init, Op op) const {
    uint64_t v = init;
    for_mine([&](int i) { v = op(v, f(i)); });
    c->slot[id()] = v;
    sync();
    uint64_t r = init;
    for (uint64_t s : c->slot) r = op(r, s);
    sync();
    return r;
  }
  template <typename F>
  uint64_t reduceMax(F f) const {
    return reduce(f, 0, [](uint64_t a, uint64_t b) { return std::max(a, b); });
  }
  template <typename F>
  uint64_t reduceSum(F f) const {
    return reduce(f, 0, [](uint64_t a, uint64_t b) { return a + b; });
  }
  template <typename F>
  void selectDigit(F f, uint64_t need, uint32_t* bin, uint64_t* gt) const {
    std::vector<uint64_t>& h = c->hist[id()];
    std::fill(h.begin(), h.end(), 0);
    for_mine([&](int i) {
      uint32_t digit = 0x100u;
      const uint64_t w = f(i, &digit);
      if (w != 0) h.at(digit) += w;
    });
    sync();
    std::vector<uint64_t> merged(256, 0);
    for (const auto& hh : c->hist) {
      for (int b = 0; b < 256; ++b) merged[b] += hh[b];
    }
    fullrow::pickBin(merged.data(), need, bin, gt);
    sync();
  }
  template <typename Match>
  int jth(Match match, uint64_t j) const {
    uint64_t mine = 0;
    for_mine([&](int i) { mine += match(i) ? 1 : 0; });
    c->slot[id()] = mine;
    sync();
    auto countAt = [&](int r) {
      uint64_t s = 0;
      for (int q = 0; q < c->threads; ++q) s += c->slot[r * c->threads + q];
      return s;
    };
    uint64_t localJ = 0;
    int owner = fullrow::rankOfJth(countAt, c->ranks, j, &localJ);
    if (mutant == Mutant::kNaiveJth) {
      owner = rank;
      localJ = j;
    }
    if (t == 0) {  // the owner's CTA scans its slice in index order
      int idx = -1;
      if (owner == rank) {
        uint64_t k = 0;
        for (int i = begin; i < end && idx < 0; ++i) {
          if (match(i) && ++k == localJ) idx = i;
        }
      }
      c->found[rank] = idx;
    }
    sync();
    int r = -1;  // the mutant takes the first rank that found one
    for (int q = 0; q < c->ranks && r < 0; ++q) r = c->found[q];
    if (mutant == Mutant::kNone) r = *std::max_element(c->found.begin(), c->found.end());
    sync();
    return r;
  }
};

struct Case {
  float temperature;
  int32_t topK;
  float topP;
  TopPMode mode;
};

// Probabilities from the model cluster's cut (every thread's cut must agree).
std::vector<float> model_probs(const std::vector<float>& x, const Case& cs, int ranks, int threads,
                               Mutant mutant = Mutant::kNone) {
  const int n = static_cast<int>(x.size());
  const RowParams rp = makeRowParams(cs.temperature, cs.topK, cs.topP, n);
  auto scaled = [&](int i) { return scaleLogit(x[i], rp.invT, rp.greedy); };
  ModelCluster mc(ranks, threads);
  std::vector<Cut> cuts(ranks * threads);
  std::vector<std::thread> pool;
  for (int r = 0; r < ranks; ++r) {
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, r, t] {
        ModelGroup g{&mc, r, t, 0, 0, mutant};
        fullrow::sliceOf(r, ranks, n, &g.begin, &g.end);
        cuts[g.id()] = fullrow::decideCut(g, scaled, n, rp, cs.mode);
      });
    }
  }
  for (auto& th : pool) th.join();
  for (const Cut& c : cuts) {
    EXPECT_TRUE(c.uniform == cuts[0].uniform && c.cc == cuts[0].cc && c.norm == cuts[0].norm &&
                c.last == cuts[0].last && c.partial == cuts[0].partial)
        << "threads of the model disagree";
  }
  const Cut& cut = cuts[0];
  std::vector<float> p(n);
  for (int i = 0; i < n; ++i) {
    p[i] = cut.uniform ? fdivRn(1.0f, static_cast<float>(n)) : fullrow::cutProb(cut, scaled(i), i);
  }
  return p;
}

std::vector<float> ref_probs(const std::vector<float>& x, const Case& cs) {
  std::vector<float> p(x.size(), -7.0f);
  ref::rowProbs(x.data(), static_cast<int32_t>(x.size()), cs.temperature, cs.topK, cs.topP, cs.mode,
                p.data());
  return p;
}

// Number of entries whose bits differ.
int mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m += f2u(a[i]) != f2u(b[i]) ? 1 : 0;
  return m;
}

enum class Row { kGauss3, kFlat, kCoarseTies, kAllEqual, kPeakAndTies, kSomeMinusInf };

std::vector<float> make_row(Row kind, int n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(n);
  switch (kind) {
    case Row::kGauss3:  // softmax of N(0, 3) logits: real-looking rows
      for (auto& v : x) v = nd(rng);
      break;
    case Row::kFlat:  // near-uniform: the top-p cut lies deep in the row
      for (auto& v : x) v = 0.01f * nd(rng);
      break;
    case Row::kCoarseTies:  // logits on a 0.5 grid: every cut falls inside a tie group
      for (auto& v : x) v = std::round(nd(rng) * 2.0f) * 0.5f;
      break;
    case Row::kAllEqual:  // one tie group: top-k / top-p cut it in index order, across ranks
      for (auto& v : x) v = 1.5f;
      break;
    case Row::kPeakAndTies:  // a peak, then ties spanning every rank
      for (auto& v : x) v = (rng() % 2) ? -1.0f : -2.0f;
      x[rng() % n] = 4.0f;
      break;
    case Row::kSomeMinusInf:
      for (auto& v : x) v = (rng() % 3 == 0) ? -std::numeric_limits<float>::infinity() : nd(rng);
      break;
  }
  return x;
}

constexpr Case kCases[] = {
    {1.0f, 0, 0.9f, TopPMode::kNucleus},    {1.0f, 0, 0.9f, TopPMode::kTruncate},
    {0.7f, 0, 0.5f, TopPMode::kNucleus},    {1.0f, 0, 1.0f, TopPMode::kNucleus},
    {1.0f, 1000, 0.9f, TopPMode::kNucleus}, {1.3f, 40000, 0.95f, TopPMode::kTruncate},
    {1.0f, 700, 1.0f, TopPMode::kNucleus},  {1.0f, 0, 1e-6f, TopPMode::kTruncate},
    {0.0f, 0, 0.9f, TopPMode::kNucleus},  // greedy: top-k 1
};

// The model cluster's probabilities equal the reference's bit for bit: 16, 8, 4 and 2 ranks (the
// GPU's cluster sizes, fullrowSplitRanks) and 1 rank (the one-CTA kernel), every row kind and
// case, real vocab sizes and odd ones (slices of unequal length, empty slices).
TEST(SamplingFullRowCut, ModelClusterEqualsReference) {
  std::mt19937 rng(11);
  int checked = 0;
  const Row kinds[] = {Row::kGauss3,   Row::kFlat,        Row::kCoarseTies,
                       Row::kAllEqual, Row::kPeakAndTies, Row::kSomeMinusInf};
  for (int n : {151936, 128256, 49152, 40961, 4099, 20}) {
    for (Row kind : kinds) {
      const auto x = make_row(kind, n, rng);
      for (const Case& cs : kCases) {
        if (n > 50000 && (&cs - kCases) % 2 == (static_cast<int>(kind) % 2))
          continue;  // time: half at full size
        const auto want = ref_probs(x, cs);
        for (int ranks : {16, 8, 4, 2, 1}) {
          if (n > 50000 && ranks != 16 && ranks != 1) continue;
          const auto got = model_probs(x, cs, ranks, 4);
          ASSERT_EQ(mismatches(got, want), 0) << "n " << n << " kind " << static_cast<int>(kind)
                                              << " case " << (&cs - kCases) << " ranks " << ranks;
          ++checked;
        }
      }
    }
  }
  std::printf("  %d model clusters equal the reference\n", checked);
}

TEST(SamplingFullRowCut, NonFiniteRowsAreUniform) {
  std::mt19937 rng(12);
  for (int n : {49152, 33}) {
    auto x = make_row(Row::kGauss3, n, rng);
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    const Case cs{1.0f, 0, 0.9f, TopPMode::kNucleus};
    EXPECT_EQ(mismatches(model_probs(x, cs, 16, 4), ref_probs(x, cs)), 0);
    x[n / 2] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(mismatches(model_probs(x, cs, 16, 4), ref_probs(x, cs)), 0);
    std::fill(x.begin(), x.end(), -std::numeric_limits<float>::infinity());
    EXPECT_EQ(mismatches(model_probs(x, cs, 16, 4), ref_probs(x, cs)), 0);
    EXPECT_EQ(model_probs(x, cs, 16, 4)[0], fdivRn(1.0f, static_cast<float>(n)));
  }
}

// The test can fail: a cluster that takes the j-th tie within each rank's slice (ignoring the
// ties of lower ranks) cuts a tie group at the wrong entry whenever the group spans ranks.
TEST(SamplingFullRowCut, NaiveClusterTieSearchDisagrees) {
  std::mt19937 rng(13);
  const int n = 49152;
  int wrong = 0, runs = 0;
  for (Row kind : {Row::kAllEqual, Row::kPeakAndTies, Row::kCoarseTies}) {
    const auto x = make_row(kind, n, rng);
    for (const Case& cs :
         {Case{1.0f, 0, 0.5f, TopPMode::kNucleus}, Case{1.0f, 20000, 1.0f, TopPMode::kNucleus},
          Case{1.0f, 0, 0.7f, TopPMode::kTruncate}}) {
      ++runs;
      wrong +=
          mismatches(model_probs(x, cs, 16, 4, Mutant::kNaiveJth), ref_probs(x, cs)) > 0 ? 1 : 0;
      EXPECT_EQ(mismatches(model_probs(x, cs, 16, 4), ref_probs(x, cs)), 0);
    }
  }
  EXPECT_GE(wrong, runs - 2) << wrong << " of " << runs;
}

TEST(SamplingFullRowCut, SlicesCoverTheRowInOrder) {
  for (int n : {0, 1, 15, 16, 17, 151936, 100003}) {
    for (int ranks : {1, 2, 4, 8, 16}) {
      int next = 0;
      for (int r = 0; r < ranks; ++r) {
        int b, e;
        fullrow::sliceOf(r, ranks, n, &b, &e);
        ASSERT_EQ(b, next);
        ASSERT_LE(b, e);
        next = e;
      }
      ASSERT_EQ(next, n);
    }
  }
  uint64_t local = 0;
  const uint64_t counts[] = {3, 0, 2, 5};
  EXPECT_EQ(fullrow::rankOfJth([&](int r) { return counts[r]; }, 4, 4, &local), 2);
  EXPECT_EQ(local, 1u);
  EXPECT_EQ(fullrow::rankOfJth([&](int r) { return counts[r]; }, 4, 10, &local), 3);
  EXPECT_EQ(local, 5u);
  EXPECT_EQ(fullrow::rankOfJth([&](int r) { return counts[r]; }, 4, 11, &local), 4);
}

// The split decision's cluster size per batch: the widest cluster while the grid stays within
// two CTAs per SM, never below 2.
TEST(SamplingFullRowCut, SplitRanksFollowTheBatch) {
  using sampling::fullrowSplitRanks;
  for (int32_t rows = 1; rows <= 16; ++rows)
    EXPECT_EQ(fullrowSplitRanks(rows, 16, 132), 16) << rows;
  EXPECT_EQ(fullrowSplitRanks(17, 16, 132), 8);
  EXPECT_EQ(fullrowSplitRanks(33, 16, 132), 8);
  EXPECT_EQ(fullrowSplitRanks(34, 16, 132), 4);
  EXPECT_EQ(fullrowSplitRanks(64, 16, 132), 4);
  EXPECT_EQ(fullrowSplitRanks(64, 8, 132), 4);  // the portable widest size halves the same way
  EXPECT_EQ(fullrowSplitRanks(8, 8, 132), 8);
  EXPECT_EQ(fullrowSplitRanks(200, 16, 132), 2);  // never below 2
  EXPECT_EQ(fullrowSplitRanks(1, 16, 4), 8);      // a small GPU: 8 CTAs = 2 per SM
  for (int32_t rows = 1; rows <= sampling::kFullRowSplitMaxRows; ++rows) {
    const int32_t r = fullrowSplitRanks(rows, 16, 132);
    EXPECT_TRUE(r == 16 || r == 8 || r == 4 || r == 2) << rows;
    EXPECT_TRUE(r == 2 || rows * r <= 2 * 132) << rows;
  }
}

}  // namespace
}  // namespace es
