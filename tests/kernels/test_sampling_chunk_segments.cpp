// CPU model of the chunk stage's segments (chunkFastKernel in kernels/sampling.cu): a CTA walks
// consecutive chunks of one row and keeps the segment's top-k so far (`best`, descending). Its
// items come in merge groups (prefilter::mergeAfter: after items 2, 4, 8, 16, then every 16, and
// the segment's last; the model also runs a merge after every item: any schedule must be
// exact): the items of a group filter by the threshold of the
// last merge, the k-th largest key of `best` (scaled logit >= keyValue(theta), the kernel's float
// compare; the first group: the first chunk's threshold), and the group's survivors are merged
// into `best` by rank (entries of `best` above, found by binary search, + survivors above); more
// than 512 survivors in a group take each of its chunks' exact top-kc (the radix-select
// fallback). The model must give the segment's exact top-min(k, entries) composites, in order,
// for every segment of rows with ties, constant values, -inf and signed zeros. The first item of
// a segment is modelled by its exact top-kc: its union threshold is checked by
// test_sampling_chunk_prefilter. A strict compare (scaled logit > theta) is exact as well: an
// entry of a later chunk with the k-th entry's key has a larger index, so a smaller composite.
// Mutants (the threshold from the middle of `best`, a merge that forgets the survivors above, a
// fallback over the group's last chunk only) must fail, so the test can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "kernels/sampling_chunk_prefilter.h"
#include "kernels/sampling_math.h"

namespace es {
namespace {

using namespace es::sampling;

enum class Mutant {
  kNone,
  kStrictCompare /* exact too */,
  kThresholdTooHigh,
  kMergeIgnoresSurvivors,
  kFallbackLastChunkOnly
};

constexpr float kInf = std::numeric_limits<float>::infinity();

// The k largest composites of v (distinct), descending.
std::vector<uint64_t> top(std::vector<uint64_t> v, int k) {
  k = std::min<int>(k, static_cast<int>(v.size()));
  std::partial_sort(v.begin(), v.begin() + k, v.end(), std::greater<>());
  v.resize(k);
  return v;
}

// mergeTopK of the kernel: best (descending) and b (any order, disjoint), each value's rank =
// entries of best above it (binary search) + entries of b above it.
std::vector<uint64_t> merge_by_rank(const std::vector<uint64_t>& best,
                                    const std::vector<uint64_t>& b, int k, Mutant mutant) {
  const int n = std::min<int>(k, static_cast<int>(best.size() + b.size()));
  std::vector<uint64_t> out(n, 0);
  auto above_in_b = [&](uint64_t v) {
    if (mutant == Mutant::kMergeIgnoresSurvivors) return 0;
    return static_cast<int>(std::count_if(b.begin(), b.end(), [&](uint64_t x) { return x > v; }));
  };
  for (size_t i = 0; i < best.size(); ++i) {
    const int rank = static_cast<int>(i) + above_in_b(best[i]);
    if (rank < n) out[rank] = best[i];
  }
  for (uint64_t v : b) {
    const int in_best =
        static_cast<int>(std::lower_bound(best.begin(), best.end(), v, std::greater<>()) -
                         best.begin());  // entries > v
    const int rank = in_best + above_in_b(v);
    if (rank < n) out[rank] = v;
  }
  return out;
}

// One segment: chunks [c0, c1] of row s (scaled logits), chunkLen entries each (the row's last
// chunk may be shorter). Merge groups (prefilter::mergeAfter; merge_each: after every item): the
// items between two merges filter by the threshold of the last merge (the first group: the first
// chunk's, when it holds k entries), their survivors are merged together, and a group with more
// than 512 survivors merges each of its chunks' exact top-kc instead.
std::vector<uint64_t> model_segment(const std::vector<float>& s, int chunkLen, int c0, int c1,
                                    int k, bool merge_each, Mutant mutant) {
  const int V = static_cast<int>(s.size());
  std::vector<uint64_t> best;
  auto chunk_composites = [&](int c) {
    const int start = c * chunkLen, len = std::min(chunkLen, V - start);
    std::vector<uint64_t> chunk(len);
    for (int i = 0; i < len; ++i)
      chunk[i] = composite(orderKey(s[start + i]), static_cast<uint32_t>(start + i));
    return chunk;
  };
  // The threshold of the group being walked: -inf until a k-th key is known.
  float thetaF = -kInf;
  bool strict = false;
  std::vector<uint64_t> group;  // the group's survivors
  int group_c0 = c0;
  for (int c = c0; c <= c1; ++c) {
    const std::vector<uint64_t> chunk = chunk_composites(c);
    const int start = c * chunkLen, len = static_cast<int>(chunk.size());
    const int kc = std::min(k, len);
    if (c == c0) {
      const std::vector<uint64_t> first =
          top(chunk, kc);  // the union threshold's survivors reduce to these (other test)
      group.insert(group.end(), first.begin(), first.end());
      // The union threshold is <= this k-th key; the model takes the k-th key itself (the tighter,
      // riskier bound) when the chunk has k entries.
      if (kc == k) thetaF = keyValue(compositeKey(first[k - 1]));
    } else {
      for (int i = 0; i < len; ++i) {
        const float v = s[start + i];
        if (strict ? v > thetaF : v >= thetaF) group.push_back(chunk[i]);
      }
    }
    const int done = c - c0 + 1;
    if (!(c == c1 || merge_each || prefilter::mergeAfter(done))) continue;
    if (static_cast<int>(group.size()) > kMaxCandidateTopK) {  // the fallback: each chunk's top-kc
      const int from = mutant == Mutant::kFallbackLastChunkOnly ? c : group_c0;
      for (int g = from; g <= c; ++g) {
        const std::vector<uint64_t> gc = chunk_composites(g);
        best =
            merge_by_rank(best, top(gc, std::min<int>(k, static_cast<int>(gc.size()))), k, mutant);
      }
    } else {
      best = merge_by_rank(best, group, k, mutant);
    }
    group.clear();
    group_c0 = c + 1;
    // The mutant: the middle of the list (a threshold a few ranks too high is nearly harmless:
    // what it drops is almost always pushed out of the top-k by later chunks anyway).
    const int kth = mutant == Mutant::kThresholdTooHigh ? k / 2 - 1 : k - 1;
    const bool full = static_cast<int>(best.size()) >= k && kth >= 0;
    thetaF = full ? keyValue(compositeKey(best[kth])) : -kInf;
    strict = full && mutant == Mutant::kStrictCompare;
  }
  return best;
}

// Row shapes, by r % 6: N(0, 3); a 0.5 grid (ties); constant; half -inf; signed zeros with a few
// small positives; a grid of 4 values (heavy ties across chunks).
std::vector<float> make_row(int V, int r, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int> coin(0, 1), four(0, 3);
  std::vector<float> s(V);
  for (int i = 0; i < V; ++i) {
    float v = nd(rng);
    switch (r % 6) {
      case 1:
        v = std::round(v * 2.0f) * 0.5f;
        break;
      case 2:
        v = 0.25f;
        break;
      case 3:
        v = coin(rng) ? -kInf : v;
        break;
      case 4:
        v = coin(rng) ? 0.0f : -0.0f;
        break;
      case 5:
        v = static_cast<float>(four(rng));
        break;
      default:
        break;
    }
    s[i] = v;
  }
  if (r % 6 == 4) {
    for (int j = 0; j < 7; ++j) s[(977 * j + 13) % V] = 0.001f * static_cast<float>(j % 3);
  }
  return s;
}

// Segments of every shape the kernel's runs give: a run of `per` items cut at the row boundaries.
// Returns the number of segments that differ from the brute force.
int wrong_segments(int V, int chunkLen, int k, int per, bool merge_each, Mutant mutant,
                   int* checked) {
  const int chunks = (V + chunkLen - 1) / chunkLen;
  int wrong = 0;
  for (int r = 0; r < 6; ++r) {
    const std::vector<float> s = make_row(V, r, 1000u + static_cast<uint32_t>(r));
    const int first_item = r * chunks;  // rows r of a batch: item r * chunks is the row's chunk 0
    int c0 = 0;
    while (c0 < chunks) {
      const int run_end =
          ((first_item + c0) / per + 1) * per;  // the run holding chunk c0 ends here
      const int c1 = std::min(chunks, run_end - first_item) - 1;
      std::vector<uint64_t> all;
      const int lo = c0 * chunkLen, hi = std::min(V, (c1 + 1) * chunkLen);
      for (int i = lo; i < hi; ++i)
        all.push_back(composite(orderKey(s[i]), static_cast<uint32_t>(i)));
      const std::vector<uint64_t> want = top(all, k);
      const std::vector<uint64_t> got = model_segment(s, chunkLen, c0, c1, k, merge_each, mutant);
      ++*checked;
      if (got != want) ++wrong;
      c0 = c1 + 1;
    }
  }
  return wrong;
}

TEST(SamplingChunkSegments, RunningThresholdGivesTheSegmentTopK) {
  struct Case {
    int V, chunkLen, k, per;
  };
  const std::vector<Case> cases = {
      {151936, 8192, 50, 19},  // verify: one row per CTA
      {151936, 8192, 50, 5},   // batch 64: 4-5 segments per row
      {151936, 2048, 50, 1},   // batch 1: one chunk per segment
      {100003, 8192, 7, 7},    // odd vocabulary, short last chunk
      {40961, 2048, 512, 3},   // k 512: the fallback above 512 survivors
      {12289, 2048, 1, 4},     // greedy
      {4097, 2048, 128, 2},    // a last chunk of 1 entry
  };
  for (const Case& c : cases) {
    for (bool each : {false, true}) {
      for (Mutant m : {Mutant::kNone, Mutant::kStrictCompare}) {
        int checked = 0;
        const int wrong = wrong_segments(c.V, c.chunkLen, c.k, c.per, each, m, &checked);
        EXPECT_EQ(wrong, 0) << "V " << c.V << " chunk " << c.chunkLen << " k " << c.k << " run "
                            << c.per << (each ? " merge each item" : " merge groups")
                            << (m == Mutant::kStrictCompare ? " (strict compare)" : "") << ": "
                            << wrong << " of " << checked
                            << " segments differ from the brute force";
        EXPECT_GE(checked, 6);
      }
    }
  }
}

// The groups the rule gives: after items 2, 4, 8, 16, then every 16 (at most kMaxMergeGroup
// items, one poison bit each), never after the first.
TEST(SamplingChunkSegments, MergeGroups) {
  std::vector<int> after;
  for (int d = 1; d <= 64; ++d) {
    if (prefilter::mergeAfter(d)) after.push_back(d);
  }
  EXPECT_EQ(after, (std::vector<int>{2, 4, 8, 16, 32, 48, 64}));
  int last = 0;
  for (int d = 1; d <= 600; ++d) {
    if (!prefilter::mergeAfter(d)) continue;
    EXPECT_LE(d - last, prefilter::kMaxMergeGroup) << "group ending at item " << d;
    last = d;
  }
}

// nextMergeAfter (the chunk stage's running count) names the same merges as mergeAfter.
TEST(SamplingChunkSegments, NextMergeMatchesRule) {
  for (int done = 0; done <= 600; ++done) {
    int expect = done + 1;
    while (!prefilter::mergeAfter(expect)) ++expect;
    EXPECT_EQ(prefilter::nextMergeAfter(done), expect) << "after item " << done;
  }
}

TEST(SamplingChunkSegments, CatchesMutants) {
  for (Mutant m : {Mutant::kThresholdTooHigh, Mutant::kMergeIgnoresSurvivors,
                   Mutant::kFallbackLastChunkOnly}) {
    int checked = 0, wrong = 0;
    wrong += wrong_segments(151936, 8192, 50, 19, false, m, &checked);
    wrong += wrong_segments(40961, 2048, 512, 3, false, m, &checked);
    EXPECT_GT(wrong, 0) << "mutant " << static_cast<int>(m) << " passed all " << checked
                        << " segments";
  }
}

}  // namespace
}  // namespace es
