// libFuzzer target for parseQuantizationConfig (built by tools/fuzz.sh quant_config, not by
// CMake). The input is a whole config.json; strict JSON parsing and the quantization_config
// check both reject bad input with a FormatError, which is the expected outcome. Any other
// exception, a sanitizer report or an accepted config that breaks the invariants below is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/errors.h"
#include "common/json.h"
#include "common/quant_format.h"
#include "model/quantization_config.h"

using es::model::QuantMethod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  es::model::QuantizationConfig config;
  try {
    config =
        es::model::parseQuantizationConfig(es::parseJsonStrict(text, "fuzz-input"), "fuzz-input");
  } catch (const es::FormatError&) {
    return 0;
  }
  // An accepted config describes a layout the backends hold (common/quant_format.h).
  switch (config.method) {
    case QuantMethod::kNone:
      if (config.bits != 0 || config.group != 0 || !config.notConverted.empty()) __builtin_trap();
      break;
    case QuantMethod::kAwq:
    case QuantMethod::kGptq:
      if (config.bits != 4 || !config.zeroPoint) __builtin_trap();
      if (es::quantLayoutRejection(es::QuantFormat::kInt4, 128, config.group) != nullptr) {
        __builtin_trap();
      }
      break;
    case QuantMethod::kFp8Block:
      if (config.bits != 8 || config.blockN != 128 || config.blockK != 128) __builtin_trap();
      if (es::quantLayoutRejection(es::QuantFormat::kFp8E4M3, 1000, config.group) != nullptr) {
        __builtin_trap();
      }
      break;
    case QuantMethod::kFp8Channel:
      if (config.bits != 8 || config.group != 0 || !config.symmetric) __builtin_trap();
      break;
  }
  if (config.source != "fuzz-input") __builtin_trap();
  return 0;
}
