#pragma once
// Logit rows with and without non-finite entries, for the tests of the choosing kernels'
// flagNonFinite (kernels/sampling_non_finite.h), on the CPU references and the GPU kernels.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace es::test {

// Row kinds, by row index r % kNonFiniteRowKinds: which entries are not finite.
enum NonFiniteRowKind : int32_t {
  kFiniteRow = 0,     // normal values around a peak
  kNaNEntry = 1,      // one NaN at a random index
  kPlusInfEntry = 2,  // one +inf at a random index
  kMinusInfs = 3,     // some -inf entries beside finite ones (masked tokens: legal)
  kAllMinusInf = 4,   // every entry -inf
  kMixed = 5,         // -inf entries, a NaN and a +inf
  kNegativeNaN = 6,   // one NaN with the sign bit set
  kMinusInfPeak = 7,  // -inf at the peak's neighbours, finite elsewhere (legal)
  kNonFiniteRowKinds = 8,
};

inline bool rowIsNonFinite(int32_t row) {
  switch (row % kNonFiniteRowKinds) {
    case kNaNEntry:
    case kPlusInfEntry:
    case kAllMinusInf:
    case kMixed:
    case kNegativeNaN:
      return true;
    default:
      return false;
  }
}

// [rows, vocab] f32 (vocab >= 4): row r of kind r % kNonFiniteRowKinds, finite values N(0, 2)
// with a peak of +20 at a random index (so a chain drafting the peak is mostly accepted); the
// non-finite entries at random indices (peak included).
inline std::vector<float> nonFiniteRows(int32_t rows, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int32_t> at(0, vocab - 1);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(static_cast<size_t>(rows) * vocab);
  for (int32_t r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * vocab;
    for (int32_t i = 0; i < vocab; ++i) row[i] = nd(rng);
    const int32_t peak = at(rng);
    row[peak] += 20.0f;
    switch (r % kNonFiniteRowKinds) {
      case kNaNEntry:
        row[at(rng)] = nan;
        break;
      case kPlusInfEntry:
        row[at(rng)] = inf;
        break;
      case kMinusInfs:
        for (int32_t j = 0; j < 1 + vocab / 16; ++j) {
          const int32_t i = at(rng);
          if (i != peak) row[i] = -inf;
        }
        break;
      case kAllMinusInf:
        for (int32_t i = 0; i < vocab; ++i) row[i] = -inf;
        break;
      case kMixed:
        for (int32_t j = 0; j < 1 + vocab / 16; ++j) row[at(rng)] = -inf;
        row[at(rng)] = nan;
        row[at(rng)] = inf;
        break;
      case kNegativeNaN:
        row[at(rng)] = -nan;
        break;
      case kMinusInfPeak:
        row[(peak + 1) % vocab] = -inf;
        row[(peak + vocab - 1) % vocab] = -inf;
        break;
      default:
        break;
    }
  }
  return x;
}

}  // namespace es::test
