#pragma once
// TokenizerSpec from a Hugging Face tokenizer.json (byte-level BPE only: GPT-2, SmolLM2,
// Llama-3, Qwen2/Qwen3), plus the bits of tokenizer_config.json that live beside it.
#include <filesystem>
#include <string_view>

#include "tokenizer/tokenizer_spec.h"

namespace es::tokenizer {

// Reads `path` (a tokenizer.json) and, when a tokenizer_config.json sits in the same folder,
// applies it (applyTokenizerConfig). Both are read through InputFile (common/input_file.h):
// InvalidArgument naming the file when it cannot be opened, is not a regular file or is over
// kMaxTokenizerJsonBytes (kMaxTokenizerConfigJsonBytes for tokenizer_config.json), and
// FormatError naming the file and the field for anything malformed or unsupported (a
// pre-tokenizer regex we do not implement is named in the message).
TokenizerSpec loadTokenizerJson(const std::filesystem::path& path);

// The same from text; `source` names it in errors.
TokenizerSpec parseTokenizerJson(std::string_view text, std::string_view source);

// tokenizer_config.json: bos_token / eos_token / pad_token (a string or {"content": ...}, looked
// up among the tokens), add_bos_token, chat_template (a string, or the "default" entry of a
// list of {name, template}). Fields that are absent leave the spec as it is.
void applyTokenizerConfig(TokenizerSpec& spec, std::string_view text, std::string_view source);

}  // namespace es::tokenizer
