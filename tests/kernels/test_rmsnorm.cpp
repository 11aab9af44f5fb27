// CPU checks of the RMSNorm reference: a [3, 4] case by hand, the fused residual add (rounded to
// dtype before the statistics), out aliasing x, bf16/f16 storage, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/rmsnorm.h"
#include "support/test_util.h"

namespace es {
namespace {

// x = [[1, 2, 3, 4], [-2, 0, 0, 2], [0.5, 0.5, 0.5, 0.5]], weight = [1, 0.5, 2, -1], eps = 1e-6:
// row 0: mean(x^2) = 30/4 = 7.5, row 1: 8/4 = 2, row 2: 0.25.
TEST(RmsNormRef, HandComputed3x4) {
  const std::vector<float> x = {1, 2, 3, 4, -2, 0, 0, 2, 0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> w = {1.0f, 0.5f, 2.0f, -1.0f};
  std::vector<float> out(12, -7.0f);
  kernel::RmsNormParams p{.x = x.data(),
                          .weight = w.data(),
                          .out = out.data(),
                          .rows = 3,
                          .hiddenSize = 4,
                          .eps = 1e-6f,
                          .dtype = DType::kF32};
  ref::rmsNorm(p);
  const double meanSq[3] = {7.5, 2.0, 0.25};
  for (int r = 0; r < 3; ++r) {
    const double s = 1.0 / std::sqrt(meanSq[r] + 1e-6);
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(out[r * 4 + i], x[r * 4 + i] * s * w[i], 1e-6) << r << "," << i;
    }
  }
  // Row 2 by hand: 0.5 / sqrt(0.25) = 1 (eps negligible) times the weights.
  EXPECT_NEAR(out[8], 1.0f, 1e-5);
  EXPECT_NEAR(out[11], -1.0f, 1e-5);

  // out aliasing x gives the same answer.
  std::vector<float> inplace = x;
  p.x = inplace.data();
  p.out = inplace.data();
  ref::rmsNorm(p);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(inplace[i], out[i]);
}

TEST(RmsNormRef, FusedResidualRoundsToDtypeFirst) {
  // bf16: 1 + 2^-9 is a tie between 1 and 1 + 2^-7 and rounds to even (1.0), so the residual
  // stream keeps 1.0 and the statistics use 1.0, not 1.00195.
  const int32_t hidden = 4;
  std::vector<bf16> residual = {to_bf16(1.0f), to_bf16(2.0f), to_bf16(-1.0f), to_bf16(0.0f)};
  std::vector<bf16> x = {to_bf16(0.001953125f), to_bf16(1.0f), to_bf16(-1.0f), to_bf16(3.0f)};
  std::vector<bf16> w(hidden, to_bf16(1.0f));
  std::vector<bf16> out(hidden);
  kernel::RmsNormParams p{.x = x.data(),
                          .residual = residual.data(),
                          .weight = w.data(),
                          .out = out.data(),
                          .rows = 1,
                          .hiddenSize = hidden,
                          .eps = 1e-5f,
                          .dtype = DType::kBF16};
  ref::rmsNorm(p);
  const float wantRes[4] = {1.0f, 3.0f, -2.0f, 3.0f};
  for (int i = 0; i < hidden; ++i) EXPECT_EQ(to_float(residual[i]), wantRes[i]) << i;
  const double s = 1.0 / std::sqrt((1.0 + 9.0 + 4.0 + 9.0) / 4.0 + 1e-5);
  for (int i = 0; i < hidden; ++i) {
    EXPECT_NEAR(to_float(out[i]), wantRes[i] * s, std::abs(wantRes[i] * s) * 0.004 + 1e-6) << i;
  }
}

template <typename T>
void randomCase(DType dtype, double rel, bool withResidual) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  const int32_t rows = 6, hidden = 75;
  auto cast = [](float v) {
    if constexpr (std::is_same_v<T, float>)
      return v;
    else if constexpr (std::is_same_v<T, bf16>)
      return to_bf16(v);
    else
      return to_fp16(v);
  };
  auto back = [](T v) -> double {
    if constexpr (std::is_same_v<T, float>)
      return v;
    else
      return to_float(v);
  };
  std::vector<T> x(size_t(rows) * hidden), res(x.size()), w(hidden), out(x.size());
  for (auto& v : x) v = cast(dist(rng));
  for (auto& v : res) v = cast(dist(rng));
  for (auto& v : w) v = cast(dist(rng));
  const std::vector<T> res0 = res;
  kernel::RmsNormParams p{.x = x.data(),
                          .residual = withResidual ? res.data() : nullptr,
                          .weight = w.data(),
                          .out = out.data(),
                          .rows = rows,
                          .hiddenSize = hidden,
                          .eps = 1e-6f,
                          .dtype = dtype};
  ref::rmsNorm(p);
  for (int32_t r = 0; r < rows; ++r) {
    std::vector<double> v(hidden);
    double ss = 0;
    for (int32_t i = 0; i < hidden; ++i) {
      const size_t e = size_t(r) * hidden + i;
      v[i] = withResidual ? back(cast(float(back(res0[e]) + back(x[e])))) : back(x[e]);
      if (withResidual) {
        EXPECT_EQ(back(res[e]), v[i]) << "residual " << e;
      }
      ss += v[i] * v[i];
    }
    const double s = 1.0 / std::sqrt(ss / hidden + 1e-6);
    for (int32_t i = 0; i < hidden; ++i) {
      const double want = v[i] * s * back(w[i]);
      EXPECT_NEAR(back(out[size_t(r) * hidden + i]), want, rel * std::abs(want) + 1e-6);
    }
  }
}

TEST(RmsNormRef, MatchesDoubleFormula) {
  for (bool residual : {false, true}) {
    randomCase<float>(DType::kF32, 1e-5, residual);
    randomCase<bf16>(DType::kBF16, std::ldexp(1.0, -8) * 1.05, residual);
    randomCase<fp16>(DType::kF16, std::ldexp(1.0, -11) * 1.5, residual);
  }
}

TEST(RmsNormRef, Validation) {
  std::vector<float> x(8), res(8), w(4), out(8);
  auto make = [&] {
    kernel::RmsNormParams p{.x = x.data(),
                            .weight = w.data(),
                            .out = out.data(),
                            .rows = 2,
                            .hiddenSize = 4,
                            .dtype = DType::kF32};
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.rows = 0;
  p.x = nullptr;
  EXPECT_FALSE(kernel::validate(p));
  p = make();
  p.rows = -1;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "rows");
  p = make();
  p.hiddenSize = 0;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "hiddenSize");
  p = make();
  p.eps = 0.0f;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "eps");
  p = make();
  p.dtype = DType::kI64;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "dtype");
  p = make();
  p.x = nullptr;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "x");
  p = make();
  p.weight = nullptr;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "weight");
  p = make();
  p.out = nullptr;
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "out");
  p = make();
  p.residual = out.data();
  test::expectInvalidArgument([&] { ref::rmsNorm(p); }, "residual");
}

}  // namespace
}  // namespace es
