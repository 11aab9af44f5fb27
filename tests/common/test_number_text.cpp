// Strict decimal parsing (common/number_text.h): the whole text in base 10, no wrap or saturation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/number_text.h"

namespace es {
namespace {

TEST(NumberText, Int64) {
  EXPECT_EQ(parseInt64("0"), 0);
  EXPECT_EQ(parseInt64("-3"), -3);
  EXPECT_EQ(parseInt64("9223372036854775807"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parseInt64("-9223372036854775808"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(parseInt64("010"), 10);  // never octal
  for (const char* bad : {"", "9223372036854775808", "-9223372036854775809", "+1", " 1", "1 ",
                          "1.0", "1e3", "0x10", "5abc", "-", "inf"}) {
    EXPECT_FALSE(parseInt64(bad).has_value()) << bad;
  }
}

TEST(NumberText, Uint64) {
  EXPECT_EQ(parseUint64("18446744073709551615"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(parseUint64("0"), 0u);
  for (const char* bad :
       {"-1", "-0", "18446744073709551616", "99999999999999999999999", "+5", "1.5", "12abc", ""}) {
    EXPECT_FALSE(parseUint64(bad).has_value()) << bad;
  }
}

TEST(NumberText, Double) {
  EXPECT_EQ(parseDouble("0.7"), 0.7);
  EXPECT_EQ(parseDouble("-2"), -2.0);
  EXPECT_EQ(parseDouble("1e30"), 1e30);
  EXPECT_TRUE(std::isinf(*parseDouble("inf")));
  EXPECT_TRUE(std::isnan(*parseDouble("nan")));
  for (const char* bad : {"", "1e400", "0.5x", "+0.5", " 0.5", "0x1p3", "1,5"}) {
    EXPECT_FALSE(parseDouble(bad).has_value()) << bad;
  }
  EXPECT_EQ(formatDouble(0.7), "0.7");
  EXPECT_EQ(formatDouble(1e30), "1e+30");
  EXPECT_EQ(formatDouble(100.0), "100");
  EXPECT_EQ(formatDouble(std::numeric_limits<double>::infinity()), "inf");
}

}  // namespace
}  // namespace es
