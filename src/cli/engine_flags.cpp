#include "cli/engine_flags.h"

#include <cstdio>
#include <cstdlib>

#include "cli/numeric_flags.h"
#include "common/errors.h"
#include "common/kv_page.h"
#include "common/number_text.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_weights.h"
#include "tokenizer/tokenizer_json.h"

namespace es::cli {

namespace fs = std::filesystem;

void addEngineFlags(CLI::App* cmd, EngineFlags& flags) {
  cmd->add_option("--model", flags.model,
                  "HF model folder with tokenizer.json, or a GGUF file (default: the embedded "
                  "SmolLM2-135M-Instruct)");
  cmd->add_option(
      "--draft", flags.draft,
      "DFlash draft folder (z-lab format): speculative decoding (default: the default model's "
      "trained draft, on a GPU at temperature 0)");
  cmd->add_flag("--no-draft", flags.noDraft,
                "Plain decoding even where the default draft would run");
  cmd->add_option("--verify-width", flags.verifyWidth,
                  "Rows a speculative step verifies per request, 2 to the draft's block size: the "
                  "anchor and "
                  "the first drafts of the block (auto: the block size on cuda, " +
                      std::to_string(runtime::kCpuVerifyWidth) + " on cpu)")
      ->capture_default_str();
  cmd->add_option(
         "--prefill-chunk", flags.prefillChunk,
         "Rows of one prefill forward (each reads every weight): auto (cuda: the longest prompt, "
         "256 to 4096; cpu: 256) or an integer in [16, 65536]")
      ->capture_default_str();
  cmd->add_option("--backend", flags.backend, "auto (GPU if present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  addIntegerFlag(cmd, "--prefix-cache-pages", flags.prefixCachePages, 0, kv::kMaxKvPoolPages,
                 "Prefix reuse: KV pages (128 tokens each) retained beyond the active minimum for "
                 "prompt blocks requests share (0 = off)");
  cmd->add_flag("-q,--quiet", flags.quiet,
                "No progress lines on stderr for a model load or prefill that takes over a second");
}

std::optional<int32_t> parseAutoOrInteger(std::string_view where, std::string_view value,
                                          std::string_view option, int32_t lo, int32_t hi) {
  if (value == "auto") return std::nullopt;
  const std::optional<int64_t> n = parseInt64(value);
  ES_CHECK_ARG(n && *n >= lo && *n <= hi, where, option, std::string(value),
               "must be auto or an integer in [", lo, ", ", hi, "]");
  return static_cast<int32_t>(*n);
}

std::optional<int32_t> verifyWidthFlag(const EngineFlags& f, std::string_view where) {
  return parseAutoOrInteger(where, f.verifyWidth, "--verify-width", 2,
                            static_cast<int32_t>(model::kMaxDraftBlockSize));
}

std::optional<int32_t> prefillChunkFlag(const EngineFlags& f, std::string_view where) {
  return parseAutoOrInteger(where, f.prefillChunk, "--prefill-chunk", runtime::kMinPrefillChunk,
                            runtime::kMaxPrefillChunk);
}

void validateEngineFlags(const EngineFlags& f, std::string_view where) {
  verifyWidthFlag(f, where);
  prefillChunkFlag(f, where);
  ES_CHECK_ARG(!(f.noDraft && !f.draft.empty()), where, "--no-draft", "set",
               "cannot be combined with --draft ", f.draft);
}

fs::path defaultModelDir() {
  const char* cache = std::getenv("ES_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const fs::path base =
      cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "edgespec";
  return base / "smollm2-135m-instruct";
}

// The default model's trained DFlash draft is shipped in the repository under models/
// (docs/training.md); tools/fetch_default_model.sh installs it next to the model.
fs::path defaultDraftDir() {
  return defaultModelDir().parent_path() / "smollm2-135m-instruct-dflash";
}

fs::path resolveModel(const EngineFlags& f, std::string_view where) {
  const fs::path path = f.model.empty() ? defaultModelDir() : fs::path(f.model);
  if (f.model.empty() && !fs::exists(path / "config.json")) {
    ES_THROW(InvalidArgument, where, ": the default model is not in ", path.string(),
             "; run tools/fetch_default_model.sh (or pass --model DIR|FILE.gguf)");
  }
  if (model::isGgufPath(path)) return path;  // opening it names any problem with the file
  if (!fs::is_directory(path)) {
    ES_THROW(InvalidArgument, where, ": argument '--model' = ", path.string(),
             " is neither a model folder (config.json, model.safetensors, tokenizer.json) nor a "
             "GGUF file");
  }
  if (!fs::exists(path / "tokenizer.json")) {
    ES_THROW(InvalidArgument, where, ": argument '--model' = ", path.string(),
             " has no tokenizer.json, so text cannot be encoded");
  }
  return path;
}

tokenizer::TokenizerSpec loadTokenizer(const fs::path& model, std::string_view where) {
  if (!model::isGgufPath(model)) return tokenizer::loadTokenizerJson(model / "tokenizer.json");
  const model::GgufFile file = model::GgufFile::open(model);
  if (!file.header().has("tokenizer.ggml.model")) {
    ES_THROW(InvalidArgument, where, ": argument '--model' = ", model.string(),
             " has no tokenizer.ggml.* metadata, so text cannot be encoded");
  }
  return model::tokenizerSpecFromGguf(file);
}

std::vector<int32_t> stopTokens(const tokenizer::BpeTokenizer& tok, const model::ModelConfig& c) {
  std::vector<int32_t> stops;
  for (int64_t id : c.eos_token_ids) stops.push_back(static_cast<int32_t>(id));
  if (tok.spec().eosId) stops.push_back(*tok.spec().eosId);
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"}) {
    if (auto id = tok.tokenId(marker)) stops.push_back(*id);
  }
  return stops;
}

runtime::DraftConfig draftConfig(const EngineFlags& f, std::vector<float> temperatures) {
  if (!f.draft.empty()) return {.kind = runtime::DraftKind::kDFlash, .dir = f.draft};
  if (f.noDraft || !f.model.empty() || !fs::exists(defaultDraftDir() / "config.json")) return {};
  return {.kind = runtime::DraftKind::kDefaultDFlash,
          .dir = defaultDraftDir(),
          .temperatures = std::move(temperatures)};
}

void printStatus(const std::string& line) { std::fprintf(stderr, "[edgespec] %s\n", line.c_str()); }

}  // namespace es::cli
