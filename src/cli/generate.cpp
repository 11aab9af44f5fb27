#include "cli/generate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <iterator>
#include <cmath>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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
  bool noDraft = false;  // never the default model's shipped draft
  std::string verifyWidth = "auto";  // rows per speculative step (resolveVerifyWidth)
  std::string prefillChunk = "auto";  // rows per prefill forward (resolvePrefillChunk)
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
  std::vector<std::string> stops;  // stop strings
  std::string inputFile;           // a JSON batch of requests
  int64_t prefixCachePages = 0;    // retained pages for prefix reuse (0 = off)
  bool warmup = false;             // an untimed short run first (graph capture, caches)
  bool oneAtATime = false;         // --input-file requests decoded alone, one after another
};

// One request: its text and settings (from the command line, or one entry of --input-file).
struct PromptSpec {
  std::string prompt;
  std::string system;
  int32_t maxNewTokens = 0;
  runtime::SamplingConfig sampling;
};

constexpr int32_t kMaxRequests = 64;              // one batch
constexpr int32_t kMaxSequentialRequests = 100000;  // --one-at-a-time (one request in memory at once)

// Well-formed UTF-8 (shortest forms, no surrogates, <= U+10FFFF).
bool isValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

// --input-file: a JSON array whose entries are a prompt string or an object
// {"prompt", "system"?, "max_new_tokens"?, "temperature"?, "top_k"?, "top_p"?, "seed"?}; fields
// left out take the command line's values.
std::vector<PromptSpec> readRequests(const GenerateOptions& o) {
  const PromptSpec defaults{o.prompt, o.system, o.maxNewTokens, {o.temperature, o.topK, o.topP, o.seed}};
  if (o.inputFile.empty()) return {defaults};
  std::ifstream in(o.inputFile);
  if (!in) ES_THROW(InvalidArgument, "generate: argument '--input-file' = ", o.inputFile, " cannot be read");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    ES_THROW(FormatError, o.inputFile, ": not valid JSON (", e.what(), ")");
  }
  const size_t maxRequests = o.oneAtATime ? kMaxSequentialRequests : kMaxRequests;
  if (!doc.is_array() || doc.empty() || doc.size() > maxRequests) {
    ES_THROW(FormatError, o.inputFile, ": must be a JSON array of 1 to ", maxRequests, " requests",
             o.oneAtATime ? "" : " (--one-at-a-time takes more)", " (it is ",
             doc.is_array() ? std::to_string(doc.size()) + " entries" : std::string("not an array"), ")");
  }
  std::vector<PromptSpec> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& e = doc[i];
    const std::string where = o.inputFile + ": entry " + std::to_string(i);
    PromptSpec r = defaults;
    if (e.is_string()) {
      r.prompt = e.get<std::string>();
    } else if (e.is_object() && e.contains("prompt") && e.at("prompt").is_string()) {
      static const char* const kKeys[] = {"prompt", "system", "max_new_tokens", "temperature", "top_k", "top_p", "seed"};
      for (const auto& [key, value] : e.items()) {
        if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; }) == std::end(kKeys)) {
          ES_THROW(FormatError, where, ": unknown field '", key,
                   "' (known: prompt, system, max_new_tokens, temperature, top_k, top_p, seed)");
        }
      }
      // Numbers are checked before narrowing: no silent wrap, truncation or infinity.
      auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t fallback) {
        if (!e.contains(key)) return fallback;
        const nlohmann::json& v = e.at(key);
        if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(hi)
                                                               : v.get<int64_t>() < lo || v.get<int64_t>() > hi)) {
          ES_THROW(FormatError, where, ": field '", key, "' = ", v.dump(), " must be an integer in [", lo, ", ", hi, "]");
        }
        return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
      };
      auto real = [&](const char* key, double lo, double hi, double fallback) {
        if (!e.contains(key)) return fallback;
        const nlohmann::json& v = e.at(key);
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || v.get<double>() > hi) {
          ES_THROW(FormatError, where, ": field '", key, "' = ", v.dump(), " must be a number in [", lo, ", ", hi, "]");
        }
        return v.get<double>();
      };
      r.prompt = e.at("prompt").get<std::string>();
      if (e.contains("system")) {
        if (!e.at("system").is_string()) ES_THROW(FormatError, where, ": field 'system' must be a string");
        r.system = e.at("system").get<std::string>();
      }
      r.maxNewTokens = static_cast<int32_t>(integer("max_new_tokens", 1, 1 << 20, r.maxNewTokens));
      r.sampling.temperature = static_cast<float>(real("temperature", 0.0, 100.0, r.sampling.temperature));
      r.sampling.topK = static_cast<int32_t>(integer("top_k", 0, INT32_MAX, r.sampling.topK));
      r.sampling.topP = static_cast<float>(real("top_p", 1e-6, 1.0, r.sampling.topP));
      if (e.contains("seed")) {
        const nlohmann::json& v = e.at("seed");
        if (!v.is_number_unsigned()) {
          ES_THROW(FormatError, where, ": field 'seed' = ", v.dump(), " must be an integer in [0, 2^64)");
        }
        r.sampling.seed = v.get<uint64_t>();
      }
    } else {
      ES_THROW(FormatError, where, " must be a string or an object with a string \"prompt\"");
    }
    out.push_back(std::move(r));
  }
  return out;
}

// A request's answer as text: streaming decode (never half a UTF-8 character), stop strings
// (the answer ends before the first one; it is never printed: the last longestStop − 1 bytes
// are held back until they cannot start one), and what may be printed so far.
class AnswerText {
 public:
  AnswerText(const tokenizer::BpeTokenizer& tok, const std::vector<std::string>& stops)
      : stream_(tok, /*skipSpecial=*/true), stops_(stops) {
    for (const std::string& s : stops_) holdBack_ = std::max(holdBack_, s.size() - 1);
  }
  // Adds a token; returns the text that may be printed now.
  std::string push(int32_t id) {
    if (stopped_) return {};
    append(stream_.push(id));
    return printable();
  }
  // The end of the answer; returns the rest to print.
  std::string finish() {
    if (!stopped_) append(stream_.flush());
    held_ = false;
    return printable();
  }
  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }

 private:
  void append(const std::string& piece) {
    const size_t from = text_.size() > holdBack_ ? text_.size() - holdBack_ : 0;  // new matches only
    text_ += piece;
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) cut = std::min(cut, text_.find(s, from));
    if (cut != std::string::npos) {
      text_.resize(cut);
      stopped_ = true;
    }
  }
  std::string printable() {
    const size_t end = stopped_ || !held_ ? text_.size() : (text_.size() > holdBack_ ? text_.size() - holdBack_ : 0);
    if (end <= printed_) return {};
    std::string out = text_.substr(printed_, end - printed_);
    printed_ = end;
    return out;
  }

  tokenizer::StreamingDecoder stream_;
  std::vector<std::string> stops_;
  std::string text_;
  size_t holdBack_ = 0, printed_ = 0;
  bool stopped_ = false, held_ = true;
};

// Where tools/fetch_default_model.sh puts the embedded default model.
fs::path defaultModelDir() {
  const char* cache = std::getenv("ES_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const fs::path base = cache ? fs::path(cache) : fs::path(home ? home : ".") / ".cache" / "edgespec";
  return base / "smollm2-135m-instruct";
}

// Where tools/fetch_default_model.sh installs the default model's trained DFlash draft (shipped
// in the repository under models/, docs/training.md).
fs::path defaultDraftDir() { return defaultModelDir().parent_path() / "smollm2-135m-instruct-dflash"; }

// The draft to run: --draft, else the default model's own draft where defaultDraftPays.
std::string chooseDraft(const GenerateOptions& o, const ops::Backend& backend,
                        const std::vector<PromptSpec>& specs) {
  if (!o.draft.empty() || o.noDraft || !o.model.empty()) return o.draft;
  const fs::path dir = defaultDraftDir();
  if (!fs::exists(dir / "config.json")) return "";
  std::vector<float> temperatures;
  for (const PromptSpec& spec : specs) temperatures.push_back(spec.sampling.temperature);
  if (!defaultDraftPays(backend.name(), temperatures)) {
    std::fprintf(stderr, "[edgespec] plain decoding: the default draft is used on a GPU at temperature 0 only, "
                         "where it is faster; on the CPU it about breaks even at best (0.92-1.06x plain at a "
                         "verify width of %d rows) (--draft %s forces it)\n", kCpuVerifyWidth, dir.c_str());
    return "";
  }
  return dir.string();
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
  ES_CHECK_ARG(!(o.noDraft && !o.draft.empty()), "generate", "--no-draft", "set",
               "cannot be combined with --draft ", o.draft);
  ES_CHECK_ARG(o.prefixCachePages >= 0, "generate", "--prefix-cache-pages", o.prefixCachePages,
               "must be >= 0 (0 = prefix reuse off)");
  for (const std::string& stop : o.stops) {
    ES_CHECK_ARG(!stop.empty() && stop.size() <= 256, "generate", "--stop", "\"" + stop + "\"",
                 "must be 1 to 256 bytes");
    // A stop string cuts the answer where it starts: it must be whole characters.
    ES_CHECK_ARG(isValidUtf8(stop), "generate", "--stop", "(bytes)", "must be valid UTF-8");
  }
  ES_CHECK_ARG(!o.oneAtATime || !o.inputFile.empty(), "generate", "--one-at-a-time", "set",
               "needs --input-file (it decodes the file's requests one after another)");
  const std::vector<PromptSpec> specs = readRequests(o);
  const int32_t n = static_cast<int32_t>(specs.size());
  // Requests decoded together: all of them (one batch), or one (--one-at-a-time).
  const int32_t batchRows = o.oneAtATime ? 1 : n;
  const fs::path dir = resolveModel(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto backend = ops::makeBackend(o.backend);
  tokenizer::BpeTokenizer tok(loadTokenizer(dir));
  const std::string draftDir = chooseDraft(o, *backend, specs);

  std::vector<std::vector<int32_t>> prompts;
  for (int32_t r = 0; r < n; ++r) {
    const PromptSpec& spec = specs[static_cast<size_t>(r)];
    std::string text = spec.prompt;
    bool templated = false;
    if (!o.raw) {
      if (tok.spec().chatTemplate.empty()) {
        if (r == 0) ES_LOG_WARN("the model ships no chat template: the prompt is used as raw text");
      } else {
        std::vector<tokenizer::ChatMessage> messages;
        if (!spec.system.empty()) messages.push_back({"system", spec.system});
        messages.push_back({"user", spec.prompt});
        text = tokenizer::ChatTemplate::fromTemplateText(tok.spec().chatTemplate)
                   .render(messages, true, !o.noThink);
        templated = true;
      }
    }
    // A rendered chat template already carries the model's begin-of-text marker where it wants
    // one (Llama-3 writes <|begin_of_text|> itself), as transformers' apply_chat_template does:
    // no second bos then. Raw prompts get the tokenizer's own bos rule.
    prompts.push_back(templated ? tok.encode(text, /*parseSpecial=*/true)
                                : tok.encodePrompt(text, /*parseSpecial=*/false));
    ES_CHECK_ARG(!prompts.back().empty(), "generate", n == 1 ? "--prompt" : "--input-file prompt " + std::to_string(r),
                 "\"\"", "encodes to no tokens");
  }

  std::fprintf(stderr, "[edgespec] loading %s on the %s backend\n", dir.string().c_str(),
               backend->name().c_str());
  // Rows of one forward: prefill chunks (resolvePrefillChunk), and one verify block per request
  // (the draft's block size, read from its config before anything loads).
  const std::vector<int32_t> taps =
      draftDir.empty() ? std::vector<int32_t>{} : model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(dir));
  const int32_t blockSize = draftDir.empty() ? 1 : model::DFlashDraft::blockSizeOf(draftDir);
  // W: the rows a speculative step verifies per request (1 plain), which a forward must hold.
  const int32_t verifyWidth = draftDir.empty() ? 1 : resolveVerifyWidth(o.verifyWidth, backend->name(), blockSize);
  if (draftDir.empty() && o.verifyWidth != "auto") {
    std::fprintf(stderr, "[edgespec] --verify-width %s has no effect: plain decoding (no draft)\n",
                 o.verifyWidth.c_str());
  }
  int64_t longestPrompt = 0;
  for (const auto& p : prompts) longestPrompt = std::max<int64_t>(longestPrompt, static_cast<int64_t>(p.size()));
  const int32_t prefillChunk = resolvePrefillChunk(o.prefillChunk, backend->name(), longestPrompt);
  const int32_t maxTokens = static_cast<int32_t>(std::max<int64_t>(prefillChunk, int64_t{batchRows} * verifyWidth));
  // Logits only for a step's rows (a prefill chunk needs its last row's): a 4,096-row prefill
  // chunk then costs no 4,096-row f32 logits buffer.
  model::TargetModel target(dir, *backend, maxTokens, taps, batchRows * verifyWidth);
  std::unique_ptr<model::DFlashDraft> draft;
  if (!draftDir.empty()) {
    std::fprintf(stderr, "[edgespec] loading the DFlash draft %s%s\n", draftDir.c_str(),
                 o.draft.empty() ? " (the default model's; --no-draft to decode without it)" : "");
    draft = std::make_unique<model::DFlashDraft>(draftDir, *backend, target, maxTokens, batchRows);
  }
  kv::KvCacheConfig kvc;
  kvc.maxBatchSize = batchRows;
  int64_t longest = 0;
  for (int32_t r = 0; r < n; ++r) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[static_cast<size_t>(r)].size()) +
                                             specs[static_cast<size_t>(r)].maxNewTokens);
  }
  // A speculative step may write 2·(BS − 1) rows past the budget (docs/runtime.md, capacity).
  kvc.maxSequenceLength = static_cast<int32_t>(longest + (draft ? 2 * draft->blockSize() : 0));
  kvc.dtype = backend->computeDtype();
  kvc.baseLayers = target.kvLayerShapes();
  if (draft) kvc.draftLayers = draft->kvLayerShapes();
  if (o.prefixCachePages > 0) {
    // Named here so the error speaks of the flag; planKvCache checks the same bound.
    const int64_t limit = kv::kMaxKvPoolPages - kv::computeMinimumKvPoolPages(kvc.maxBatchSize, kvc.maxSequenceLength);
    ES_CHECK_ARG(o.prefixCachePages <= limit, "generate", "--prefix-cache-pages", o.prefixCachePages,
                 "must be <= ", limit, " (kMaxKvPoolPages less the minimum pool for this batch)");
    kvc.prefixCachePages = o.prefixCachePages;
    // Shared pages hold whole prompt blocks, which a bounded window pool drops as it slides:
    // with reuse, sliding layers keep full-capacity storage (the window stays a mask).
    kvc.slidingWindowStorage = kv::SlidingWindowStorage::kFullCapacity;
  }
  kv::KvCacheManager cache(kvc, backend->space());
  const auto t1 = std::chrono::steady_clock::now();

  std::unique_ptr<runtime::DFlashProposer> proposer;
  if (draft) proposer = std::make_unique<runtime::DFlashProposer>(*draft);
  runtime::EngineOptions engineOptions;
  if (draft) engineOptions.verifyWidth = verifyWidth;
  runtime::DecodeEngine decoder(target, cache, proposer.get(), engineOptions);
  const std::vector<int32_t> stops = stopTokens(tok, target.config());
  const double loadS = std::chrono::duration<double>(t1 - t0).count();
  // Decodes requests [first, first + count) as one batch and prints their answers (with --json
  // one line each, the timings and draft statistics of this batch).
  auto decodeAndReport = [&](int32_t first, int32_t count) {
    std::vector<AnswerText> answers;
    std::vector<runtime::GenerationRequest> requests;
    answers.reserve(static_cast<size_t>(count));
    for (int32_t i = 0; i < count; ++i) answers.emplace_back(tok, o.stops);
    for (int32_t i = 0; i < count; ++i) {
      const size_t r = static_cast<size_t>(first + i);
      runtime::GenerationRequest q{prompts[r], specs[r].maxNewTokens, stops, specs[r].sampling};
      q.stopWhen = [&answers, i] { return answers[static_cast<size_t>(i)].stopped(); };
      requests.push_back(std::move(q));
    }
    if (o.warmup) {
      // The first step of each (batch size, greedy/sampled) runs eagerly and is captured as a CUDA
      // graph inside the loop; an untimed run of the same requests, a few steps long, pays that
      // (for this batch size) so the timings below are steady-state. Its tokens are discarded.
      // With --prefix-cache-pages it also publishes the prompts: the timed run then reuses them.
      std::vector<runtime::GenerationRequest> warm = requests;
      for (runtime::GenerationRequest& q : warm) {
        q.maxNewTokens = std::min<int32_t>(q.maxNewTokens, 4);
        q.stopWhen = nullptr;  // the answers belong to the timed run
      }
      decoder.generate(warm, [](int32_t, int32_t) {});
    }
    const auto tStart = std::chrono::steady_clock::now();  // TTFT counts from here
    const bool streaming = !o.json && n == 1;
    std::chrono::steady_clock::time_point firstToken;
    int64_t generated = 0;
    const std::vector<runtime::GenerationResult> results = decoder.generate(requests, [&](int32_t i, int32_t id) {
      if (generated++ == 0) firstToken = std::chrono::steady_clock::now();
      const std::string piece = answers[static_cast<size_t>(i)].push(id);
      if (streaming) {
        std::fputs(piece.c_str(), stdout);
        std::fflush(stdout);
      }
    });
    std::vector<std::string> tails;
    for (AnswerText& a : answers) tails.push_back(a.finish());
    const auto t2 = std::chrono::steady_clock::now();
    const double ttftS = std::chrono::duration<double>(firstToken - tStart).count();
    const double decodeS = std::chrono::duration<double>(t2 - firstToken).count();
    // Tokens after each request's first (which comes from its prefill), per second of the loop.
    const double tokS = generated > count ? static_cast<double>(generated - count) / decodeS : 0.0;
    for (int32_t i = 0; i < count; ++i) {
      const int32_t r = first + i;
      const runtime::GenerationResult& result = results[static_cast<size_t>(i)];
      const AnswerText& answer = answers[static_cast<size_t>(i)];
      const char* finish = result.finish == runtime::FinishReason::kStop ? "stop" : "length";
      if (o.json) {
        // prompt_ids and stop_ids let another implementation replay exactly this request
        // (tools/hf_greedy_check.py).
        nlohmann::json out = {{"text", answer.text()}, {"tokens", result.tokens},
                              {"prompt_tokens", prompts[static_cast<size_t>(r)].size()},
                              {"prompt_ids", prompts[static_cast<size_t>(r)]}, {"stop_ids", stops},
                              {"finish_reason", finish}, {"backend", backend->name()}, {"load_s", loadS},
                              {"time_to_first_token_s", ttftS}, {"decode_tok_s", tokS},
                              {"prefill_chunk", maxTokens}};
        if (n > 1) out["request"] = r;
        if (answer.stopped()) out["stop_string_hit"] = true;
        if (cache.prefixReuse()) out["reused_prompt_tokens"] = decoder.stats().reusedTokens;
        if (draft) {
          out["draft"] = draftDir;
          out["verify_width"] = verifyWidth;
          out["tau"] = decoder.stats().meanAcceptLength();
          out["accept_histogram"] = decoder.stats().acceptHistogram;
        }
        std::printf("%s\n", out.dump().c_str());
      } else if (streaming) {
        std::printf("%s\n", tails[static_cast<size_t>(i)].c_str());
      } else {
        std::printf("=== request %d (%s) ===\n%s\n", r, finish, answer.text().c_str());
      }
    }
    std::fflush(stdout);  // the answers before the statistics line on stderr
    if (!o.json) {
      std::fprintf(stderr,
                   "[edgespec] %s backend: %d request(s), prompt %zu tokens, generated %lld; load %.2f s, "
                   "first token %.2f s, decode %.1f tok/s\n",
                   backend->name().c_str(), count, prompts[static_cast<size_t>(first)].size(),
                   static_cast<long long>(generated), loadS, ttftS, tokS);
      if (draft) {
        std::fprintf(stderr, "[edgespec] DFlash draft: mean accept length %.2f of verify width %d (block %d)\n",
                     decoder.stats().meanAcceptLength(), verifyWidth, draft->blockSize());
      }
    }
  };
  if (o.oneAtATime) {
    for (int32_t r = 0; r < n; ++r) decodeAndReport(r, 1);
  } else {
    decodeAndReport(0, n);
  }
}

}  // namespace

// Measured (docs/perf.md): run 5's draft on the H200 1.84x plain decoding at temperature 0 but
// 0.96x at temperature 1 (a sampled step runs the full-row sampler for the proposals and again
// for the verify). On the 2-core CPU, at its best verify width (kCpuVerifyWidth = 4 rows,
// 2026-11-30) 0.92-0.97x at temperature 0 for 128-token answers, 1.06x for 256, and 0.65x at 1
// (0.41x with the whole 16-row block): the 4-row verify costs ~1.3 decode steps and the draft's
// 16-row block ~0.7 more, against τ 2.1-2.5. Not a clear gain: plain decoding there.
// Temperatures in between were not measured: plain decoding.
bool defaultDraftPays(std::string_view backendName, const std::vector<float>& temperatures) {
  if (backendName != "cuda") return false;
  for (float t : temperatures) {
    if (t != 0.0f) return false;
  }
  return true;
}

int32_t resolveVerifyWidth(std::string_view flag, std::string_view backendName, int32_t blockSize) {
  if (flag == "auto") return backendName == "cuda" ? blockSize : std::min(kCpuVerifyWidth, blockSize);
  int32_t w = 0;
  const auto [end, ec] = std::from_chars(flag.data(), flag.data() + flag.size(), w);
  ES_CHECK_ARG(ec == std::errc() && end == flag.data() + flag.size() && w >= 2 && w <= blockSize, "generate",
               "--verify-width", std::string(flag), "must be auto or an integer in [2, draft block size = ",
               blockSize, "]");
  return w;
}

int32_t resolvePrefillChunk(std::string_view flag, std::string_view backendName, int64_t longestPrompt) {
  if (flag == "auto") {
    if (backendName != "cuda") return 256;
    const int64_t rounded = (std::max<int64_t>(longestPrompt, 1) + 255) / 256 * 256;
    return static_cast<int32_t>(std::clamp<int64_t>(rounded, 256, kMaxAutoPrefillChunk));
  }
  int32_t rows = 0;
  const auto [end, ec] = std::from_chars(flag.data(), flag.data() + flag.size(), rows);
  ES_CHECK_ARG(ec == std::errc() && end == flag.data() + flag.size() && rows >= 16 && rows <= 65536, "generate",
               "--prefill-chunk", std::string(flag), "must be auto or an integer in [16, 65536]");
  return rows;
}

void addGenerateCommand(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (greedy or sampled; speculative with --draft)");
  cmd->add_option("--model", options->model,
                  "HF model folder with tokenizer.json, or a GGUF file (default: the embedded SmolLM2-135M-Instruct)");
  cmd->add_option("--draft", options->draft,
                  "DFlash draft folder (z-lab format): speculative decoding (default: the default model's "
                  "trained draft, on a GPU at temperature 0)");
  cmd->add_flag("--no-draft", options->noDraft, "Plain decoding even where the default draft would run");
  cmd->add_option("--verify-width", options->verifyWidth,
                  "Rows a speculative step verifies per request, 2 to the draft's block size: the anchor and "
                  "the first drafts of the block (auto: the block size on cuda, " +
                      std::to_string(kCpuVerifyWidth) + " on cpu)")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", options->prefillChunk,
                  "Rows of one prefill forward (each reads every weight): auto (cuda: the longest prompt, "
                  "256 to 4096; cpu: 256) or an integer in [16, 65536]")
      ->capture_default_str();
  cmd->add_option("-p,--prompt", options->prompt, "The user message")->capture_default_str();
  cmd->add_option("--system", options->system, "A system message");
  cmd->add_option("--input-file", options->inputFile,
                  "JSON array of requests decoded as one batch: prompt strings or objects {prompt, system, "
                  "max_new_tokens, temperature, top_k, top_p, seed} (missing fields: the command line's)");
  cmd->add_option("--stop", options->stops, "Stop string (repeatable): the answer ends before it");
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
  cmd->add_option("--prefix-cache-pages", options->prefixCachePages,
                  "Prefix reuse: KV pages (128 tokens each) retained beyond the active minimum for "
                  "prompt blocks requests share (0 = off)")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object (text, tokens, timings) on stdout");
  cmd->add_flag("--one-at-a-time", options->oneAtATime,
                "With --input-file: decode each request alone (batch 1), one after another, in this one process "
                "(the model loads once; up to " + std::to_string(kMaxSequentialRequests) + " requests)");
  cmd->add_flag("--warmup", options->warmup,
                "Run the requests for a few tokens first, untimed (graph capture), so timings are steady-state");
  cmd->callback([options] { runGenerate(*options); });
}

}  // namespace es::cli
