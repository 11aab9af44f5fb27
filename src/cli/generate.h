#pragma once
// `edgespec generate`: text in, text out on a model folder (the embedded default model when no
// --model is given), streaming the answer to stdout; statistics go to stderr. The engine is built
// by runtime::buildEngine (runtime/engine_builder.h), which holds the sizing and draft policy.
#include <CLI/CLI.hpp>
#include <climits>
#include <cstdint>
#include <optional>
#include <string_view>

namespace es::cli {
void addGenerateCommand(CLI::App& app);

// The value of --verify-width or --prefill-chunk: "auto" (nullopt: the runtime's rule) or an
// integer in [lo, hi] (the engine checks what depends on the model, e.g. the draft's block size);
// anything else is an InvalidArgument naming `option` and the range.
std::optional<int32_t> parseAutoOrInteger(std::string_view value, std::string_view option,
                                          int32_t lo = INT32_MIN, int32_t hi = INT32_MAX);
}  // namespace es::cli
