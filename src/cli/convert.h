#pragma once
// `edgespec convert GGUF OUT_DIR [--dtype f32|bf16]`: write a Hugging Face model folder
// (config.json, model.safetensors, tokenizer files) from a GGUF file; see model/gguf_convert.h.
#include <CLI/CLI.hpp>

namespace es::cli {
// Registers the subcommand on `app`; it runs from its callback.
void addConvertCommand(CLI::App& app);
}  // namespace es::cli
