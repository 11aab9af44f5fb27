// CPU checks of the SwiGLU reference: hand values, the double-precision formula over random rows,
// bf16/f16 rounding once, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/swiglu.h"
#include "support/test_util.h"

namespace es {
namespace {

double siluMul(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

TEST(SwigluRef, HandValuesF32) {
  // One row, intermediate 3: gate {0, 1, -2}, up {5, 2, 3}.
  const std::vector<float> gate_up = {0.0f, 1.0f, -2.0f, 5.0f, 2.0f, 3.0f};
  std::vector<float> out(3, -99.0f);
  kernel::SwigluParams p{.gateUp = gate_up.data(),
                         .out = out.data(),
                         .rows = 1,
                         .intermediateSize = 3,
                         .dtype = DType::kF32};
  ref::swiglu(p);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 1.4621171572600098, 1e-6);   // 2 / (1 + e^-1)
  EXPECT_NEAR(out[2], -0.7152175321327052, 1e-6);  // -2 / (1 + e^2) * 3
}

template <typename T>
void randomRows(DType dtype, double rel) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-6.0f, 6.0f);
  const int32_t rows = 5, inter = 37;
  std::vector<T> gate_up(size_t(rows) * 2 * inter), out(size_t(rows) * inter);
  std::vector<float> guF(gate_up.size());
  for (size_t i = 0; i < gate_up.size(); ++i) {
    const float v = dist(rng);
    if constexpr (std::is_same_v<T, float>)
      gate_up[i] = v;
    else if constexpr (std::is_same_v<T, bf16>)
      gate_up[i] = to_bf16(v);
    else
      gate_up[i] = to_fp16(v);
    if constexpr (std::is_same_v<T, float>)
      guF[i] = gate_up[i];
    else
      guF[i] = to_float(gate_up[i]);
  }
  kernel::SwigluParams p{.gateUp = gate_up.data(),
                         .out = out.data(),
                         .rows = rows,
                         .intermediateSize = inter,
                         .dtype = dtype};
  ref::swiglu(p);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t i = 0; i < inter; ++i) {
      const double want =
          siluMul(guF[size_t(r) * 2 * inter + i], guF[size_t(r) * 2 * inter + inter + i]);
      double got;
      if constexpr (std::is_same_v<T, float>)
        got = out[size_t(r) * inter + i];
      else
        got = to_float(out[size_t(r) * inter + i]);
      EXPECT_NEAR(got, want, rel * std::abs(want) + 1e-6) << r << "," << i;
    }
  }
}

TEST(SwigluRef, MatchesDoubleFormula) {
  randomRows<float>(DType::kF32, 1e-6);
  randomRows<bf16>(DType::kBF16, std::ldexp(1.0, -8) * 1.01);
  randomRows<fp16>(DType::kF16, std::ldexp(1.0, -11) * 1.05);
}

TEST(SwigluRef, Validation) {
  std::vector<float> gu(4), out(2);
  auto make = [&] {
    kernel::SwigluParams p{.gateUp = gu.data(),
                           .out = out.data(),
                           .rows = 1,
                           .intermediateSize = 2,
                           .dtype = DType::kF32};
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.rows = 0;
  p.gateUp = nullptr;
  EXPECT_FALSE(kernel::validate(p));
  p = make();
  p.rows = -2;
  test::expectInvalidArgument([&] { ref::swiglu(p); }, "rows");
  p = make();
  p.intermediateSize = 0;
  test::expectInvalidArgument([&] { ref::swiglu(p); }, "intermediateSize");
  p = make();
  p.dtype = DType::kI8;
  test::expectInvalidArgument([&] { ref::swiglu(p); }, "dtype");
  p = make();
  p.gateUp = nullptr;
  test::expectInvalidArgument([&] { ref::swiglu(p); }, "gateUp");
  p = make();
  p.out = nullptr;
  test::expectInvalidArgument([&] { ref::swiglu(p); }, "out");
}

}  // namespace
}  // namespace es
