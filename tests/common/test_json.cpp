#include <gtest/gtest.h>

#include <string>

#include "common/errors.h"
#include "common/json.h"

namespace es {
namespace {

std::string formatErrorOf(const std::string& text) {
  try {
    parseJsonStrict(text, "f.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "no FormatError";
}

TEST(JsonStrict, ParsesValidDocuments) {
  const nlohmann::json j = parseJsonStrict(R"({"a": [1, {"b": 2}], "c": {"a": 3}})", "f.json");
  EXPECT_EQ(j["a"][1]["b"], 2);
  EXPECT_EQ(j["c"]["a"], 3);  // the same key in different objects is no duplicate
}

TEST(JsonStrict, RejectsDuplicateKeysAtAnyDepth) {
  EXPECT_EQ(formatErrorOf(R"({"a": 1, "a": 2})"), "f.json: duplicate JSON key 'a'");
  EXPECT_EQ(formatErrorOf(R"({"x": [{"k": 1, "k": 1}]})"), "f.json: duplicate JSON key 'k'");
}

TEST(JsonStrict, RejectsDeepNestingAndInvalidJson) {
  const std::string deep(kMaxJsonDepth + 1, '[');
  EXPECT_EQ(formatErrorOf(deep + std::string(kMaxJsonDepth + 1, ']')),
            "f.json: JSON nesting deeper than the limit 32");
  const std::string atLimit(kMaxJsonDepth, '[');
  EXPECT_NO_THROW(parseJsonStrict(atLimit + std::string(kMaxJsonDepth, ']'), "f.json"));
  EXPECT_NE(formatErrorOf(R"({"a": )").find("f.json: invalid JSON: "), std::string::npos);
}

}  // namespace
}  // namespace es
