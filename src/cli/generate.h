#pragma once
// `edgespec generate`: text in, text out on a model folder (the embedded default model when no
// --model is given), streaming the answer to stdout; statistics go to stderr.
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace es::cli {
void addGenerateCommand(CLI::App& app);

// Whether the default model's shipped DFlash draft runs when no --draft/--no-draft/--model is
// given: only where it measured faster than plain decoding, i.e. on the cuda backend with every
// request greedy (temperature 0). temperatures: one per request.
bool defaultDraftPays(std::string_view backendName, const std::vector<float>& temperatures);
}  // namespace es::cli
