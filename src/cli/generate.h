#pragma once
// `edgespec generate`: text in, text out on a model folder (the embedded default model when no
// --model is given), streaming the answer to stdout; statistics go to stderr. The engine is built
// by runtime::buildEngine (runtime/engine_builder.h), which holds the sizing and draft policy.
#include <CLI/CLI.hpp>

namespace es::cli {
void addGenerateCommand(CLI::App& app);
}  // namespace es::cli
