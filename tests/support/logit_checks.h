#pragma once
// Comparisons of logit rows against reference rows, shared by the model tests on either backend.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace es::test {

// max |a - b| / (1 + |b|) over a range, element by element: the CPU backend's f32 agrees with
// the f32 references everywhere to ~1e-5 relative.
inline double maxError(const float* got, const float* want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst,
                     std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  }
  return worst;
}

// max |a - b| over a range.
inline double maxAbsDiff(const float* got, const float* want, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  return worst;
}

// max |a - b| / (1 + max |b|) over a row: bf16 error scales with the row's magnitude.
inline double rowError(const float* got, const float* want, int64_t n) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  return maxAbsDiff(got, want, n) / (1.0 + scale);
}

// Top-1 minus top-2 of a row (n >= 2).
inline double topMargin(const float* row, int64_t n) {
  std::vector<float> v(row, row + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

inline int32_t argmaxOf(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace es::test
