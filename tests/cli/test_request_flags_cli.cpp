// `edgespec generate`'s request flags (--max-new-tokens, --temperature, --top-k, --top-p, --seed)
// and the same fields of an --input-file entry go through one parser and validation: each bad
// value is refused by both, before any model loads, with the same message but for the name
// ("argument '--top-k'" vs "field 'top_k'"); the values at the bounds are taken by both and give
// the same tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/gguf_fixture.h"
#include "model/safetensors_test_writer.h"
#include "support/cli_test_util.h"
#include "support/test_util.h"

namespace es::cli {
namespace {

using test::runCli;

// The message of `edgespec ARGS` (which must fail with an InvalidArgument).
std::string refusal(const std::vector<std::string>& args) {
  try {
    runCli(args);
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "accepted";
}

// The message from the value on: "' = -3 must be an integer in [0, 1048576] (0 = off)".
std::string fromValue(const std::string& message) {
  const size_t at = message.find("' = ");
  return at == std::string::npos ? "(no value in: " + message + ")" : message.substr(at);
}

struct BadValue {
  std::string flag, key;
  std::string text;  // the flag's text and the JSON number
};

TEST(CliRequestFlags, FlagsAndTheRequestFileRefuseTheSameValuesAlike) {
  test::TempDir tmp;
  const std::vector<BadValue> cases = {
      {"--max-new-tokens", "max_new_tokens", "0"},
      {"--max-new-tokens", "max_new_tokens", "-1"},
      {"--max-new-tokens", "max_new_tokens", "1048577"},
      {"--max-new-tokens", "max_new_tokens", "4294967297"},
      {"--max-new-tokens", "max_new_tokens", "2.5"},
      {"--temperature", "temperature", "-0.5"},
      {"--temperature", "temperature", "100.5"},
      {"--temperature", "temperature", "1e+30"},
      {"--top-k", "top_k", "-3"},
      {"--top-k", "top_k", "-1"},
      {"--top-k", "top_k", "1048577"},
      {"--top-k", "top_k", "4294967296"},
      {"--top-k", "top_k", "2.9"},
      {"--top-p", "top_p", "0"},
      {"--top-p", "top_p", "-0.1"},
      {"--top-p", "top_p", "1.5"},
      {"--seed", "seed", "-1"},
      {"--seed", "seed", "1.5"},
      {"--seed", "seed", "-9223372036854775808"},
  };
  const std::vector<std::string> base = {
      "generate", "--backend", "cpu",     "--raw",
      "--prompt", "hi",        "--model", (tmp / "absent.gguf").string()};
  for (const BadValue& c : cases) {
    std::vector<std::string> byFlag = base;
    byFlag.insert(byFlag.end(), {c.flag, c.text});
    const std::string flagMessage = refusal(byFlag);
    EXPECT_EQ(flagMessage.rfind("generate: argument '" + c.flag + "' = " + c.text + " must be ", 0),
              0u)
        << flagMessage;
    test::writeText(tmp / "in.json", R"([{"prompt": "hi", ")" + c.key + "\": " + c.text + "}]");
    std::vector<std::string> byFile = base;
    byFile.insert(byFile.end(), {"--input-file", (tmp / "in.json").string()});
    const std::string fileMessage = refusal(byFile);
    EXPECT_NE(fileMessage.find(": entry 0: field '" + c.key + "' = "), std::string::npos)
        << fileMessage;
    EXPECT_EQ(fromValue(flagMessage), fromValue(fileMessage)) << c.flag << " " << c.text;
  }
}

TEST(CliRequestFlags, FlagOnlySpellingsAreRefused) {
  // Text a JSON file cannot hold: non-finite numbers, a seed past 2^64 - 1 (JSON reads it as a
  // float), garbage after a number, hexadecimal.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--temperature", "inf"},  {"--temperature", "nan"},
      {"--temperature", "1e30"}, {"--seed", "18446744073709551616"},
      {"--seed", "12abc"},       {"--top-k", "0x10"},
      {"--top-p", " 0.5"},       {"-n", "8tokens"}};
  for (const auto& [flag, text] : cases) {
    const std::string message = refusal(
        {"generate", "--backend", "cpu", "--model", "absent.gguf", "--prompt", "hi", flag, text});
    EXPECT_NE(message.find("generate: argument '"), std::string::npos) << message;
    EXPECT_NE(message.find(" must be "), std::string::npos) << message;
  }
  // The seed message shows the bound, so a wrapped value is never a surprise.
  EXPECT_EQ(refusal({"generate", "--model", "absent.gguf", "--seed", "18446744073709551616"}),
            "generate: argument '--seed' = 18446744073709551616 must be an integer in [0, "
            "18446744073709551615]");
  const std::string json = R"([{"prompt": "hi", "seed": 18446744073709551616}])";
  test::TempDir tmp;
  test::writeText(tmp / "in.json", json);
  EXPECT_NE(
      refusal({"generate", "--model", "absent.gguf", "--input-file", (tmp / "in.json").string()})
          .find("field 'seed' = 1.8446744073709552e+19 must be an integer in [0, "
                "18446744073709551615]"),
      std::string::npos);
  // Non-number JSON values are refused with the field's bound too.
  test::writeText(tmp / "in.json", R"([{"prompt": "hi", "temperature": "0.7"}])");
  EXPECT_NE(
      refusal({"generate", "--model", "absent.gguf", "--input-file", (tmp / "in.json").string()})
          .find("field 'temperature' = \"0.7\" must be a finite number in [0, 100]"),
      std::string::npos);
}

// generate's and bench's other numeric flags: range errors naming the flag, before any model loads.
TEST(CliRequestFlags, OtherNumericFlagsAreRangeChecked) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"generate", "--prefix-cache-pages", "-1"},
       "generate: argument '--prefix-cache-pages' = -1 must be an integer in [0, 1073741823]"},
      {{"generate", "--verify-width", "0x10"},
       "generate: argument '--verify-width' = 0x10 must be auto or an integer in [2, 1024]"},
      {{"generate", "--verify-width", "99999999999"},
       "generate: argument '--verify-width' = 99999999999 must be auto or an integer in [2, "
       "1024]"},
      {{"generate", "--prefill-chunk", "1e9"},
       "generate: argument '--prefill-chunk' = 1e9 must be auto or an integer in [16, 65536]"},
      {{"bench", "--corrupt", "nan"},
       "bench: argument '--corrupt' = nan must be a finite number in [0, 1]"},
      {{"bench", "--corrupt", "inf"},
       "bench: argument '--corrupt' = inf must be a finite number in [0, 1]"},
      {{"bench", "--batch", "0"}, "bench: argument '--batch' = 0 must be an integer in [1, 256]"},
      {{"bench", "-b", "-1"}, "bench: argument '--batch' = -1 must be an integer in [1, 256]"},
      {{"bench", "--repeats", "-1"},
       "bench: argument '--repeats' = -1 must be an integer in [1, 1000000]"},
      {{"bench", "--prompt-len", "010x"},
       "bench: argument '--prompt-len' = 010x must be an integer in [1, 65536]"},
      {{"bench", "--gen-len", "4294967298"},
       "bench: argument '--gen-len' = 4294967298 must be an integer in [2, 65536]"},
      {{"bench", "--block-size", "1"},
       "bench: argument '--block-size' = 1 must be an integer in [2, 32]"},
      {{"bench", "--verify-width", "-2"},
       "bench: argument '--verify-width' = -2 must be an integer in [0, 1024]"},
      {{"bench", "--prefill-chunk", "8"},
       "bench: argument '--prefill-chunk' = 8 must be an integer in [16, 65536]"},
      {{"bench", "--shared-len", "5"},
       "bench: argument '--shared-len' = 5 must be an integer in [128, 65535]"},
      {{"bench", "--ttft-runs", "0"},
       "bench: argument '--ttft-runs' = 0 must be an integer in [1, 1000]"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--model", "absent-model"});
    EXPECT_EQ(refusal(full), message);
  }
}

TEST(CliRequestFlags, BoundsAreTakenByBothAlike) {
  test::TempDir tmp;
  test::writeBytes(tmp / "q.gguf",
                   test::ggufFromFolder(test::test_data_dir() + "/models/qwen3").build());
  const std::vector<std::string> base = {
      "generate", "--backend", "cpu", "--json", "--raw", "--model", (tmp / "q.gguf").string()};
  std::vector<std::string> byFlag = base;
  byFlag.insert(byFlag.end(),
                {"--prompt", "hello there", "-n", "4", "--temperature", "100", "--top-k", "1048576",
                 "--top-p", "1e-6", "--seed", "18446744073709551615"});
  const nlohmann::json flagOut = test::runCliJson(byFlag);
  test::writeText(tmp / "in.json", R"([{"prompt": "hello there", "max_new_tokens": 4,
      "temperature": 100, "top_k": 1048576, "top_p": 1e-6, "seed": 18446744073709551615}])");
  std::vector<std::string> byFile = base;
  byFile.insert(byFile.end(), {"--input-file", (tmp / "in.json").string()});
  const nlohmann::json fileOut = test::runCliJson(byFile);
  EXPECT_EQ(flagOut["tokens"].size(), 4u);
  EXPECT_EQ(flagOut["tokens"], fileOut["tokens"]);
}

}  // namespace
}  // namespace es::cli
