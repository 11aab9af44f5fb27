#pragma once
#include <CLI/CLI.hpp>

namespace es::cli {
// `edgespec bench`: a fixed workload measured end to end (see docs/runtime.md).
void addBenchCommand(CLI::App& app);
}  // namespace es::cli
