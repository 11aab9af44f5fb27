#pragma once
// `edgespec inspect`: print the paged KV cache plan for a model shape and serving limits.
#include <CLI/CLI.hpp>

namespace es::cli {
// Registers the subcommand on `app`; it runs from its callback.
void addInspectCommand(CLI::App& app);
}  // namespace es::cli
