#pragma once
// `edgespec generate`: text in, text out on a model folder (the embedded default model when no
// --model is given), streaming the answer to stdout; statistics go to stderr.
#include <CLI/CLI.hpp>

namespace es::cli {
void addGenerateCommand(CLI::App& app);
}  // namespace es::cli
