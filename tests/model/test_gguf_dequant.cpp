// GGUF dequantisation against hand-computed blocks (known d / m / quants -> expected floats).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/errors.h"
#include "model/gguf_dequant.h"

namespace es::model {
namespace {

void putHalf(std::vector<uint8_t>& b, uint16_t bits) {
  b.push_back(static_cast<uint8_t>(bits & 0xFF));
  b.push_back(static_cast<uint8_t>(bits >> 8));
}

std::vector<float> run(GgmlType type, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, -12345.0f);
  dequantizeToF32(static_cast<uint32_t>(type), bytes, out, "t");
  return out;
}

TEST(GgufDequant, Q8_0) {
  std::vector<uint8_t> b;
  putHalf(b, 0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128)));
  putHalf(b, 0xC000);  // second block: d = -2
  for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  const auto out = run(GgmlType::kQ8_0, b, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(out[j], 0.5f * static_cast<float>(j * 8 - 128)) << j;
    EXPECT_EQ(out[32 + j], -2.0f * static_cast<float>(j - 16)) << j;
  }
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[31], 60.0f);  // 0.5 * 120
}

TEST(GgufDequant, Q4_0) {
  std::vector<uint8_t> b;
  putHalf(b, 0x4000);  // d = 2
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  const auto out = run(GgmlType::kQ4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], static_cast<float>((j - 8) * 2)) << j;             // low nibble -> element j
    EXPECT_EQ(out[j + 16], static_cast<float>((15 - j - 8) * 2)) << j;   // high nibble -> j + 16
  }
  EXPECT_EQ(out[0], -16.0f);
  EXPECT_EQ(out[16], 14.0f);
}

TEST(GgufDequant, Q4_1) {
  std::vector<uint8_t> b;
  putHalf(b, 0x3400);  // d = 0.25
  putHalf(b, 0xBC00);  // m = -1
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  putHalf(b, 0x3C00);  // second block: d = 1, m = 0.5 (0x3800)
  putHalf(b, 0x3800);
  for (int j = 0; j < 16; ++j) b.push_back(0xF0);  // low 0, high 15
  const auto out = run(GgmlType::kQ4_1, b, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * static_cast<float>(j) - 1.0f) << j;
    EXPECT_EQ(out[j + 16], 0.25f * static_cast<float>(15 - j) - 1.0f) << j;
    EXPECT_EQ(out[32 + j], 0.5f);
    EXPECT_EQ(out[48 + j], 15.5f);
  }
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[15], 2.75f);
  EXPECT_EQ(out[16], 2.75f);
}

TEST(GgufDequant, PlainTypes) {
  std::vector<uint8_t> h;
  for (uint16_t bits : {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3555}) putHalf(h, bits);
  const auto f16 = run(GgmlType::kF16, h, 5);
  EXPECT_EQ(f16[0], 1.0f);
  EXPECT_EQ(f16[1], -2.0f);
  EXPECT_EQ(f16[2], 65504.0f);
  EXPECT_EQ(f16[3], std::ldexp(1.0f, -24));
  EXPECT_FLOAT_EQ(f16[4], 0.333251953125f);

  std::vector<uint8_t> bf;
  for (uint16_t bits : {0x3F80, 0xC040, 0x7F80}) putHalf(bf, bits);
  const auto b16 = run(GgmlType::kBF16, bf, 3);
  EXPECT_EQ(b16[0], 1.0f);
  EXPECT_EQ(b16[1], -3.0f);
  EXPECT_TRUE(std::isinf(b16[2]));

  const std::vector<float> values = {1.5f, -0.0f, 3.25e-8f};
  std::vector<uint8_t> f(12);
  std::memcpy(f.data(), values.data(), 12);
  EXPECT_EQ(run(GgmlType::kF32, f, 3), values);
}

TEST(GgufDequant, ConvertRounds) {
  const std::vector<float> src = {1.0f, 1.00390625f /* 1 + 2^-8: tie, rounds to even */, -2.5f};
  std::vector<bf16> b(3);
  convertF32(src, b);
  EXPECT_EQ(b[0].bits, 0x3F80);
  EXPECT_EQ(b[1].bits, 0x3F80);
  EXPECT_EQ(to_float(b[2]), -2.5f);
  std::vector<fp16> h(3);
  convertF32(src, h);
  EXPECT_EQ(h[0].bits, 0x3C00);
  std::vector<bf16> wrong(2);
  EXPECT_THROW(convertF32(src, wrong), InvalidArgument);
}

TEST(GgufDequant, ErrorsNameTensorAndType) {
  std::vector<float> out(256);
  std::vector<uint8_t> q6(210);
  try {
    dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ6_K), q6, out, "blk.0.ffn_down.weight");
    FAIL();
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.ffn_down.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q6_K"), std::string::npos) << msg;
  }
  EXPECT_THROW(dequantizeToF32(77, q6, out, "x"), FormatError);
  std::vector<uint8_t> short_q4(19);
  std::vector<float> out32(32);
  EXPECT_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ4_1), short_q4, out32, "x"), FormatError);
  std::vector<float> out33(33);
  std::vector<uint8_t> q4(40);
  EXPECT_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ4_1), q4, out33, "x"), FormatError);
  // Empty tensors (null spans) are fine (found by the fuzzer: memcpy on a null pointer).
  EXPECT_NO_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kF32), {}, {}, "empty"));
  EXPECT_TRUE(ggmlTypeDequantizable(static_cast<uint32_t>(GgmlType::kQ4_1)));
  EXPECT_FALSE(ggmlTypeDequantizable(static_cast<uint32_t>(GgmlType::kQ4_K)));
}

}  // namespace
}  // namespace es::model
