#pragma once
// `edgespec quantize --to int4|fp8 [--group 128] IN_FOLDER OUT_FOLDER [--force] [-q]`: write a
// quantized copy of a Hugging Face model folder (AWQ-packed int4 or Qwen3-FP8-style fp8); see
// model/quantize_folder.h.
#include <CLI/CLI.hpp>

namespace es::cli {
// Registers the subcommand on `app`; it runs from its callback.
void addQuantizeCommand(CLI::App& app);
}  // namespace es::cli
