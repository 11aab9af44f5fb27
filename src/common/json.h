#pragma once
// Strict JSON parsing for every file the runtime reads (model configs, safetensors headers and
// indexes, tokenizer.json). nlohmann's parser keeps the last of duplicate object keys silently;
// a file with two entries under one name is ambiguous, so parseJsonStrict rejects it.
#include <nlohmann/json.hpp>
#include <string_view>

namespace es {

// Deepest JSON nesting accepted (a safetensors header needs 3, config.json about 4); bounds the
// parser's work on hostile input.
inline constexpr int kMaxJsonDepth = 32;

// Parses `text`, rejecting duplicate keys (at any depth), nesting deeper than kMaxJsonDepth and
// invalid JSON with a FormatError naming `source`.
nlohmann::json parseJsonStrict(std::string_view text, std::string_view source);

}  // namespace es
