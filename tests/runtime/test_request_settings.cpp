// The request settings' one parser and validation (runtime/request_settings.h): both sides of
// every bound, the strict seed, the messages (flag and field naming) and the narrowing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/errors.h"
#include "runtime/request_settings.h"

namespace es::runtime {
namespace {

// The message of validating `s` as flags, or "" if it passes.
std::string refusal(const RequestSettings& s, FieldNaming naming = FieldNaming::kFlag) {
  try {
    validateRequestSettings(s, "generate", naming);
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

// The message of parsing `text` into `field`, or "" if it parses.
std::string parseRefusal(RequestField field, const std::string& text,
                         FieldNaming naming = FieldNaming::kFlag) {
  RequestSettings s;
  try {
    setRequestField(s, field, text, "generate", naming);
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

TEST(RequestSettings, DefaultsPass) { EXPECT_EQ(refusal(RequestSettings{}), ""); }

TEST(RequestSettings, MaxNewTokensBounds) {
  RequestSettings s;
  for (int64_t ok : {int64_t{1}, kMaxNewTokensLimit}) {
    s.maxNewTokens = ok;
    EXPECT_EQ(refusal(s), "") << ok;
  }
  s.maxNewTokens = 0;
  EXPECT_EQ(refusal(s),
            "generate: argument '--max-new-tokens' = 0 must be an integer in [1, 1048576]");
  s.maxNewTokens = kMaxNewTokensLimit + 1;
  EXPECT_EQ(refusal(s, FieldNaming::kKey),
            "generate: field 'max_new_tokens' = 1048577 must be an integer in [1, 1048576]");
  s.maxNewTokens = -5;
  EXPECT_NE(refusal(s), "");
}

TEST(RequestSettings, TemperatureBounds) {
  RequestSettings s;
  for (double ok : {0.0, 1e-3, 1.0, kMaxTemperature}) {
    s.temperature = ok;
    EXPECT_EQ(refusal(s), "") << ok;
  }
  const std::string tail = " must be a finite number in [0, 100] (0 = greedy)";
  s.temperature = -0.001;
  EXPECT_EQ(refusal(s), "generate: argument '--temperature' = -0.001" + tail);
  s.temperature = std::nextafter(kMaxTemperature, 1e9);
  EXPECT_NE(refusal(s), "");
  s.temperature = 1e30;
  EXPECT_EQ(refusal(s), "generate: argument '--temperature' = 1e+30" + tail);
  s.temperature = std::numeric_limits<double>::infinity();
  EXPECT_EQ(refusal(s), "generate: argument '--temperature' = inf" + tail);
  s.temperature = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(refusal(s).find("= nan" + tail), std::string::npos);
}

TEST(RequestSettings, TopKBounds) {
  RequestSettings s;
  for (int64_t ok : {int64_t{0}, int64_t{1}, kMaxTopK}) {
    s.topK = ok;
    EXPECT_EQ(refusal(s), "") << ok;
  }
  s.topK = -1;
  EXPECT_EQ(refusal(s),
            "generate: argument '--top-k' = -1 must be an integer in [0, 1048576] (0 = off)");
  s.topK = -3;
  EXPECT_NE(refusal(s), "");
  s.topK = kMaxTopK + 1;
  EXPECT_NE(refusal(s), "");
  s.topK = int64_t{1} << 40;  // would wrap to 0 (off) as an int32
  EXPECT_NE(refusal(s), "");
}

TEST(RequestSettings, TopPBounds) {
  RequestSettings s;
  for (double ok : {1.0, 0.5, 1e-6, 1e-30}) {
    s.topP = ok;
    EXPECT_EQ(refusal(s), "") << ok;
  }
  s.topP = 0.0;
  EXPECT_EQ(refusal(s), "generate: argument '--top-p' = 0 must be a number in (0, 1] (1 = off)");
  s.topP = std::nextafter(1.0, 2.0);
  EXPECT_NE(refusal(s), "");
  s.topP = -0.5;
  EXPECT_NE(refusal(s), "");
  s.topP = 1e-60;  // positive, but 0 as the decoder's float
  EXPECT_NE(refusal(s), "");
  s.topP = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(refusal(s), "");
}

TEST(RequestSettings, SeedIsStrict) {
  RequestSettings s;
  setRequestField(s, RequestField::kSeed, "18446744073709551615", "generate", FieldNaming::kFlag);
  EXPECT_EQ(s.seed, std::numeric_limits<uint64_t>::max());
  setRequestField(s, RequestField::kSeed, "0", "generate", FieldNaming::kFlag);
  EXPECT_EQ(s.seed, 0u);
  const std::string tail = " must be an integer in [0, 18446744073709551615]";
  EXPECT_EQ(parseRefusal(RequestField::kSeed, "-1"), "generate: argument '--seed' = -1" + tail);
  EXPECT_EQ(parseRefusal(RequestField::kSeed, "18446744073709551616"),
            "generate: argument '--seed' = 18446744073709551616" + tail);
  for (const char* bad : {"12abc", "1.0", "1e3", "+7", " 7", "0x10", "", "\"5\"", "true"}) {
    EXPECT_NE(parseRefusal(RequestField::kSeed, bad), "") << bad;
  }
}

TEST(RequestSettings, ParseFailuresGiveTheBoundsMessage) {
  EXPECT_EQ(parseRefusal(RequestField::kTopK, "5.0", FieldNaming::kKey),
            "generate: field 'top_k' = 5.0 must be an integer in [0, 1048576] (0 = off)");
  EXPECT_EQ(parseRefusal(RequestField::kMaxNewTokens, "99999999999999999999"),
            "generate: argument '--max-new-tokens' = 99999999999999999999 must be an integer in "
            "[1, 1048576]");
  EXPECT_EQ(parseRefusal(RequestField::kTemperature, "warm"),
            "generate: argument '--temperature' = warm must be a finite number in [0, 100] (0 = "
            "greedy)");
  EXPECT_EQ(parseRefusal(RequestField::kTopP, "null", FieldNaming::kKey),
            "generate: field 'top_p' = null must be a number in (0, 1] (1 = off)");
  // A huge value is cut in the message.
  const std::string huge(10000, '7');
  EXPECT_LT(parseRefusal(RequestField::kTopK, huge).size(), 200u);
  // What parses is stored as given, for validateRequestSettings to judge.
  RequestSettings s;
  setRequestField(s, RequestField::kTopK, "-3", "generate", FieldNaming::kFlag);
  setRequestField(s, RequestField::kTemperature, "inf", "generate", FieldNaming::kFlag);
  EXPECT_EQ(s.topK, -3);
  EXPECT_TRUE(std::isinf(s.temperature));
}

TEST(RequestSettings, NamesAndNarrowing) {
  EXPECT_EQ(requestFieldName(RequestField::kMaxNewTokens, FieldNaming::kFlag), "--max-new-tokens");
  EXPECT_EQ(requestFieldName(RequestField::kTopP, FieldNaming::kKey), "top_p");
  const SamplingConfig c = toSamplingConfig(
      {.maxNewTokens = 3, .temperature = 0.5, .topK = 40, .topP = 0.9, .seed = 1ull << 63});
  EXPECT_EQ(c.temperature, 0.5f);
  EXPECT_EQ(c.topK, 40);
  EXPECT_EQ(c.topP, 0.9f);
  EXPECT_EQ(c.seed, 1ull << 63);
}

}  // namespace
}  // namespace es::runtime
