// The quantized formats' reference values (common/quant_dequant.h): int4 and fp8 rows built by
// hand with values worked out from the format definitions (quant_format.h), and every GGUF kind
// read row by row equal to the GGUF dequantizer's values of that row's bytes alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/quant_dequant.h"
#include "model/gguf_dequant.h"
#include "support/test_util.h"

namespace es {
namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(QuantDequant, Fp8E4M3HandPickedBytes) {
  // s eeee mmm, bias 7.
  EXPECT_EQ(bitsOf(fp8E4M3ToFloat(0x00)), bitsOf(0.0f));
  EXPECT_EQ(bitsOf(fp8E4M3ToFloat(0x80)), bitsOf(-0.0f));  // negative zero keeps its sign
  EXPECT_EQ(fp8E4M3ToFloat(0x38), 1.0f);                   // e = 7, m = 0
  EXPECT_EQ(fp8E4M3ToFloat(0x3C), 1.5f);                   // e = 7, m = 4
  EXPECT_EQ(fp8E4M3ToFloat(0x40), 2.0f);                   // e = 8
  EXPECT_EQ(fp8E4M3ToFloat(0xC0), -2.0f);
  EXPECT_EQ(fp8E4M3ToFloat(0x30), 0.5f);          // e = 6
  EXPECT_EQ(fp8E4M3ToFloat(0x08), 0.015625f);     // smallest normal: 2^-6
  EXPECT_EQ(fp8E4M3ToFloat(0x01), 0.001953125f);  // smallest subnormal: 1/8 * 2^-6 = 2^-9
  EXPECT_EQ(fp8E4M3ToFloat(0x07), 0.013671875f);  // largest subnormal: 7/8 * 2^-6
  EXPECT_EQ(fp8E4M3ToFloat(0x84), -0.0078125f);   // -4/8 * 2^-6
  EXPECT_EQ(fp8E4M3ToFloat(0x77), 240.0f);        // e = 14, m = 7: 1.875 * 128
  EXPECT_EQ(fp8E4M3ToFloat(0x78), 256.0f);        // e = 15, m = 0 is a normal value
  EXPECT_EQ(fp8E4M3ToFloat(0x7E), 448.0f);        // the largest: 1.75 * 2^8
  EXPECT_EQ(fp8E4M3ToFloat(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(fp8E4M3ToFloat(0x7F)));  // the only NaNs, no infinities
  EXPECT_TRUE(std::isnan(fp8E4M3ToFloat(0xFF)));
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const float v = fp8E4M3ToFloat(static_cast<uint8_t>(b));
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    EXPECT_TRUE(std::isfinite(v)) << b;
    EXPECT_LE(std::fabs(v), 448.0f) << b;
    // The sign bit only flips the sign.
    EXPECT_EQ(bitsOf(v) ^ 0x80000000u, bitsOf(fp8E4M3ToFloat(static_cast<uint8_t>(b ^ 0x80)))) << b;
  }
  EXPECT_EQ(nans, 2);
}

TEST(QuantDequant, Fp8E4M3MonotoneOverPositiveBytes) {
  // Positive bytes 0x00 .. 0x7E are the values in increasing order, each step one mantissa ulp.
  for (int b = 1; b <= 0x7E; ++b) {
    EXPECT_GT(fp8E4M3ToFloat(static_cast<uint8_t>(b)), fp8E4M3ToFloat(static_cast<uint8_t>(b - 1)))
        << b;
  }
}

// Two rows of an int4 W [2, 64], group 32: row 1 holds every nibble value in both orders, with
// zero points 3 and 12 (q - z negative and positive) and scales 0.5 and -2.
TEST(QuantDequant, Int4HandMadeRows) {
  constexpr int64_t kK = 64, kGroup = 32;
  std::vector<uint8_t> data(2 * kK / 2, 0x00);
  std::vector<uint8_t> scales(2 * 2 * 2), zeros(2 * 2);
  // Row 0: every nibble 0xF, scales 1 (0x3C00), zeros 0 and 15: values 15 and 0.
  for (int j = 0; j < 32; ++j) data[j] = 0xFF;
  scales[0] = 0x00, scales[1] = 0x3C, scales[2] = 0x00, scales[3] = 0x3C;
  zeros[0] = 0, zeros[1] = 15;
  // Row 1: k = 2j is nibble j % 16 (low), k = 2j + 1 is nibble 15 - j % 16 (high).
  for (int j = 0; j < 32; ++j) {
    data[32 + j] = static_cast<uint8_t>((j % 16) | ((15 - j % 16) << 4));
  }
  scales[4] = 0x00, scales[5] = 0x38;  // 0.5
  scales[6] = 0x00, scales[7] = 0xC0;  // -2
  zeros[2] = 3, zeros[3] = 12;
  const QuantizedWeightView w{.format = QuantFormat::kInt4,
                              .data = data.data(),
                              .scales = scales.data(),
                              .zeros = zeros.data(),
                              .group = kGroup};
  ASSERT_EQ(quantLayoutRejection(w.format, kK, kGroup), nullptr);
  std::vector<float> out = test::poisoned<float>(kK);
  dequantizeRow(w, kK, 0, out);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 15.0f) << i;
  for (int i = 32; i < 64; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  out = test::poisoned<float>(kK);
  dequantizeRow(w, kK, 1, out);
  // Group 0 (k < 32): z = 3, s = 0.5.
  EXPECT_EQ(out[0], -1.5f);   // q 0: (0 - 3) * 0.5
  EXPECT_EQ(out[1], 6.0f);    // q 15: (15 - 3) * 0.5
  EXPECT_EQ(out[2], -1.0f);   // q 1
  EXPECT_EQ(out[3], 5.5f);    // q 14
  EXPECT_EQ(out[6], 0.0f);    // q 3 = z
  EXPECT_EQ(out[30], 6.0f);   // q 15 (j = 15 low)
  EXPECT_EQ(out[31], -1.5f);  // q 0
  // Group 1 (k >= 32): z = 12, s = -2.
  EXPECT_EQ(out[32], 24.0f);  // q 0: (0 - 12) * -2
  EXPECT_EQ(out[33], -6.0f);  // q 15: (15 - 12) * -2
  EXPECT_EQ(out[56], -0.0f);  // q 12 = z
  EXPECT_EQ(out[62], -6.0f);  // q 15
  EXPECT_EQ(out[63], 24.0f);  // q 0
  for (int i = 0; i < kK; ++i) {
    const int j = i / 2, nibble = (i % 2 == 0) ? j % 16 : 15 - j % 16;
    const float expected = i < 32 ? (nibble - 3) * 0.5f : (nibble - 12) * -2.0f;
    EXPECT_EQ(out[i], expected) << i;
  }
}

// fp8 with group 128 on a ragged k = 200 (the last group holds 72) and per-channel (group = k).
TEST(QuantDequant, Fp8RowsWithBlockAndChannelScales) {
  constexpr int64_t kK = 200;
  std::vector<uint8_t> data(2 * kK);
  for (int64_t i = 0; i < 2 * kK; ++i) data[static_cast<size_t>(i)] = 0x38;  // 1.0
  data[0] = 0x7E;                                                            // 448
  data[127] = 0x01;                                                          // 2^-9
  data[128] = 0xC0;                                                          // -2
  data[199] = 0x7F;                                                          // NaN
  data[kK + 5] = 0x3C;                                                       // 1.5
  const std::vector<float> blockScales = {0.5f, 3.0f, 0.25f, -1.0f};         // [2, 2]
  QuantizedWeightView w{.format = QuantFormat::kFp8E4M3,
                        .data = data.data(),
                        .scales = blockScales.data(),
                        .group = 128};
  ASSERT_EQ(quantLayoutRejection(w.format, kK, 128), nullptr);
  std::vector<float> out = test::poisoned<float>(kK);
  dequantizeRow(w, kK, 0, out);
  EXPECT_EQ(out[0], 224.0f);           // 448 * 0.5
  EXPECT_EQ(out[1], 0.5f);             // 1 * 0.5
  EXPECT_EQ(out[127], 0.0009765625f);  // 2^-9 * 0.5
  EXPECT_EQ(out[128], -6.0f);          // -2 * 3
  EXPECT_EQ(out[198], 3.0f);           // last group, scale 3
  EXPECT_TRUE(std::isnan(out[199]));
  out = test::poisoned<float>(kK);
  dequantizeRow(w, kK, 1, out);
  EXPECT_EQ(out[5], 0.375f);  // 1.5 * 0.25
  EXPECT_EQ(out[127], 0.25f);
  EXPECT_EQ(out[128], -1.0f);
  EXPECT_EQ(out[199], -1.0f);
  // Per channel: one scale per row.
  const std::vector<float> channelScales = {2.0f, -0.5f};
  w.scales = channelScales.data();
  w.group = static_cast<int32_t>(kK);
  ASSERT_EQ(quantLayoutRejection(w.format, kK, w.group), nullptr);
  out = test::poisoned<float>(kK);
  dequantizeRow(w, kK, 1, out);
  EXPECT_EQ(out[5], -0.75f);
  EXPECT_EQ(out[199], -0.5f);
  out = test::poisoned<float>(kK);
  dequantizeRow(w, kK, 0, out);
  EXPECT_EQ(out[0], 896.0f);
  EXPECT_EQ(out[128], -4.0f);
  EXPECT_EQ(out[198], 2.0f);
}

// Random GGUF blocks (f16 scales kept finite), a W of 3 rows of 2 blocks: row r read through
// dequantizeRow equals the GGUF dequantizer on row r's bytes alone, bit for bit.
TEST(QuantDequant, GgufRowsEqualTheGgufDequantizer) {
  std::mt19937 rng(42);
  for (QuantFormat f : {QuantFormat::kGgufQ8_0, QuantFormat::kGgufQ4_0, QuantFormat::kGgufQ4_1,
                        QuantFormat::kGgufQ4_K, QuantFormat::kGgufQ5_K, QuantFormat::kGgufQ6_K}) {
    SCOPED_TRACE(std::string(quantFormatName(f)));
    const int64_t k = 2 * ggufBlockElems(f), n = 3;
    const int64_t rowBytes = dataRowBytes(f, k, ggufBlockElems(f));
    std::vector<uint8_t> data(static_cast<size_t>(n * rowBytes));
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    // Small finite f16 values where the block keeps its f16 scales: exponent bits below 0x7C00.
    auto finiteHalf = [&](size_t at) {
      data[at + 1] = static_cast<uint8_t>((data[at + 1] & 0x83) | 0x30);  // |x| in [2^-3, 2^1)
    };
    for (int64_t b = 0; b < n * k / ggufBlockElems(f); ++b) {
      const size_t at = static_cast<size_t>(b * ggufBlockBytes(f));
      if (f == QuantFormat::kGgufQ6_K) {
        finiteHalf(at + 208);
      } else {
        finiteHalf(at);
        if (f != QuantFormat::kGgufQ8_0 && f != QuantFormat::kGgufQ4_0) finiteHalf(at + 2);
      }
    }
    const QuantizedWeightView w{.format = f, .data = data.data(), .group = ggufBlockElems(f)};
    ASSERT_EQ(quantLayoutRejection(f, k, w.group), nullptr);
    for (int64_t r = 0; r < n; ++r) {
      std::vector<float> got = test::poisoned<float>(static_cast<size_t>(k));
      std::vector<float> want = test::poisoned<float>(static_cast<size_t>(k));
      dequantizeRow(w, k, r, got);
      model::dequantizeToF32(
          ggmlTypeOf(f),
          std::span<const uint8_t>(data.data() + r * rowBytes, static_cast<size_t>(rowBytes)), want,
          "row");
      for (int64_t i = 0; i < k; ++i) {
        ASSERT_TRUE(std::isfinite(got[static_cast<size_t>(i)])) << r << " " << i;
        ASSERT_EQ(bitsOf(got[static_cast<size_t>(i)]), bitsOf(want[static_cast<size_t>(i)]))
            << r << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace es
