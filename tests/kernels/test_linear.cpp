// CPU checks of the linear reference: a 2x3 case by hand, a naive double loop over odd shapes
// (K not a multiple of 8, N not a multiple of the W block), bias, f32 output from bf16 inputs,
// validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/linear.h"
#include "support/test_util.h"

namespace es {
namespace {

TEST(LinearRef, HandComputed) {
  // x [2, 3], W [2, 3] (HF layout: one row per output feature), bias [2].
  const std::vector<float> x = {1, 2, 3, -1, 0, 4};
  const std::vector<float> w = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  const std::vector<float> bias = {10, -10};
  std::vector<float> y(4, -1.0f);
  kernel::LinearParams p;
  p.x = x.data();
  p.w = w.data();
  p.y = y.data();
  p.m = 2;
  p.n = 2;
  p.k = 3;
  p.dtype = p.outDtype = DType::kF32;
  ref::linear(p);
  EXPECT_EQ(y, (std::vector<float>{-2.0f, 3.0f, -5.0f, 1.5f}));
  p.bias = bias.data();
  ref::linear(p);
  EXPECT_EQ(y, (std::vector<float>{8.0f, -7.0f, 5.0f, -8.5f}));
}

template <typename T>
void naive_case(DType dtype, DType out_dtype, int32_t m, int32_t n, int32_t k, bool with_bias,
                double rel) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " dtype "
                                    << dtype_name(dtype) << " out " << dtype_name(out_dtype));
  std::mt19937 rng(uint32_t(m * 1000 + n * 10 + k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto cast = [](float v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else if constexpr (std::is_same_v<T, bf16>) return to_bf16(v);
    else return to_fp16(v);
  };
  auto back = [](T v) -> double {
    if constexpr (std::is_same_v<T, float>) return v;
    else return to_float(v);
  };
  std::vector<T> x(size_t(m) * k), w(size_t(n) * k), bias(n);
  for (auto& v : x) v = cast(dist(rng));
  for (auto& v : w) v = cast(dist(rng));
  for (auto& v : bias) v = cast(dist(rng));
  std::vector<uint8_t> y(size_t(m) * n * dtype_size(out_dtype));
  kernel::LinearParams p;
  p.x = x.data();
  p.w = w.data();
  p.bias = with_bias ? bias.data() : nullptr;
  p.y = y.data();
  p.m = m;
  p.n = n;
  p.k = k;
  p.dtype = dtype;
  p.outDtype = out_dtype;
  ref::linear(p);
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      double want = with_bias ? back(bias[j]) : 0.0, mag = std::abs(want);
      for (int32_t kk = 0; kk < k; ++kk) {
        const double t = back(x[size_t(i) * k + kk]) * back(w[size_t(j) * k + kk]);
        want += t;
        mag += std::abs(t);
      }
      double got;
      const size_t e = size_t(i) * n + j;
      if (out_dtype == DType::kF32) got = reinterpret_cast<const float*>(y.data())[e];
      else if (out_dtype == DType::kBF16) got = to_float(reinterpret_cast<const bf16*>(y.data())[e]);
      else got = to_float(reinterpret_cast<const fp16*>(y.data())[e]);
      // fp32 accumulation error bound ~ k * 2^-24 * sum|terms|, plus one output rounding.
      EXPECT_NEAR(got, want, rel * std::abs(want) + 1e-6 * k * mag + 1e-7) << i << "," << j;
    }
  }
}

TEST(LinearRef, MatchesNaiveDoubleLoop) {
  naive_case<float>(DType::kF32, DType::kF32, 3, 5, 7, false, 1e-6);
  naive_case<float>(DType::kF32, DType::kF32, 17, 70, 45, true, 1e-6);
  naive_case<float>(DType::kF32, DType::kF32, 1, 33, 8, true, 1e-6);
  naive_case<bf16>(DType::kBF16, DType::kBF16, 9, 65, 64, true, std::ldexp(1.0, -8));
  naive_case<bf16>(DType::kBF16, DType::kF32, 4, 100, 576, false, 1e-6);  // logits
  naive_case<fp16>(DType::kF16, DType::kF16, 5, 31, 19, true, std::ldexp(1.0, -11));
  naive_case<fp16>(DType::kF16, DType::kF32, 2, 40, 24, true, 1e-6);
  // Large enough to take the threaded path.
  naive_case<bf16>(DType::kBF16, DType::kBF16, 64, 192, 160, true, std::ldexp(1.0, -8));
}

TEST(LinearRef, Validation) {
  std::vector<float> x(6), w(6), y(4);
  auto make = [&] {
    kernel::LinearParams p;
    p.x = x.data();
    p.w = w.data();
    p.y = y.data();
    p.m = 2;
    p.n = 2;
    p.k = 3;
    p.dtype = p.outDtype = DType::kF32;
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make(); p.m = 0; p.x = nullptr;
  EXPECT_FALSE(kernel::validate(p));
  p = make(); p.m = -1;
  test::expectInvalidArgument([&] { ref::linear(p); }, "m");
  p = make(); p.n = 0;
  test::expectInvalidArgument([&] { ref::linear(p); }, "n");
  p = make(); p.k = -3;
  test::expectInvalidArgument([&] { ref::linear(p); }, "k");
  p = make(); p.dtype = DType::kI32; p.outDtype = DType::kI32;
  test::expectInvalidArgument([&] { ref::linear(p); }, "dtype");
  p = make(); p.dtype = DType::kBF16; p.outDtype = DType::kF16;
  test::expectInvalidArgument([&] { ref::linear(p); }, "outDtype");
  p = make(); p.x = nullptr;
  test::expectInvalidArgument([&] { ref::linear(p); }, "x");
  p = make(); p.w = nullptr;
  test::expectInvalidArgument([&] { ref::linear(p); }, "w");
  p = make(); p.y = nullptr;
  test::expectInvalidArgument([&] { ref::linear(p); }, "y");
  p = make(); p.y = x.data();
  test::expectInvalidArgument([&] { ref::linear(p); }, "y");
}

}  // namespace
}  // namespace es
