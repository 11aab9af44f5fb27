#pragma once
// What `edgespec generate` and `edgespec serve` share: the flags that choose and size the engine
// (--model, --draft, --no-draft, --verify-width, --prefill-chunk, --backend,
// --prefix-cache-pages, -q), the model's location (the embedded default model when --model is
// not given), its tokenizer and stop tokens, and the draft policy. Each command turns these into
// a runtime::EngineConfig (runtime/engine_builder.h) with its own batch and request sizes.
// Errors name the command (`where`) and the flag.
#include <CLI/CLI.hpp>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"
#include "runtime/engine_builder.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace es::cli {

struct EngineFlags {
  std::string model = {};             // empty: the default model in the cache
  std::string draft = {};             // a DFlash draft folder: speculative decoding
  bool noDraft = false;               // never the default model's shipped draft
  std::string verifyWidth = "auto";   // rows per speculative step (runtime::resolveVerifyWidth)
  std::string prefillChunk = "auto";  // rows per prefill forward (runtime::resolvePrefillChunk)
  std::string backend = "auto";
  int64_t prefixCachePages = 0;  // retained pages for prefix reuse (0 = off)
  bool quiet = false;            // no progress lines for the load and the prefills
};

// Registers the flags on `cmd`; the values already in `flags` are the shown defaults.
void addEngineFlags(CLI::App* cmd, EngineFlags& flags);

// The checks that concern the flags alone (runtime::validateEngineConfig checks the engine's
// values), before anything loads.
void validateEngineFlags(const EngineFlags& flags, std::string_view where);

// The value of --verify-width or --prefill-chunk: "auto" (nullopt: the runtime's rule) or an
// integer in [lo, hi] (the engine checks what depends on the model, e.g. the draft's block size);
// anything else is an InvalidArgument naming `option` and the range.
std::optional<int32_t> parseAutoOrInteger(std::string_view where, std::string_view value,
                                          std::string_view option, int32_t lo = INT32_MIN,
                                          int32_t hi = INT32_MAX);
std::optional<int32_t> verifyWidthFlag(const EngineFlags& flags, std::string_view where);
std::optional<int32_t> prefillChunkFlag(const EngineFlags& flags, std::string_view where);

// Where tools/fetch_default_model.sh puts the embedded default model, and its trained draft.
std::filesystem::path defaultModelDir();
std::filesystem::path defaultDraftDir();

// The model to load: an HF folder with a tokenizer.json, or a GGUF file (config, weights and
// tokenizer all from the one file); the default model without --model.
std::filesystem::path resolveModel(const EngineFlags& flags, std::string_view where);
tokenizer::TokenizerSpec loadTokenizer(const std::filesystem::path& model, std::string_view where);

// Tokens that end an answer: the model's eos and its chat format's end-of-turn marker.
std::vector<int32_t> stopTokens(const tokenizer::BpeTokenizer& tok, const model::ModelConfig& c);

// The draft the flags ask for: --draft, plain with --no-draft or --model, else the default
// model's own draft where it is installed (the engine runs it where defaultDraftPays for
// `temperatures`, every request's temperature; empty: none known yet).
runtime::DraftConfig draftConfig(const EngineFlags& flags, std::vector<float> temperatures);

// The status callback every command gives the engine builder: "[edgespec] <line>" on stderr.
void printStatus(const std::string& line);

}  // namespace es::cli
