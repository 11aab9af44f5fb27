// The CPU linear on a quantized W (LinearParams::quantized): every format on random small shapes
// (m = 1, 3, 17; ragged fp8 k with a short last group; bias; bf16 and f32 activations) against an
// independent loop (W dequantized whole, then a dense product in double), bit for bit against
// the dense fp32 path on the dequantized values, the fused norm / residual add, and validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/quant_dequant.h"
#include "kernels/linear.h"
#include "model/host_quantized_matrix.h"
#include "support/test_util.h"

namespace es {
namespace {

using model::HostQuantizedMatrix;

// f16 bits of a finite value with |v| in [2^-3, 2^-1): sign and mantissa random.
uint16_t randomHalf(std::mt19937& rng) {
  const uint16_t r = static_cast<uint16_t>(rng());
  return static_cast<uint16_t>((r & 0x83FF) | 0x3000 | ((r >> 4) & 0x0400));
}

void putHalf(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// A random W [n, k] in `format`, every value finite.
HostQuantizedMatrix randomMatrix(QuantFormat format, int32_t group, int64_t n, int64_t k,
                                 uint32_t seed) {
  std::mt19937 rng(seed);
  HostQuantizedMatrix m{.format = format, .group = group, .n = n, .k = k};
  m.data.resize(static_cast<size_t>(n * dataRowBytes(format, k, group)));
  m.scales.resize(static_cast<size_t>(n * scaleRowBytes(format, k, group)));
  m.zeros.resize(static_cast<size_t>(n * zeroRowBytes(format, k, group)));
  for (auto& b : m.data) b = static_cast<uint8_t>(rng());
  if (format == QuantFormat::kInt4) {
    for (size_t i = 0; i < m.scales.size(); i += 2) putHalf(&m.scales[i], randomHalf(rng));
    for (auto& z : m.zeros) z = static_cast<uint8_t>(rng() % 16);
  } else if (format == QuantFormat::kFp8E4M3) {
    for (auto& b : m.data) {
      if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN bytes
    }
    std::uniform_real_distribution<float> d(-0.02f, 0.02f);
    for (size_t i = 0; i < m.scales.size(); i += 4) {
      const float s = d(rng);
      std::memcpy(&m.scales[i], &s, 4);
    }
  } else {
    const int64_t blockBytes = ggufBlockBytes(format);
    for (size_t at = 0; at < m.data.size(); at += static_cast<size_t>(blockBytes)) {
      if (format == QuantFormat::kGgufQ6_K) {
        putHalf(&m.data[at + 208], randomHalf(rng));
        continue;
      }
      putHalf(&m.data[at], randomHalf(rng));
      if (format != QuantFormat::kGgufQ8_0 && format != QuantFormat::kGgufQ4_0) {
        putHalf(&m.data[at + 2], randomHalf(rng));
      }
    }
  }
  return m;
}

std::vector<float> dequantizeAll(const HostQuantizedMatrix& m) {
  std::vector<float> w(static_cast<size_t>(m.n * m.k));
  for (int64_t r = 0; r < m.n; ++r) {
    dequantizeRow(m.view(), m.k, r, std::span<float>(w.data() + r * m.k, static_cast<size_t>(m.k)));
  }
  return w;
}

struct Case {
  QuantFormat format;
  int32_t group;
  int32_t n, k;
};

std::vector<Case> cases() {
  return {
      {QuantFormat::kInt4, 32, 40, 96},       {QuantFormat::kInt4, 64, 33, 128},
      {QuantFormat::kInt4, 128, 17, 256},     {QuantFormat::kFp8E4M3, 128, 35, 200},
      {QuantFormat::kFp8E4M3, 128, 8, 128},   {QuantFormat::kFp8E4M3, 72, 9, 72},
      {QuantFormat::kGgufQ8_0, 32, 37, 96},   {QuantFormat::kGgufQ4_0, 32, 33, 64},
      {QuantFormat::kGgufQ4_1, 32, 34, 160},  {QuantFormat::kGgufQ4_K, 256, 36, 256},
      {QuantFormat::kGgufQ5_K, 256, 31, 512}, {QuantFormat::kGgufQ6_K, 256, 33, 256},
  };
}

// y = x · dequant(W)^T + bias for f32 x, checked three ways: the poison is gone everywhere, each
// output is within f32 summation error of a double loop, and each equals the dense fp32 path on
// the dequantized W bit for bit (the quantized path only supplies W's values).
TEST(LinearQuantized, EveryFormatMatchesDequantizedDenseProduct) {
  uint32_t seed = 1;
  for (const Case& c : cases()) {
    for (int32_t m : {1, 3, 17}) {
      SCOPED_TRACE(::testing::Message() << quantFormatName(c.format) << " group " << c.group
                                        << " n " << c.n << " k " << c.k << " m " << m);
      const HostQuantizedMatrix wq = randomMatrix(c.format, c.group, c.n, c.k, ++seed);
      const std::vector<float> wf = dequantizeAll(wq);
      std::mt19937 rng(seed * 7);
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(m) * c.k), bias(static_cast<size_t>(c.n));
      for (auto& v : x) v = d(rng);
      for (auto& v : bias) v = d(rng);
      std::vector<float> y = test::poisoned<float>(static_cast<size_t>(m) * c.n);
      kernel::LinearParams p{.x = x.data(),
                             .bias = bias.data(),
                             .y = y.data(),
                             .m = m,
                             .n = c.n,
                             .k = c.k,
                             .dtype = DType::kF32,
                             .outDtype = DType::kF32,
                             .quantized = wq.view()};
      ref::linear(p);
      std::vector<float> dense = test::poisoned<float>(y.size());
      kernel::LinearParams pd = p;
      pd.quantized.reset();
      pd.w = wf.data();
      pd.y = dense.data();
      ref::linear(pd);
      for (int32_t i = 0; i < m; ++i) {
        for (int32_t j = 0; j < c.n; ++j) {
          double want = bias[static_cast<size_t>(j)], mag = std::fabs(want);
          for (int32_t kk = 0; kk < c.k; ++kk) {
            const double t = double{x[static_cast<size_t>(i) * c.k + kk]} *
                             wf[static_cast<size_t>(j) * c.k + kk];
            want += t;
            mag += std::fabs(t);
          }
          const float got = y[static_cast<size_t>(i) * c.n + j];
          ASSERT_TRUE(std::isfinite(got)) << i << " " << j;
          // f32 error bound of 8-lane sums of rounded products: (k / 8 + 4) units of 2^-23 * mag.
          ASSERT_NEAR(got, want, 1.2e-7 * (c.k / 8 + 4) * mag) << i << " " << j;
          uint32_t a, b;
          std::memcpy(&a, &got, 4);
          std::memcpy(&b, &dense[static_cast<size_t>(i) * c.n + j], 4);
          ASSERT_EQ(a, b) << i << " " << j;
        }
      }
    }
  }
}

// bf16 activations and output: y is the f32 product rounded once to bf16, as for a dense W.
TEST(LinearQuantized, Bf16ActivationsRoundOnceLikeTheDensePath) {
  const HostQuantizedMatrix wq = randomMatrix(QuantFormat::kGgufQ4_K, 256, 19, 256, 99);
  const std::vector<float> wf = dequantizeAll(wq);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  constexpr int32_t kM = 3;
  std::vector<bf16> x(static_cast<size_t>(kM) * wq.k), bias(static_cast<size_t>(wq.n));
  std::vector<float> xf(x.size()), biasF(bias.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = to_float(x[i] = to_bf16(d(rng)));
  for (size_t i = 0; i < bias.size(); ++i) biasF[i] = to_float(bias[i] = to_bf16(d(rng)));
  std::vector<bf16> y = test::poisoned<bf16>(static_cast<size_t>(kM) * wq.n);
  ref::linear({.x = x.data(),
               .bias = bias.data(),
               .y = y.data(),
               .m = kM,
               .n = static_cast<int32_t>(wq.n),
               .k = static_cast<int32_t>(wq.k),
               .dtype = DType::kBF16,
               .outDtype = DType::kBF16,
               .quantized = wq.view()});
  std::vector<float> yf = test::poisoned<float>(y.size());
  ref::linear({.x = xf.data(),
               .w = wf.data(),
               .bias = biasF.data(),
               .y = yf.data(),
               .m = kM,
               .n = static_cast<int32_t>(wq.n),
               .k = static_cast<int32_t>(wq.k),
               .dtype = DType::kF32,
               .outDtype = DType::kF32});
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i].bits, to_bf16(yf[i]).bits) << i;
}

// The fused RMSNorm and residual add compose on a quantized W as on a dense one.
TEST(LinearQuantized, FusedNormAndAccumulateEqualTheDensePath) {
  const HostQuantizedMatrix wq = randomMatrix(QuantFormat::kInt4, 32, 24, 64, 7);
  const std::vector<float> wf = dequantizeAll(wq);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  constexpr int32_t kM = 2;
  std::vector<float> x(static_cast<size_t>(kM) * wq.k), norm(static_cast<size_t>(wq.k));
  std::vector<float> residual(static_cast<size_t>(kM) * wq.n);
  for (auto& v : x) v = d(rng);
  for (auto& v : norm) v = d(rng);
  for (auto& v : residual) v = d(rng);
  std::vector<float> yq = residual, yd = residual;
  kernel::LinearParams p{.x = x.data(),
                         .y = yq.data(),
                         .m = kM,
                         .n = static_cast<int32_t>(wq.n),
                         .k = static_cast<int32_t>(wq.k),
                         .dtype = DType::kF32,
                         .outDtype = DType::kF32,
                         .quantized = wq.view(),
                         .normWeight = norm.data(),
                         .accumulate = true};
  ref::linear(p);
  p.quantized.reset();
  p.w = wf.data();
  p.y = yd.data();
  ref::linear(p);
  EXPECT_EQ(yq, yd);
  EXPECT_NE(yq, residual);
}

TEST(LinearQuantized, Validation) {
  const HostQuantizedMatrix wq = randomMatrix(QuantFormat::kInt4, 32, 4, 64, 3);
  std::vector<float> x(64), y(4);
  auto params = [&] {
    return kernel::LinearParams{.x = x.data(),
                                .y = y.data(),
                                .m = 1,
                                .n = 4,
                                .k = 64,
                                .dtype = DType::kF32,
                                .outDtype = DType::kF32,
                                .quantized = wq.view()};
  };
  EXPECT_NO_THROW(ref::linear(params()));  // w may be null when W is quantized
  test::expectInvalidArgument(
      [&] {
        auto p = params();
        p.quantized->data = nullptr;
        ref::linear(p);
      },
      "quantized.data");
  test::expectInvalidArgument(
      [&] {
        auto p = params();
        p.quantized->scales = nullptr;
        ref::linear(p);
      },
      "quantized.scales");
  test::expectInvalidArgument(
      [&] {
        auto p = params();
        p.quantized->zeros = nullptr;
        ref::linear(p);
      },
      "quantized.zeros");
  test::expectInvalidArgument(
      [&] {
        auto p = params();
        p.quantized->group = 48;
        ref::linear(p);
      },
      "quantized.group");
  test::expectInvalidArgument(
      [&] {
        auto p = params();
        p.k = 48;  // not a multiple of the group
        ref::linear(p);
      },
      "quantized.group");
  test::expectInvalidArgument(
      [&] {
        auto p = params();
        p.quantized->format = static_cast<QuantFormat>(200);
        ref::linear(p);
      },
      "quantized.format");
  // fp8 and GGUF formats have no zero points: a null zeros is fine there.
  const HostQuantizedMatrix q8 = randomMatrix(QuantFormat::kGgufQ8_0, 32, 4, 64, 4);
  auto p = params();
  p.quantized = q8.view();
  EXPECT_EQ(p.quantized->zeros, nullptr);
  EXPECT_NO_THROW(ref::linear(p));
  p.quantized->group = 64;
  test::expectInvalidArgument([&] { ref::linear(p); }, "quantized.group");
}

}  // namespace
}  // namespace es
