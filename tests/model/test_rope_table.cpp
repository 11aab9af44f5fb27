#include <gtest/gtest.h>

#include <cmath>

#include "model/rope_table.h"
#include "support/test_util.h"

namespace es::model {
namespace {

TEST(RopeTable, DefaultFrequenciesAndLayout) {
  RopeConfig rope;  // default, theta 10000
  const std::vector<float> inv = ropeInverseFrequencies(rope, 4, 2048);
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.01f);  // 10000^(-2/4)
  const std::vector<float> table = buildRopeTable(rope, 4, 2048, 3);
  ASSERT_EQ(table.size(), 12u);
  // Row = position; [cos f0, cos f1, sin f0, sin f1].
  EXPECT_FLOAT_EQ(table[0], 1.0f);
  EXPECT_FLOAT_EQ(table[2], 0.0f);
  EXPECT_NEAR(table[4 + 0], std::cos(1.0), 1e-7);
  EXPECT_NEAR(table[4 + 1], std::cos(0.01), 1e-7);
  EXPECT_NEAR(table[4 + 2], std::sin(1.0), 1e-7);
  EXPECT_NEAR(table[4 + 3], std::sin(0.01), 1e-7);
  EXPECT_NEAR(table[8 + 0], std::cos(2.0), 1e-7);
  EXPECT_NEAR(table[8 + 3], std::sin(0.02), 1e-7);
  EXPECT_EQ(ropeAttentionFactor(rope), 1.0f);
}

TEST(RopeTable, LinearScalingDividesFrequencies) {
  RopeConfig rope;
  rope.type = RopeType::kLinear;
  rope.factor = 4.0;
  const std::vector<float> inv = ropeInverseFrequencies(rope, 4, 2048);
  EXPECT_FLOAT_EQ(inv[0], 0.25f);
  EXPECT_FLOAT_EQ(inv[1], 0.0025f);
}

TEST(RopeTable, Llama3KeepsHighScalesLowSmoothsMedium) {
  // theta 10000, dim 8: inv = 1, 0.1, 0.01, 0.001 -> wavelengths 2pi, 62.8, 628, 6283.
  // old context 1024, low factor 1 -> low wavelen 1024; high factor 4 -> high wavelen 256.
  RopeConfig rope;
  rope.type = RopeType::kLlama3;
  rope.factor = 8.0;
  rope.low_freq_factor = 1.0;
  rope.high_freq_factor = 4.0;
  rope.original_max_position_embeddings = 1024;
  const std::vector<float> inv = ropeInverseFrequencies(rope, 8, 2048);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // wavelength < 256: unchanged
  EXPECT_FLOAT_EQ(inv[1], 0.1f);
  EXPECT_FLOAT_EQ(inv[3], 0.001f / 8.0f);  // wavelength > 1024: divided by the factor
  // 628 is medium: smooth = (1024/628.3 - 1) / 3; f = (1 - smooth) f/8 + smooth f.
  const double wavelen = 2 * M_PI / 0.01;
  const double smooth = (1024.0 / wavelen - 1.0) / 3.0;
  EXPECT_NEAR(inv[2], (1 - smooth) * 0.01 / 8 + smooth * 0.01, 1e-8);
  rope.original_max_position_embeddings = 0;
  test::expectInvalidArgument([&] { ropeInverseFrequencies(rope, 8, 2048); },
                              "original_max_position_embeddings");
}

TEST(RopeTable, YarnRampAndAttentionFactor) {
  RopeConfig rope;
  rope.type = RopeType::kYarn;
  rope.factor = 4.0;
  rope.original_max_position_embeddings = 64;
  EXPECT_NEAR(ropeAttentionFactor(rope), 0.1 * std::log(4.0) + 1.0, 1e-6);
  const std::vector<float> inv = ropeInverseFrequencies(rope, 64, 1024);
  // High frequencies (small i) extrapolate (unchanged), the lowest interpolate (divided by 4).
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[31], std::pow(10000.0, -62.0 / 64.0) / 4.0, 1e-9);
  rope.attention_factor = 0.5;
  EXPECT_EQ(ropeAttentionFactor(rope), 0.5f);
  const std::vector<float> table = buildRopeTable(rope, 64, 1024, 2);
  EXPECT_NEAR(table[64], 0.5f * std::cos(1.0), 1e-7);  // position 1, frequency 0, scaled
}

TEST(RopeTable, BadArguments) {
  RopeConfig rope;
  test::expectInvalidArgument([&] { ropeInverseFrequencies(rope, 5, 2048); }, "rotaryDim");
  test::expectInvalidArgument([&] { buildRopeTable(rope, 4, 2048, 0); }, "maxPositions");
  rope.theta = 0.5;
  test::expectInvalidArgument([&] { ropeInverseFrequencies(rope, 4, 2048); }, "rope_theta");
}

}  // namespace
}  // namespace es::model
