#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/dtype.h"
#include "common/dtype_convert.h"
#include "common/errors.h"

namespace es {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Independent reference for fp16 rounding: enumerate every finite half, pick the nearest
// (ties to even mantissa), compare. Exhaustive over a dense sample of floats.
float half_value(uint16_t h) { return to_float(fp16{h}); }

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_float(bf16{0x3f80}), 1.0f);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0
  EXPECT_EQ(to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even) -> even
  EXPECT_EQ(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = to_float(bf16{static_cast<uint16_t>(b)});
    if (std::isnan(f)) continue;
    EXPECT_EQ(to_bf16(f).bits, b) << "bf16 bits " << b;
  }
}

TEST(DType, Fp16ExactValuesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_value(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(to_fp16(f))));
      continue;
    }
    ASSERT_EQ(to_fp16(f).bits, h) << "half bits " << h;
  }
  EXPECT_EQ(half_value(0x3c00), 1.0f);
  EXPECT_EQ(half_value(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_value(0x7bff), 65504.0f);
}

TEST(DType, Fp16RoundsToNearestEven) {
  // Midpoints between consecutive positive halves round to the even neighbour; points just
  // off the midpoint round to the nearer one. Covers subnormals, normals and the overflow edge.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = half_value(static_cast<uint16_t>(h));
    const double hi = half_value(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
    const uint32_t even = (h % 2 == 0) ? h : h + 1;
    ASSERT_EQ(to_fp16(mid).bits, even) << "midpoint above half bits " << h;
    ASSERT_EQ(to_fp16(-mid).bits, even | 0x8000u);
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, 1e9f);
    ASSERT_EQ(to_fp16(below).bits, h);
    ASSERT_EQ(to_fp16(above).bits, h + 1);
  }
  EXPECT_EQ(to_fp16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(to_fp16(65520.0f).bits, 0x7c00);  // halfway to the next binade: rounds to inf
  EXPECT_EQ(to_fp16(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie with 0 -> even (0)
  EXPECT_EQ(to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001);
  EXPECT_EQ(bits_of(to_float(to_fp16(-0.0f))), 0x80000000u);
}

// FP8 E4M3 values derived by hand from the OCP definition: (-1)^s * 2^(e - 7) * (1 + m / 8) for
// e > 0, (-1)^s * 2^-6 * m / 8 for e = 0, NaN for S.1111.111 only.
TEST(DType, Fp8E4M3Values) {
  EXPECT_EQ(to_float(fp8e4m3{0x00}), 0.0f);
  EXPECT_EQ(bits_of(to_float(fp8e4m3{0x80})), 0x80000000u);  // -0
  EXPECT_EQ(to_float(fp8e4m3{0x38}), 1.0f);                  // e = 7, m = 0
  EXPECT_EQ(to_float(fp8e4m3{0x3c}), 1.5f);                  // e = 7, m = 4
  EXPECT_EQ(to_float(fp8e4m3{0xc4}), -3.0f);                 // s = 1, e = 8, m = 4
  EXPECT_EQ(to_float(fp8e4m3{0x7e}), 448.0f);                // e = 15, m = 6: the largest
  EXPECT_EQ(to_float(fp8e4m3{0x78}), 256.0f);                // e = 15, m = 0 is finite
  EXPECT_EQ(to_float(fp8e4m3{0x08}), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(to_float(fp8e4m3{0x01}), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(to_float(fp8e4m3{0x07}), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(to_float(fp8e4m3{0x87}), -7 * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(to_float(fp8e4m3{0x7f})));
  EXPECT_TRUE(std::isnan(to_float(fp8e4m3{0xff})));
  // Every other code is finite, and the positive codes increase strictly.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_TRUE(std::isfinite(to_float(fp8e4m3{static_cast<uint8_t>(b)}))) << b;
    EXPECT_EQ(to_float(fp8e4m3{static_cast<uint8_t>(b | 0x80)}),
              -to_float(fp8e4m3{static_cast<uint8_t>(b & 0x7f)}))
        << b;
  }
  for (int b = 1; b < 0x7f; ++b) {
    EXPECT_LT(to_float(fp8e4m3{static_cast<uint8_t>(b - 1)}),
              to_float(fp8e4m3{static_cast<uint8_t>(b)}))
        << b;
  }
}

TEST(DType, Fp8E4M3LoadsAsFloatButIsNotAStoreTarget) {
  const uint8_t bytes[3] = {0x38, 0xc4, 0x7e};
  EXPECT_EQ(loadAsFloat(bytes, DType::kF8E4M3, 0), 1.0f);
  EXPECT_EQ(loadAsFloat(bytes, DType::kF8E4M3, 1), -3.0f);
  EXPECT_EQ(loadAsFloat(bytes, DType::kF8E4M3, 2), 448.0f);
  uint8_t out[1] = {0};
  EXPECT_THROW(storeFromFloat(out, DType::kF8E4M3, 0, 1.0f), InvalidArgument);
  EXPECT_THROW((void)loadAsFloat(bytes, DType::kI32, 0), InvalidArgument);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "f8_e4m3");
  EXPECT_EQ(dtype_of<fp8e4m3>, DType::kF8E4M3);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_size(DType::kI64), 8);
  EXPECT_EQ(dtype_name(DType::kF16), "f16");
  EXPECT_EQ(dtype_of<bf16>, DType::kBF16);
}

}  // namespace
}  // namespace es
