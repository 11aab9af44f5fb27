#pragma once
// The full-row cut (spec §3.2-3.4; docs/sampling.md "Semantics" 2-7) of one row whose entries are
// spread over a *group* of workers, written once for every group:
//   * one CTA per row (fullRowKernel without GeneralPlan::fullrowSplit: batch > 64 or
//     V < 32768),
//   * the CTAs of a thread-block cluster, each owning a contiguous slice (the split decision for
//     few long rows, kernels/sampling_fullrow_groups.cuh),
//   * a host model of either (tests/kernels/test_sampling_fullrow_cut.cpp: host threads with a
//     barrier), which runs this same template against the CPU reference.
// Plain C++ plus ES_HOST_DEVICE.
//
// A Group provides collectives over the row's entries; every one returns the same value to every
// thread of the group (the template's control flow depends on them, and a group whose threads
// disagree would take different branches and, on the GPU, leave threads at a barrier):
//   reduceMax(f) / reduceSum(f): max / sum of f(i) (uint64) over all entries i;
//   selectDigit(f, need, &bin, &gt): f(i, &digit) gives a weight (0: not counted) and a digit in
//     [0, 256); the weighted histogram over all entries, then pickBin (below);
//   jth(match, j): the index of the j-th (1-based) entry in index order for which match(i) holds
//     (j is at most the number of such entries).
// All sums are exact integers (masses are fixed-point, counts are counts), so the result does not
// depend on how a group splits and orders the additions: the cut, the normaliser and the partial
// weight are the one-CTA kernel's and the reference's, bit for bit.
#include <cstdint>

#include "common/host_device.h"
#include "kernels/sampling.h"
#include "kernels/sampling_math.h"

namespace es::sampling::fullrow {

// Key of -inf: a row whose maximum is this has no finite entry (uniform fallback).
inline constexpr uint32_t kMinusInfKey = 0x007fffffu;

// What the outputs of a full-row row need (the probability of entry i is cutProb below).
struct Cut {
  bool uniform = false;  // NaN / +inf somewhere, or every entry -inf: the uniform fallback
  bool partial = false;  // truncate mode: the cut entry gets `last` instead of its mass
  float rowMax = 0.0f;
  uint64_t cc = 0;    // composite ranks below this are filtered out
  uint64_t norm = 0;  // normaliser of the masses
  uint64_t last = 0;
};

// Rank r's slice [begin, end) of n entries split over `ranks` contiguous slices in index order
// (so entries of lower ranks have lower indices: index-order ties resolve rank by rank).
ES_HOST_DEVICE inline void sliceOf(int rank, int ranks, int n, int* begin, int* end) {
  const int len = (n + ranks - 1) / ranks;
  const int b = rank * len < n ? rank * len : n;
  *begin = b;
  *end = n - b < len ? n : b + len;
}

// Which rank holds the j-th (1-based) match, given countAt(r) matches in rank r's slice; *localJ
// gets j within that rank. ranks if j exceeds the total (not reached for valid j).
template <typename CountAt>
ES_HOST_DEVICE int rankOfJth(CountAt countAt, int ranks, uint64_t j, uint64_t* localJ) {
  uint64_t before = 0;
  for (int r = 0; r < ranks; ++r) {
    const uint64_t c = countAt(r);
    if (before < j && j <= before + c) {
      *localJ = j - before;
      return r;
    }
    before += c;
  }
  *localJ = 0;
  return ranks;
}

// The bin, scanning from 255 down, where the running weight first reaches need (1 <= need <=
// total weight); *gt gets the weight of the bins above it. The GPU groups compute the same with
// a warp scan (sampling_fullrow_groups.cuh).
ES_HOST_DEVICE inline void pickBin(const uint64_t* hist, uint64_t need, uint32_t* bin,
                                   uint64_t* gt) {
  uint64_t run = 0;
  for (int b = 255; b >= 0; --b) {
    if (run < need && need <= run + hist[b]) {
      *bin = static_cast<uint32_t>(b);
      *gt = run;
      return;
    }
    run += hist[b];
  }
  *bin = 0;  // need > total: not reached (callers pass need <= total)
  *gt = run;
}

// The key K with W(key > K) < target <= W(key >= K), W summing weightAt(i, keyAt(i)) over the
// entries: 4 passes of 8-bit digits, MSB first; *above gets W(key > K). weightAt is evaluated
// only for entries whose key matches the digits found so far (the mass's exp is the costly part).
template <typename Group, typename KeyAt, typename WeightAt>
ES_HOST_DEVICE void radixSelect(Group& g, KeyAt keyAt, WeightAt weightAt, uint64_t target,
                                uint32_t* outKey, uint64_t* outAbove) {
  uint32_t prefix = 0;
  uint64_t above = 0;
  for (int d = 0; d < 4; ++d) {
    const int shift = 24 - 8 * d;
    uint32_t bin = 0;
    uint64_t gt = 0;
    g.selectDigit(
        [&](int i, uint32_t* digit) -> uint64_t {
          const uint32_t key = keyAt(i);
          if (d > 0 && (key >> (shift + 8)) != prefix) return 0;
          *digit = (key >> shift) & 0xffu;
          return weightAt(i, key);
        },
        target - above, &bin, &gt);
    above += gt;
    prefix = (prefix << 8) | bin;
  }
  *outKey = prefix;
  *outAbove = above;
}

// The row's cut. scaledAt(i): the scaled logit of entry i (spec §3.1). n = V.
// Top-k (k < V): the k-th key by a count select, its tie among equal keys by index order.
// S: the exact mass sum over the top-k set. Top-p: the budget's key by a mass select; the cut
// entry is the j-th of that key's entries in index order, j = ceil((Bp - above) / q_K) (entries
// of one key have one mass), so prefix_c = above + j q_K.
template <typename Group, typename ScaledAt>
ES_HOST_DEVICE Cut decideCut(Group& g, ScaledAt scaledAt, int n, const RowParams& rp,
                             TopPMode mode) {
  Cut cut;
  const uint64_t red = g.reduceMax([&](int i) {
    const float s = scaledAt(i);
    return (poisonsRow(s) ? (uint64_t{1} << 32) : uint64_t{0}) | orderKey(s);
  });
  if ((red >> 32) != 0 || static_cast<uint32_t>(red) == kMinusInfKey) {
    cut.uniform = true;
    return cut;
  }
  const float rowMax = keyValue(static_cast<uint32_t>(red));
  cut.rowMax = rowMax;
  auto keyAt = [&](int i) { return orderKey(scaledAt(i)); };
  // keyValue(key) is the scaled logit, except that -0 becomes +0: the same expNonpos bits.
  auto massOfKey = [&](uint32_t key) { return massBelowMax(keyValue(key), rowMax); };

  uint64_t ck = 0;  // top-k set: composite ranks >= ck
  if (rp.k < n) {
    uint32_t kkey = 0;
    uint64_t above = 0;
    radixSelect(
        g, keyAt, [](int, uint32_t) { return uint64_t{1}; }, static_cast<uint64_t>(rp.k), &kkey,
        &above);
    const int idx =
        g.jth([&](int i) { return keyAt(i) == kkey; }, static_cast<uint64_t>(rp.k) - above);
    ck = composite(kkey, static_cast<uint32_t>(idx));
  }
  const uint64_t total = g.reduceSum([&](int i) {
    const uint32_t key = keyAt(i);
    return composite(key, static_cast<uint32_t>(i)) >= ck ? massOfKey(key) : uint64_t{0};
  });
  cut.cc = ck;
  cut.norm = total;
  if (!rp.topPOn) return cut;

  const uint64_t budget = topPBudget(rp.topP, total);
  uint32_t pkey = 0;
  uint64_t above = 0;
  radixSelect(
      g, keyAt,
      [&](int i, uint32_t key) {
        return composite(key, static_cast<uint32_t>(i)) >= ck ? massOfKey(key) : uint64_t{0};
      },
      budget, &pkey, &above);
  const uint64_t qk = massOfKey(pkey);  // > 0: the crossing bin has mass
  const uint64_t j = (budget - above + qk - 1) / qk;
  const int idx = g.jth(
      [&](int i) {
        const uint32_t key = keyAt(i);
        return key == pkey && composite(key, static_cast<uint32_t>(i)) >= ck;
      },
      j);
  cut.cc = composite(pkey, static_cast<uint32_t>(idx));
  if (mode == TopPMode::kNucleus) {
    cut.norm = above + j * qk;
  } else {
    cut.norm = budget;
    cut.last = budget - (above + (j - 1) * qk);
    cut.partial = true;
  }
  return cut;
}

// Probability of entry i with scaled logit s under the cut (0 when filtered).
ES_HOST_DEVICE ES_FORCE_INLINE float cutProb(const Cut& c, float s, int i) {
  return fullRowProb(s, i, c.cc, c.partial, c.last, c.rowMax, c.norm);
}

}  // namespace es::sampling::fullrow
