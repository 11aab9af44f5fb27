// CPU checks of the linear reference: a 2x3 case by hand, a naive double loop over odd shapes
// (K not a multiple of 8, N not a multiple of the W block), bias, f32 output from bf16 inputs,
// validation; and the host rules of the CUDA decode gemv (which parameters it takes, how it
// sizes its grid).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "common/dtype_convert.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"
#include "support/test_util.h"

namespace es {
namespace {

TEST(LinearRef, HandComputed) {
  // x [2, 3], W [2, 3] (HF layout: one row per output feature), bias [2].
  const std::vector<float> x = {1, 2, 3, -1, 0, 4};
  const std::vector<float> w = {1, 0, -1, 0.5f, 0.5f, 0.5f};
  const std::vector<float> bias = {10, -10};
  std::vector<float> y(4, -1.0f);
  kernel::LinearParams p{.x = x.data(), .w = w.data(), .y = y.data(), .m = 2, .n = 2, .k = 3};
  p.dtype = p.outDtype = DType::kF32;
  ref::linear(p);
  EXPECT_EQ(y, (std::vector<float>{-2.0f, 3.0f, -5.0f, 1.5f}));
  p.bias = bias.data();
  ref::linear(p);
  EXPECT_EQ(y, (std::vector<float>{8.0f, -7.0f, 5.0f, -8.5f}));
}

template <typename T>
void naiveCase(DType dtype, DType outDtype, int32_t m, int32_t n, int32_t k, bool withBias,
               double rel) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " dtype "
                                    << dtype_name(dtype) << " out " << dtype_name(outDtype));
  std::mt19937 rng(uint32_t(m * 1000 + n * 10 + k));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
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
  std::vector<T> x(size_t(m) * k), w(size_t(n) * k), bias(n);
  for (auto& v : x) v = cast(dist(rng));
  for (auto& v : w) v = cast(dist(rng));
  for (auto& v : bias) v = cast(dist(rng));
  std::vector<uint8_t> y(size_t(m) * n * dtype_size(outDtype));
  kernel::LinearParams p{.x = x.data(),
                         .w = w.data(),
                         .bias = withBias ? bias.data() : nullptr,
                         .y = y.data(),
                         .m = m,
                         .n = n,
                         .k = k,
                         .dtype = dtype,
                         .outDtype = outDtype};
  ref::linear(p);
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      double want = withBias ? back(bias[j]) : 0.0, mag = std::abs(want);
      for (int32_t kk = 0; kk < k; ++kk) {
        const double t = back(x[size_t(i) * k + kk]) * back(w[size_t(j) * k + kk]);
        want += t;
        mag += std::abs(t);
      }
      double got;
      const size_t e = size_t(i) * n + j;
      if (outDtype == DType::kF32)
        got = reinterpret_cast<const float*>(y.data())[e];
      else if (outDtype == DType::kBF16)
        got = to_float(reinterpret_cast<const bf16*>(y.data())[e]);
      else
        got = to_float(reinterpret_cast<const fp16*>(y.data())[e]);
      // fp32 accumulation error bound ~ k * 2^-24 * sum|terms|, plus one output rounding.
      EXPECT_NEAR(got, want, rel * std::abs(want) + 1e-6 * k * mag + 1e-7) << i << "," << j;
    }
  }
}

TEST(LinearRef, MatchesNaiveDoubleLoop) {
  naiveCase<float>(DType::kF32, DType::kF32, 3, 5, 7, false, 1e-6);
  naiveCase<float>(DType::kF32, DType::kF32, 17, 70, 45, true, 1e-6);
  naiveCase<float>(DType::kF32, DType::kF32, 1, 33, 8, true, 1e-6);
  naiveCase<bf16>(DType::kBF16, DType::kBF16, 9, 65, 64, true, std::ldexp(1.0, -8));
  naiveCase<bf16>(DType::kBF16, DType::kF32, 4, 100, 576, false, 1e-6);  // logits
  naiveCase<fp16>(DType::kF16, DType::kF16, 5, 31, 19, true, std::ldexp(1.0, -11));
  naiveCase<fp16>(DType::kF16, DType::kF32, 2, 40, 24, true, 1e-6);
  // Large enough to take the threaded path.
  naiveCase<bf16>(DType::kBF16, DType::kBF16, 64, 192, 160, true, std::ldexp(1.0, -8));
}

// The summation order linear_ref.cpp defines, one output at a time: 8 partial sums (lane l takes
// elements l, l + 8, …; the k % 8 tail goes to the first lanes), every product rounded, reduced
// as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then the bias.
float definedOrderDot(const float* x, const float* w, int64_t k, float bias) {
  volatile float lanes[8] = {0, 0, 0, 0,
                             0, 0, 0, 0};  // volatile: no fused multiply-add here either
  for (int64_t i = 0; i < k; ++i) {
    const float product = x[i] * w[i];
    lanes[i & 7] = lanes[i & 7] + product;
  }
  const float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  return sum + bias;
}

float roundedTo(DType t, float v) { return t == DType::kBF16 ? to_float(to_bf16(v)) : v; }

std::vector<uint8_t> bytesOf(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> out(v.size() * static_cast<size_t>(dtype_size(t)));
  for (size_t i = 0; i < v.size(); ++i)
    storeFromFloat(out.data(), t, static_cast<int64_t>(i), v[i]);
  return out;
}

// Every register tile (4 x 4 with AVX-512VL, 4 x 2, 4 x 1, 1 x 4, 1 x 1), the W-block edges and
// the threaded split give exactly the bits of the defined order, f32 (W used in place) and bf16
// (W converted per block); and each row equals the same row computed alone (a verify row equals a
// decode row).
TEST(LinearRef, EveryOutputSumsInTheDefinedOrderBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int32_t shapes[][3] = {{1, 1, 1},    {1, 3, 7},     {2, 5, 9},   {3, 33, 8},
                               {4, 2, 17},   {5, 65, 64},   {7, 31, 71}, {16, 70, 576},
                               {17, 33, 45}, {64, 192, 160}};
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const auto& s : shapes) {
      const int32_t m = s[0], n = s[1], k = s[2];
      std::vector<float> xf(static_cast<size_t>(m) * k), wf(static_cast<size_t>(n) * k),
          bf(static_cast<size_t>(n));
      for (float& v : xf) v = roundedTo(dtype, dist(rng));
      for (float& v : wf) v = roundedTo(dtype, dist(rng));
      for (float& v : bf) v = roundedTo(dtype, dist(rng));
      std::vector<uint8_t> x = bytesOf(xf, dtype), w = bytesOf(wf, dtype), b = bytesOf(bf, dtype);
      std::vector<float> y(static_cast<size_t>(m) * n, std::nanf("")),
          row(static_cast<size_t>(n), std::nanf(""));
      kernel::LinearParams p{.x = x.data(),
                             .w = w.data(),
                             .bias = b.data(),
                             .y = y.data(),
                             .m = m,
                             .n = n,
                             .k = k,
                             .dtype = dtype,
                             .outDtype = DType::kF32};
      ref::linear(p);
      for (int32_t i = 0; i < m; ++i) {
        kernel::LinearParams one = p;
        one.x = x.data() + static_cast<size_t>(i) * k * dtype_size(dtype);
        one.y = row.data();
        one.m = 1;
        ref::linear(one);
        for (int32_t j = 0; j < n; ++j) {
          const float want = definedOrderDot(&xf[static_cast<size_t>(i) * k],
                                             &wf[static_cast<size_t>(j) * k], k, bf[j]);
          const float got = y[static_cast<size_t>(i) * n + j];
          ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
              << dtype_name(dtype) << " m " << m << " n " << n << " k " << k << " at " << i << ","
              << j << ": " << got << " vs " << want;
          ASSERT_EQ(std::memcmp(&row[j], &got, 4), 0)
              << "row " << i << " alone differs at column " << j;
        }
      }
    }
  }
}

// bf16 W under f32 x (the CPU backend's layer matrices): exactly the f32 computation with W
// widened, for every tile shape, W widened in registers (m < 8) and per block (m >= 8); and the
// mixed dtypes the reference does not take are errors.
TEST(LinearRef, Bf16WeightsUnderF32ActivationsEqualWidenedWeights) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const auto& s :
       {std::array<int32_t, 3>{1, 33, 576}, {3, 7, 9}, {16, 70, 64}, {5, 65, 71}, {11, 37, 71}}) {
    const int32_t m = s[0], n = s[1], k = s[2];
    std::vector<float> x(static_cast<size_t>(m) * k), wf(static_cast<size_t>(n) * k),
        bias(static_cast<size_t>(n));
    for (float& v : x) v = dist(rng);
    for (float& v : wf) v = roundedTo(DType::kBF16, dist(rng));
    for (float& v : bias) v = dist(rng);
    const std::vector<uint8_t> w16 = bytesOf(wf, DType::kBF16);
    std::vector<float> want(static_cast<size_t>(m) * n, std::nanf("")),
        got(want.size(), std::nanf(""));
    kernel::LinearParams p{.x = x.data(), .w = wf.data(), .bias = bias.data(), .y = want.data()};
    p.m = m;
    p.n = n;
    p.k = k;
    p.dtype = p.outDtype = DType::kF32;
    ref::linear(p);
    p.w = w16.data();
    p.y = got.data();
    p.weightDtype = DType::kBF16;
    ref::linear(p);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << "m " << m << " n " << n << " k " << k;
  }
  std::vector<float> x(8, 1.0f), y(1);
  std::vector<uint8_t> w(16);
  kernel::LinearParams p{.x = x.data(), .w = w.data(), .y = y.data(), .m = 1, .n = 1, .k = 8};
  p.dtype = DType::kBF16;
  p.outDtype = DType::kF32;
  p.weightDtype = DType::kF32;  // f32 W under bf16 x
  test::expectInvalidArgument([&] { ref::linear(p); }, "weightDtype");
  p.dtype = DType::kF32;
  p.weightDtype = DType::kI8;
  test::expectInvalidArgument([&] { ref::linear(p); }, "weightDtype");
  p.dtype = DType::kBF16;
  p.weightDtype = DType::kBF16;  // equal: fine
  EXPECT_NO_THROW(ref::linear(p));
}

TEST(LinearRef, Validation) {
  std::vector<float> x(6), w(6), y(4);
  auto make = [&] {
    kernel::LinearParams p{.x = x.data(), .w = w.data(), .y = y.data(), .m = 2, .n = 2, .k = 3};
    p.dtype = p.outDtype = DType::kF32;
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.m = 0;
  p.x = nullptr;
  EXPECT_FALSE(kernel::validate(p));
  p = make();
  p.m = -1;
  test::expectInvalidArgument([&] { ref::linear(p); }, "m");
  p = make();
  p.n = 0;
  test::expectInvalidArgument([&] { ref::linear(p); }, "n");
  p = make();
  p.k = -3;
  test::expectInvalidArgument([&] { ref::linear(p); }, "k");
  p = make();
  p.dtype = DType::kI32;
  p.outDtype = DType::kI32;
  test::expectInvalidArgument([&] { ref::linear(p); }, "dtype");
  p = make();
  p.dtype = DType::kBF16;
  p.outDtype = DType::kF16;
  test::expectInvalidArgument([&] { ref::linear(p); }, "outDtype");
  p = make();
  p.x = nullptr;
  test::expectInvalidArgument([&] { ref::linear(p); }, "x");
  p = make();
  p.w = nullptr;
  test::expectInvalidArgument([&] { ref::linear(p); }, "w");
  p = make();
  p.y = nullptr;
  test::expectInvalidArgument([&] { ref::linear(p); }, "y");
  p = make();
  p.y = x.data();
  test::expectInvalidArgument([&] { ref::linear(p); }, "y");
  p = make();
  p.algo = static_cast<kernel::LinearAlgo>(7);
  test::expectInvalidArgument([&] { ref::linear(p); }, "algo");
  p = make();
  p.algo = kernel::LinearAlgo::kGemv;  // the reference ignores the CUDA path choice
  EXPECT_TRUE(kernel::validate(p));
  p = make();
  p.normWeight = w.data();
  p.normEps = 0.0f;
  test::expectInvalidArgument([&] { ref::linear(p); }, "normEps");
  p = make();
  p.normWeight = w.data();
  p.normEps = std::nanf("");
  test::expectInvalidArgument([&] { ref::linear(p); }, "normEps");
  p = make();
  p.dtype = DType::kBF16;
  p.outDtype = DType::kF32;
  p.accumulate = true;
  test::expectInvalidArgument([&] { ref::linear(p); }, "outDtype");
}

// The fused norm and residual add (normWeight, accumulate) on a hand-computed row: x = (2, -2, 2,
// -2, 6, -6, 2, -2) has RMS sqrt(12), so with weight 1 the normalized row is x / sqrt(12); W's
// rows are (1, 0, ...), (0, ..., 0, 1) and all ones; y starts at (1, 2, 3), bias (0.5, 0, 0).
TEST(LinearRef, FusedNormAndResidualAddHandComputed) {
  const std::vector<float> x = {2, -2, 2, -2, 6, -6, 2, -2};
  std::vector<float> w(3 * 8, 0.0f), weight(8, 1.0f), bias = {0.5f, 0.0f, 0.0f}, y = {1, 2, 3};
  w[0] = 1.0f;
  w[8 + 7] = 1.0f;
  for (int c = 0; c < 8; ++c) w[16 + c] = 1.0f;
  kernel::LinearParams p{.x = x.data(), .w = w.data(), .bias = bias.data(), .y = y.data()};
  p.m = 1;
  p.n = 3;
  p.k = 8;
  p.dtype = p.outDtype = DType::kF32;
  p.normWeight = weight.data();
  p.normEps = 1e-6f;
  p.accumulate = true;
  ref::linear(p);
  const double s = 1.0 / std::sqrt(12.0 + 1e-6);
  EXPECT_NEAR(y[0], 1.0 + 2.0 * s + 0.5, 1e-5);
  EXPECT_NEAR(y[1], 2.0 - 2.0 * s, 1e-5);
  EXPECT_NEAR(y[2], 3.0 + 0.0, 1e-5);
  // Without accumulate y is overwritten; without the norm x is used as is.
  p.accumulate = false;
  ref::linear(p);
  EXPECT_NEAR(y[0], 2.0 * s + 0.5, 1e-5);
  p.normWeight = nullptr;
  ref::linear(p);
  EXPECT_NEAR(y[1], -2.0, 1e-6);
}

TEST(LinearGemvRules, Eligibility) {
  alignas(16) static uint8_t x[1024], w[1024], y[1024], b[64];
  auto make = [&] {
    kernel::LinearParams p{.x = x, .w = w, .y = y, .m = 1, .n = 8, .k = 32};
    p.dtype = p.outDtype = DType::kBF16;
    return p;
  };
  EXPECT_TRUE(kernel::gemvSupported(make()));
  auto p = make();
  p.m = 16;
  p.bias = b;
  EXPECT_TRUE(kernel::gemvSupported(p));
  p = make();
  p.dtype = p.outDtype = DType::kF16;
  EXPECT_TRUE(kernel::gemvSupported(p));
  p = make();
  p.outDtype = DType::kF32;
  EXPECT_TRUE(kernel::gemvSupported(p));
  p = make();
  p.k = 8;
  p.n = 1;
  EXPECT_TRUE(kernel::gemvSupported(p));
  p = make();
  p.dtype = p.outDtype = DType::kF32;
  EXPECT_STREQ(kernel::gemvRejection(p), "dtype must be bf16 or f16");
  p = make();
  p.m = 17;
  EXPECT_STREQ(kernel::gemvRejection(p), "m must be in [1, 16]");
  p = make();
  p.m = 0;
  EXPECT_FALSE(kernel::gemvSupported(p));
  p = make();
  p.k = 36;
  EXPECT_STREQ(kernel::gemvRejection(p), "k must be a positive multiple of 8");
  p = make();
  p.x = x + 8;
  EXPECT_STREQ(kernel::gemvRejection(p), "x must be 16-byte aligned");
  p = make();
  p.w = w + 2;
  EXPECT_STREQ(kernel::gemvRejection(p), "w must be 16-byte aligned");
  p = make();
  p.y = y + 1;
  EXPECT_STREQ(kernel::gemvRejection(p), "y must be aligned to its element size");
  p = make();
  p.outDtype = DType::kF32;
  p.y = y + 2;
  EXPECT_STREQ(kernel::gemvRejection(p), "y must be aligned to its element size");
  p = make();
  p.bias = b + 1;
  EXPECT_STREQ(kernel::gemvRejection(p), "bias must be 2-byte aligned");
  p = make();
  p.weightDtype = DType::kF16;
  EXPECT_STREQ(kernel::gemvRejection(p), "weightDtype must equal dtype");
  p = make();
  p.weightDtype = DType::kBF16;
  EXPECT_TRUE(kernel::gemvSupported(p));
  p = make();
  p.normWeight = w;
  EXPECT_TRUE(kernel::gemvSupported(p));
  p = make();
  p.normWeight = w + 8;
  EXPECT_STREQ(kernel::gemvRejection(p), "normWeight must be 16-byte aligned");
}

// The grid rule (linear_gemv.h) on the Qwen3 decode shapes and the edge cases, 132 SMs: at
// least 198 CTAs wanted.
TEST(LinearGemvRules, GridChoice) {
  using kernel::detail::chooseGemvConfig;
  auto expect = [](kernel::detail::GemvConfig c, int32_t tiles, int32_t split) {
    EXPECT_EQ(c.rowTiles, tiles);
    EXPECT_EQ(c.kSplit, split);
  };
  // Rule 1, two tiles at the one-tile split: 8B gate_up (768 two-tile CTAs) and lm_head.
  expect(chooseGemvConfig(24576, 4096, 132), 2, 1);
  expect(chooseGemvConfig(151936, 4096, 132), 2, 1);
  expect(chooseGemvConfig(151936, 1024, 132), 2, 1);
  // Rule 2, a thin one-tile grid (256 CTAs < 2.5 an SM) and >= 8 K blocks a warp at split 2:
  // 8B o and down.
  expect(chooseGemvConfig(4096, 4096, 132), 2, 2);
  expect(chooseGemvConfig(4096, 12288, 132), 2, 2);
  // Rule 3, short K, no split, and the two-tile grid reaches 31/32 of the SMs: 0.6B qkv (128
  // CTAs >= 127.9) and gate_up (192).
  expect(chooseGemvConfig(4096, 1024, 132), 2, 1);
  expect(chooseGemvConfig(6144, 1024, 132), 2, 1);
  expect(chooseGemvConfig(4064, 1024, 132), 1, 1);  // 127 CTAs: < 31/32 of 132
  expect(chooseGemvConfig(6144, 2056, 132), 1, 1);  // k > 2048
  // Rule 4, one tile: 8B qkv (384 one-tile CTAs, 2.9 an SM; k > 2048), 0.6B o and down (no
  // two-tile split reaches 198 CTAs), k = 1024 with 64 tiles (32 blocks: at most 4 x 8 warps).
  expect(chooseGemvConfig(6144, 4096, 132), 1, 1);
  expect(chooseGemvConfig(1024, 2048, 132), 1, 4);
  expect(chooseGemvConfig(1024, 3072, 132), 1, 4);
  expect(chooseGemvConfig(1024, 1024, 132), 1, 4);
  expect(chooseGemvConfig(1, 8, 132), 1, 1);      // one K block: no split
  expect(chooseGemvConfig(64, 520, 132), 1, 2);   // 17 blocks: at most 2 x 8 warps
  expect(chooseGemvConfig(4096, 4096, 0), 2, 1);  // unknown SM count: 1 SM
}

// gemvFillsSms (linear_gemv.h): only at m > 8, and only where the grid needs every CTA slot of
// some SMs: Qwen3-8B's 16-row o projection (two tiles, kSplit 2: 256 CTAs at 2 an SM) does,
// Qwen3-0.6B's (one tile, kSplit 4: 256 CTAs at 3 an SM) does not.
TEST(LinearGemvRules, FillsSms) {
  using kernel::detail::chooseGemvConfig;
  using kernel::detail::gemvFillsSms;
  auto fills = [](int32_t m, int32_t n, int32_t k, bool norm) {
    return gemvFillsSms(chooseGemvConfig(n, k, 132), m, n, norm, 132);
  };
  const auto o8b = chooseGemvConfig(4096, 4096, 132);
  EXPECT_EQ(o8b.rowTiles, 2);
  EXPECT_EQ(o8b.kSplit, 2);
  EXPECT_TRUE(fills(16, 4096, 4096, false));
  EXPECT_TRUE(fills(9, 4096, 4096, false));
  EXPECT_FALSE(fills(8, 4096, 4096, false));  // one n8 tile of x: registers to spare
  EXPECT_FALSE(fills(1, 4096, 4096, false));
  const auto o06b = chooseGemvConfig(1024, 2048, 132);
  EXPECT_EQ(o06b.rowTiles, 1);
  EXPECT_EQ(o06b.kSplit, 4);
  EXPECT_FALSE(fills(16, 1024, 2048, false));  // 256 CTAs fit 2 an SM of the 3
  // The same grid rule by hand: one tile, no split, 3 an SM: fills from 2 * 132 + 1 CTAs.
  const kernel::detail::GemvConfig one{1, 1, 2};
  EXPECT_FALSE(gemvFillsSms(one, 16, 264 * 16, false, 132));
  EXPECT_TRUE(gemvFillsSms(one, 16, 265 * 16, false, 132));
  // With a fused norm at 2 an SM it fills from 133 CTAs, at 3 from 265 (normCtasPerSm).
  EXPECT_FALSE(gemvFillsSms(one, 16, 132 * 16, true, 132));
  EXPECT_TRUE(gemvFillsSms(one, 16, 133 * 16, true, 132));
  const kernel::detail::GemvConfig one3{1, 1, 3};
  EXPECT_FALSE(gemvFillsSms(one3, 16, 264 * 16, true, 132));
  EXPECT_TRUE(gemvFillsSms(one3, 16, 265 * 16, true, 132));
}

// gemvCtasPerSm (linear_gemv.h): the instance's occupancy. Two tiles: 2; one tile: 3, or with a
// fused norm the config's choice.
TEST(LinearGemvRules, CtasPerSm) {
  using kernel::detail::gemvCtasPerSm;
  using Cfg = kernel::detail::GemvConfig;
  for (const int32_t cps : {2, 3}) {
    EXPECT_EQ(gemvCtasPerSm(Cfg{2, 1, cps}, false), 2);
    EXPECT_EQ(gemvCtasPerSm(Cfg{2, 2, cps}, true), 2);
    EXPECT_EQ(gemvCtasPerSm(Cfg{1, 1, cps}, false), 3);
    EXPECT_EQ(gemvCtasPerSm(Cfg{1, 4, cps}, true), cps);
  }
}

// The fused-norm one-tile instances at 3 CTAs an SM only where one tile per CTA takes more than
// one wave of 2 an SM and k >= 2048, whatever the rowTiles chosen.
TEST(LinearGemvRules, NormOccupancy) {
  using kernel::detail::chooseGemvConfig;
  EXPECT_EQ(chooseGemvConfig(6144, 4096, 132).normCtasPerSm, 3);   // 8B qkv: 384 > 264 CTAs
  EXPECT_EQ(chooseGemvConfig(24576, 4096, 132).normCtasPerSm, 3);  // 8B gate_up: 1,536
  EXPECT_EQ(chooseGemvConfig(6144, 1024, 132).normCtasPerSm, 2);   // 0.6B gate_up: k 1024
  EXPECT_EQ(chooseGemvConfig(4096, 1024, 132).normCtasPerSm, 2);   // 0.6B qkv
  EXPECT_EQ(chooseGemvConfig(4096, 2048, 132).normCtasPerSm, 2);   // 256 CTAs: one wave
  EXPECT_EQ(chooseGemvConfig(4224, 2048, 132).normCtasPerSm, 2);   // 264 CTAs: one wave
  EXPECT_EQ(chooseGemvConfig(4240, 2048, 132).normCtasPerSm, 3);   // 265 CTAs
  EXPECT_EQ(chooseGemvConfig(4240, 2048, 300).normCtasPerSm, 2);   // 530 CTAs on 300 SMs
}

}  // namespace
}  // namespace es
