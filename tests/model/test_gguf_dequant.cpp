// GGUF dequantisation against hand-computed blocks (known d / m / scales / quants -> expected
// floats), including the K-quant super-blocks.
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
    EXPECT_EQ(out[j], static_cast<float>((j - 8) * 2)) << j;            // low nibble -> element j
    EXPECT_EQ(out[j + 16], static_cast<float>((15 - j - 8) * 2)) << j;  // high nibble -> j + 16
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

// K-quant blocks are packed here from the layout as documented (which element each bit belongs
// to), the opposite direction from the dequantiser's loops; the expected values are exact in
// f32 (dyadic d, small integer scales), so they hold whatever the rounding order.

// Q4_K / Q5_K scale bytes from 8 six-bit scales and mins: sub-blocks 0-3 in the low 6 bits of
// bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 split into a low nibble in bytes 8-11
// (scale low, min high) and their top 2 bits in the top bits of bytes 0-3 (scale) and 4-7 (min).
std::vector<uint8_t> packKScales(const int (&sc)[8], const int (&m)[8]) {
  std::vector<uint8_t> b(12);
  for (int j = 0; j < 4; ++j) {
    b[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    b[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
  return b;
}

// The 128 nibble bytes of Q4_K / Q5_K: byte i holds element (i / 32) * 64 + i % 32 in its low
// nibble and the element 32 further in its high nibble.
std::vector<uint8_t> packKNibbles(const std::vector<int>& q) {
  std::vector<uint8_t> b(128);
  for (int i = 0; i < 128; ++i) {
    const int e = (i / 32) * 64 + i % 32;
    b[i] = static_cast<uint8_t>((q[e] & 0x0F) | ((q[e + 32] & 0x0F) << 4));
  }
  return b;
}

struct KBlock {
  uint16_t d_bits, dmin_bits;
  float d, dmin;
  int sc[8], m[8];
  std::vector<int> q;  // 256 quants
};

KBlock kBlock(int seed, int qmax) {
  KBlock k{};
  k.d_bits = seed == 0 ? 0x3800 : 0x4000;  // 0.5 or 2
  k.d = seed == 0 ? 0.5f : 2.0f;
  k.dmin_bits = seed == 0 ? 0x3400 : 0x3C00;  // 0.25 or 1
  k.dmin = seed == 0 ? 0.25f : 1.0f;
  // Scales and mins across the whole 6-bit range, so that sub-blocks 4-7 need their top bits.
  const int sc[8] = {1, 7, 15, 16, 33, 47, 62, 63};
  const int m[8] = {2, 0, 63, 31, 17, 48, 5, 40};
  for (int j = 0; j < 8; ++j) {
    k.sc[j] = sc[(j + seed) % 8];
    k.m[j] = m[(j + 3 * seed) % 8];
  }
  for (int e = 0; e < 256; ++e) k.q.push_back((e * 7 + 3 + seed) % (qmax + 1));
  return k;
}

TEST(GgufDequant, Q4_K) {
  std::vector<uint8_t> b;
  KBlock blocks[2] = {kBlock(0, 15), kBlock(1, 15)};
  for (const KBlock& k : blocks) {
    putHalf(b, k.d_bits);
    putHalf(b, k.dmin_bits);
    const auto scales = packKScales(k.sc, k.m);
    b.insert(b.end(), scales.begin(), scales.end());
    const auto qs = packKNibbles(k.q);
    b.insert(b.end(), qs.begin(), qs.end());
  }
  ASSERT_EQ(b.size(), 2u * 144);
  const auto out = run(GgmlType::kQ4_K, b, 512);
  for (int blk = 0; blk < 2; ++blk) {
    const KBlock& k = blocks[blk];
    for (int e = 0; e < 256; ++e) {
      const int s = e / 32;  // sub-block of 32 elements
      EXPECT_EQ(out[256 * blk + e],
                k.d * static_cast<float>(k.sc[s] * k.q[e]) - k.dmin * static_cast<float>(k.m[s]))
          << blk << " " << e;
    }
  }
  // By hand: element 0 is q 3, scale 1, min 2 -> 0.5 * 3 - 0.25 * 2 = 1. Element 255 (sub-block
  // 7: scale 63, min 40) has q (255 * 7 + 3) % 16 = 12 -> 0.5 * 63 * 12 - 0.25 * 40 = 368.
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[255], 368.0f);
  // Element 160 (sub-block 5: scale 47, min 48; q = 1123 % 16 = 3) -> 70.5 - 12 = 58.5.
  EXPECT_EQ(out[160], 58.5f);
}

TEST(GgufDequant, Q5_K) {
  std::vector<uint8_t> b;
  KBlock blocks[2] = {kBlock(0, 31), kBlock(1, 31)};
  for (const KBlock& k : blocks) {
    putHalf(b, k.d_bits);
    putHalf(b, k.dmin_bits);
    const auto scales = packKScales(k.sc, k.m);
    b.insert(b.end(), scales.begin(), scales.end());
    // Fifth bits: element e = 64c + 32h + l has its bit in qh[l] at bit 2c + h.
    std::vector<uint8_t> qh(32, 0);
    for (int e = 0; e < 256; ++e) {
      const int c = e / 64, h = (e / 32) % 2, l = e % 32;
      qh[l] |= static_cast<uint8_t>(((k.q[e] >> 4) & 1) << (2 * c + h));
    }
    b.insert(b.end(), qh.begin(), qh.end());
    const auto qs = packKNibbles(k.q);
    b.insert(b.end(), qs.begin(), qs.end());
  }
  ASSERT_EQ(b.size(), 2u * 176);
  const auto out = run(GgmlType::kQ5_K, b, 512);
  for (int blk = 0; blk < 2; ++blk) {
    const KBlock& k = blocks[blk];
    for (int e = 0; e < 256; ++e) {
      const int s = e / 32;
      EXPECT_EQ(out[256 * blk + e],
                k.d * static_cast<float>(k.sc[s] * k.q[e]) - k.dmin * static_cast<float>(k.m[s]))
          << blk << " " << e;
    }
  }
  // By hand: element 255 has q (1785 + 3) % 32 = 28 (fifth bit set) in sub-block 7 (63, 40):
  // 0.5 * 63 * 28 - 0.25 * 40 = 872. Element 2: q 17, sub-block 0 (1, 2) -> 8.5 - 0.5 = 8.
  EXPECT_EQ(out[255], 872.0f);
  EXPECT_EQ(out[2], 8.0f);
}

TEST(GgufDequant, Q6_K) {
  // Two super-blocks. Block b: d = 0.5 (b = 0) or -0.25 (b = 1), the 16 int8 scales
  // 9g - 70 (g = 0..15, negatives included), 6-bit quants q(e) = (37e + 11 + b) % 64.
  auto qOf = [](int b, int e) { return (37 * e + 11 + b) % 64; };
  std::vector<uint8_t> bytes;
  for (int blk = 0; blk < 2; ++blk) {
    // ql byte i: low nibble = element (i / 64) * 128 + i % 64, high nibble = that element + 64.
    std::vector<uint8_t> ql(128);
    for (int i = 0; i < 128; ++i) {
      const int e = (i / 64) * 128 + i % 64;
      ql[i] = static_cast<uint8_t>((qOf(blk, e) & 0x0F) | ((qOf(blk, e + 64) & 0x0F) << 4));
    }
    // qh byte i: bits 2k, 2k + 1 = the top 2 bits of element (i / 32) * 128 + 32k + i % 32.
    std::vector<uint8_t> qh(64, 0);
    for (int i = 0; i < 64; ++i) {
      for (int k = 0; k < 4; ++k) {
        qh[i] |= static_cast<uint8_t>((qOf(blk, (i / 32) * 128 + 32 * k + i % 32) >> 4) << (2 * k));
      }
    }
    bytes.insert(bytes.end(), ql.begin(), ql.end());
    bytes.insert(bytes.end(), qh.begin(), qh.end());
    for (int g = 0; g < 16; ++g)
      bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(9 * g - 70)));
    putHalf(bytes, blk == 0 ? 0x3800 : 0xB400);
  }
  ASSERT_EQ(bytes.size(), 2u * 210);
  const auto out = run(GgmlType::kQ6_K, bytes, 512);
  for (int blk = 0; blk < 2; ++blk) {
    const float d = blk == 0 ? 0.5f : -0.25f;
    for (int e = 0; e < 256; ++e) {
      const int scale = 9 * (e / 16) - 70;  // one scale per 16 elements
      EXPECT_EQ(out[256 * blk + e], d * static_cast<float>(scale * (qOf(blk, e) - 32)))
          << blk << " " << e;
    }
  }
  // By hand: element 0: q 11, scale -70 -> 0.5 * -70 * (11 - 32) = 735. Element 255: q
  // (9435 + 11) % 64 = 38, scale 65 -> 0.5 * 65 * 6 = 195. Second block, element 100: q
  // (3700 + 12) % 64 = 0, scale 9 * 6 - 70 = -16 -> -0.25 * -16 * -32 = -128.
  EXPECT_EQ(out[0], 735.0f);
  EXPECT_EQ(out[255], 195.0f);
  EXPECT_EQ(out[256 + 100], -128.0f);
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
  std::vector<uint8_t> q3(110);  // Q3_K: a known layout, not dequantised
  try {
    dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ3_K), q3, out, "blk.0.ffn_down.weight");
    FAIL();
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blk.0.ffn_down.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q3_K"), std::string::npos) << msg;
  }
  EXPECT_THROW(dequantizeToF32(77, q3, out, "x"), FormatError);
  // K-quants: whole super-blocks of 256 elements, 210 bytes each for Q6_K.
  std::vector<uint8_t> q6(209);
  EXPECT_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ6_K), q6, out, "x"), FormatError);
  std::vector<float> out128(128);
  std::vector<uint8_t> q4k(72);
  EXPECT_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ4_K), q4k, out128, "x"),
               FormatError);
  std::vector<uint8_t> short_q4(19);
  std::vector<float> out32(32);
  EXPECT_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ4_1), short_q4, out32, "x"),
               FormatError);
  std::vector<float> out33(33);
  std::vector<uint8_t> q4(40);
  EXPECT_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kQ4_1), q4, out33, "x"),
               FormatError);
  // Empty tensors (null spans) are fine (found by the fuzzer: memcpy on a null pointer).
  EXPECT_NO_THROW(dequantizeToF32(static_cast<uint32_t>(GgmlType::kF32), {}, {}, "empty"));
  EXPECT_TRUE(ggmlTypeDequantizable(static_cast<uint32_t>(GgmlType::kQ4_1)));
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}) {
    EXPECT_TRUE(ggmlTypeDequantizable(static_cast<uint32_t>(t)));
  }
  for (GgmlType t :
       {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ8_K, GgmlType::kQ5_0, GgmlType::kQ8_1}) {
    EXPECT_FALSE(ggmlTypeDequantizable(static_cast<uint32_t>(t)));
  }
}

}  // namespace
}  // namespace es::model
