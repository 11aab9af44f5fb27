#pragma once
// Shared pieces of the model-forward GPU parity tests (test_{embedding,rmsnorm,swiglu,
// qkv_rope_kv_write,paged_attention,linear}_gpu.cu): the tolerance table, typed conversions,
// random fills and an element-wise comparison that reports the first mismatches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "support/gpu_test_util.h"

namespace es::fwdtest {

// |got - want| <= rel * |want| + abs, per storage dtype (GPU vs the CPU reference, both rounded
// once to the dtype; the 16-bit rows allow one ulp of disagreement plus fp32 reduction order).
struct Tol {
  double rel, abs;
};
inline constexpr Tol kTolF32{1e-5, 1e-6};
inline constexpr Tol kTolF16{2e-3, 1e-3};
inline constexpr Tol kTolBF16{1e-2, 1e-2};

template <typename T>
constexpr Tol tol_for() {
  if constexpr (std::is_same_v<T, float>)
    return kTolF32;
  else if constexpr (std::is_same_v<T, fp16>)
    return kTolF16;
  else
    return kTolBF16;
}

template <typename T>
T cast(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, bf16>)
    return to_bf16(v);
  else
    return to_fp16(v);
}
template <typename T>
double to_d(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return to_float(v);
}
template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
void fill(std::vector<T>& v, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (auto& x : v) x = cast<T>(d(rng));
}

// Expects got ≈ want element-wise; a NaN/poison in got fails. Reports at most 5 mismatches.
template <typename T>
void expect_close(const std::vector<T>& got, const std::vector<T>& want, Tol tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_d(got[i]), w = to_d(want[i]);
    const bool ok = std::isfinite(g) && std::abs(g - w) <= tol.rel * std::abs(w) + tol.abs;
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << " want " << w;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ";
}

template <typename T>
void expect_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!same_bits(got[i], want[i]) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << to_d(got[i]) << " want " << to_d(want[i]);
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ";
}

}  // namespace es::fwdtest
