#include "cli/generate.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/logging.h"
#include "kv/kv_cache_manager.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "model/gguf_weights.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "model/dflash_draft.h"
#include "runtime/dflash_proposer.h"
#include "runtime/decode_engine.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer_json.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateOptions {
  std::string model;  // empty: the default model in the cache
  std::string draft;  // a DFlash draft folder: speculative decoding
  std::string prompt = "Write one sentence about the sea.";
  std::string system;
  int32_t maxNewTokens = 128;
  std::string backend = "auto";
  float temperature = 0.0f;  // 0: greedy
  int32_t topK = 0;
  float topP = 1.0f;
  uint64_t seed = 0;
  bool raw = false;        // no chat template
  bool noThink = false;    // Qwen3: enable_thinking = false
  bool json = false;
};

// Where tools/fetch_default_model.sh puts the embedded default model.
fs::path defaultModelDir() {
  const char* cache = std::getenv("ES_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const fs::path base = cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "edgespec";
  return base / "smollm2-135m-instruct";
}

// The model to load: an HF folder with a tokenizer.json, or a GGUF file (config, weights and
// tokenizer all from the one file).
fs::path resolveModel(const GenerateOptions& o) {
  const fs::path path = o.model.empty() ? defaultModelDir() : fs::path(o.model);
  if (o.model.empty() && !fs::exists(path / "config.json")) {
    ES_THROW(InvalidArgument, "generate: the default model is not in ", path.string(),
             "; run tools/fetch_default_model.sh (or pass --model DIR|FILE.gguf)");
  }
  if (model::isGgufPath(path)) return path;  // opening it names any problem with the file
  if (!fs::is_directory(path)) {
    ES_THROW(InvalidArgument, "generate: argument '--model' = ", path.string(),
             " is neither a model folder (config.json, model.safetensors, tokenizer.json) nor a GGUF file");
  }
  if (!fs::exists(path / "tokenizer.json")) {
    ES_THROW(InvalidArgument, "generate: argument '--model' = ", path.string(),
             " has no tokenizer.json, so text cannot be encoded");
  }
  return path;
}

tokenizer::TokenizerSpec loadTokenizer(const fs::path& model) {
  if (!model::isGgufPath(model)) return tokenizer::loadTokenizerJson(model / "tokenizer.json");
  const model::GgufFile file = model::GgufFile::open(model);
  if (!file.header().has("tokenizer.ggml.model")) {
    ES_THROW(InvalidArgument, "generate: argument '--model' = ", model.string(),
             " has no tokenizer.ggml.* metadata, so text cannot be encoded");
  }
  return model::tokenizerSpecFromGguf(file);
}

// Tokens that end an answer: the model's eos and its chat format's end-of-turn marker.
std::vector<int32_t> stopTokens(const tokenizer::BpeTokenizer& tok, const model::ModelConfig& c) {
  std::vector<int32_t> stops;
  for (int64_t id : c.eos_token_ids) stops.push_back(static_cast<int32_t>(id));
  if (tok.spec().eosId) stops.push_back(*tok.spec().eosId);
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"}) {
    if (auto id = tok.tokenId(marker)) stops.push_back(*id);
  }
  return stops;
}

void runGenerate(const GenerateOptions& o) {
  ES_CHECK_ARG(o.maxNewTokens >= 1 && o.maxNewTokens <= (1 << 20), "generate", "--max-new-tokens",
               o.maxNewTokens, "must be in [1, 1048576]");
  const fs::path dir = resolveModel(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto backend = ops::makeBackend(o.backend);
  tokenizer::BpeTokenizer tok(loadTokenizer(dir));

  std::string text = o.prompt;
  bool templated = false;
  if (!o.raw) {
    if (tok.spec().chatTemplate.empty()) {
      ES_LOG_WARN("the model ships no chat template: the prompt is used as raw text");
    } else {
      std::vector<tokenizer::ChatMessage> messages;
      if (!o.system.empty()) messages.push_back({"system", o.system});
      messages.push_back({"user", o.prompt});
      text = tokenizer::ChatTemplate::fromTemplateText(tok.spec().chatTemplate)
                 .render(messages, true, !o.noThink);
      templated = true;
    }
  }
  // A rendered chat template already carries the model's begin-of-text marker where it wants one
  // (Llama-3 writes <|begin_of_text|> itself), as transformers' apply_chat_template does: no
  // second bos then. Raw prompts get the tokenizer's own bos rule.
  const std::vector<int32_t> prompt =
      templated ? tok.encode(text, /*parseSpecial=*/true) : tok.encodePrompt(text, /*parseSpecial=*/false);
  ES_CHECK_ARG(!prompt.empty(), "generate", "--prompt", "\"\"", "encodes to no tokens");

  std::fprintf(stderr, "[edgespec] loading %s on the %s backend\n", dir.string().c_str(),
               backend->name().c_str());
  constexpr int32_t kMaxTokens = 256;  // rows of one forward: prefill chunks, verify blocks
  const std::vector<int32_t> taps =
      o.draft.empty() ? std::vector<int32_t>{} : model::DFlashDraft::requiredTargetTaps(o.draft, model::loadModelConfig(dir));
  model::TargetModel target(dir, *backend, kMaxTokens, taps);
  std::unique_ptr<model::DFlashDraft> draft;
  if (!o.draft.empty()) {
    std::fprintf(stderr, "[edgespec] loading the DFlash draft %s\n", o.draft.c_str());
    draft = std::make_unique<model::DFlashDraft>(o.draft, *backend, target, kMaxTokens, 1);
  }
  kv::KvCacheConfig kvc;
  kvc.maxBatchSize = 1;
  // A speculative step may write 2·(BS − 1) rows past the budget (docs/runtime.md, capacity).
  kvc.maxSequenceLength = static_cast<int32_t>(prompt.size()) + o.maxNewTokens + (draft ? 2 * draft->blockSize() : 0);
  kvc.dtype = backend->computeDtype();
  kvc.baseLayers = target.kvLayerShapes();
  if (draft) kvc.draftLayers = draft->kvLayerShapes();
  kv::KvCacheManager cache(kvc, backend->space());
  const auto t1 = std::chrono::steady_clock::now();

  std::unique_ptr<runtime::DFlashProposer> proposer;
  if (draft) proposer = std::make_unique<runtime::DFlashProposer>(*draft);
  runtime::DecodeEngine decoder(target, cache, proposer.get());
  tokenizer::StreamingDecoder stream(tok, /*skipSpecial=*/true);
  std::string answer;
  std::chrono::steady_clock::time_point firstToken;
  int32_t generated = 0;
  const std::vector<int32_t> stops = stopTokens(tok, target.config());
  const runtime::GenerationRequest request{prompt, o.maxNewTokens, stops, {o.temperature, o.topK, o.topP, o.seed}};
  const runtime::GenerationResult result = decoder.generate({request}, [&](int32_t, int32_t id) {
    if (generated++ == 0) firstToken = std::chrono::steady_clock::now();
    const std::string piece = stream.push(id);
    answer += piece;
    if (!o.json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
  })[0];
  const std::string tail = stream.flush();
  answer += tail;
  const auto t2 = std::chrono::steady_clock::now();
  const double loadS = std::chrono::duration<double>(t1 - t0).count();
  const double ttftS = std::chrono::duration<double>(firstToken - t1).count();
  const double decodeS = std::chrono::duration<double>(t2 - firstToken).count();
  const double tokS = generated > 1 ? (generated - 1) / decodeS : 0.0;
  const char* finish = result.finish == runtime::FinishReason::kStop ? "stop" : "length";
  if (o.json) {
    // prompt_ids and stop_ids let another implementation replay exactly this request
    // (tools/hf_greedy_check.py).
    const nlohmann::json out = {{"text", answer}, {"tokens", result.tokens},
                                {"prompt_tokens", prompt.size()}, {"prompt_ids", prompt},
                                {"stop_ids", stops}, {"finish_reason", finish},
                                {"backend", backend->name()}, {"load_s", loadS},
                                {"time_to_first_token_s", ttftS}, {"decode_tok_s", tokS}};
    nlohmann::json full = out;
    if (draft) {
      full["draft"] = o.draft;
      full["tau"] = decoder.stats().meanAcceptLength();
      full["accept_histogram"] = decoder.stats().acceptHistogram;
    }
    std::printf("%s\n", full.dump().c_str());
  } else {
    std::printf("%s\n", tail.c_str());
    std::fflush(stdout);  // the answer before the statistics line on stderr
    std::fprintf(stderr,
                 "[edgespec] %s backend: prompt %zu tokens, generated %d (%s); load %.2f s, "
                 "first token %.2f s, decode %.1f tok/s\n",
                 backend->name().c_str(), prompt.size(), generated, finish, loadS, ttftS, tokS);
    if (draft) {
      std::fprintf(stderr, "[edgespec] DFlash draft: mean accept length %.2f of block %d\n",
                   decoder.stats().meanAcceptLength(), draft->blockSize());
    }
  }
}

}  // namespace

void addGenerateCommand(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (greedy or sampled; speculative with --draft)");
  cmd->add_option("--model", options->model,
                  "HF model folder with tokenizer.json, or a GGUF file (default: the embedded SmolLM2-135M-Instruct)");
  cmd->add_option("--draft", options->draft, "DFlash draft folder (z-lab format): speculative decoding");
  cmd->add_option("-p,--prompt", options->prompt, "The user message")->capture_default_str();
  cmd->add_option("--system", options->system, "A system message");
  cmd->add_option("-n,--max-new-tokens", options->maxNewTokens, "Tokens to generate at most")
      ->capture_default_str();
  cmd->add_option("--backend", options->backend, "auto (GPU if present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--temperature", options->temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", options->topK, "Keep the k most likely tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--top-p", options->topP, "Nucleus: keep the smallest set of mass p (1 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "Seed of the request-stable sampler")->capture_default_str();
  cmd->add_flag("--raw", options->raw, "Use the prompt as raw text (no chat template)");
  cmd->add_flag("--no-think", options->noThink, "Qwen3: disable thinking (enable_thinking=false)");
  cmd->add_flag("--json", options->json, "Print one JSON object (text, tokens, timings) on stdout");
  cmd->callback([options] { runGenerate(*options); });
}

}  // namespace es::cli
