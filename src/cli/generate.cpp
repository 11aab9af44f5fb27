#include "cli/generate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "cli/numeric_flags.h"
#include "cli/progress_output.h"
#include "common/errors.h"
#include "common/input_file.h"
#include "common/logging.h"
#include "common/number_text.h"
#include "common/progress.h"
#include "model/model_config.h"
#include "runtime/engine_builder.h"
#include "runtime/request_settings.h"
#include "server/stop_strings.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct GenerateOptions {
  EngineFlags engine;  // --model, --draft, --backend, ... (cli/engine_flags.h)
  std::string prompt = "Write one sentence about the sea.";
  std::string system;
  runtime::RequestSettings request;  // --max-new-tokens and the sampling flags
  bool raw = false;                  // no chat template
  bool noThink = false;              // Qwen3: enable_thinking = false
  bool json = false;
  std::vector<std::string> stops;  // stop strings
  std::string inputFile;           // a JSON batch of requests
  bool warmup = false;             // an untimed short run first (graph capture, caches)
  bool oneAtATime = false;         // --input-file requests decoded alone, one after another
};

// One request: its text and settings (from the command line, or one entry of --input-file).
struct PromptSpec {
  std::string prompt;
  std::string system;
  runtime::RequestSettings settings;  // validated (runtime::validateRequestSettings)
};

// The request file's numeric fields, read and checked by runtime/request_settings.h as the flags
// of the same names are.
constexpr runtime::RequestField kNumericFields[] = {
    runtime::RequestField::kMaxNewTokens, runtime::RequestField::kTemperature,
    runtime::RequestField::kTopK, runtime::RequestField::kTopP, runtime::RequestField::kSeed};

constexpr int32_t kMaxRequests = 64;                // one batch
constexpr int32_t kMaxSequentialRequests = 100000;  // --one-at-a-time (one request in memory)

// Well-formed UTF-8 (shortest forms, no surrogates, <= U+10FFFF).
bool isValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80           ? 1
                  : (c >> 5) == 0x6  ? 2
                  : (c >> 4) == 0xE  ? 3
                  : (c >> 3) == 0x1E ? 4
                                     : 0;
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

// One --input-file entry: a prompt string, or an object whose fields override `defaults`.
PromptSpec parseRequestEntry(const nlohmann::json& e, const std::string& where, PromptSpec r) {
  if (e.is_string()) {
    r.prompt = e.get<std::string>();
    return r;
  }
  if (!e.is_object() || !e.contains("prompt") || !e.at("prompt").is_string()) {
    ES_THROW(FormatError, where, " must be a string or an object with a string \"prompt\"");
  }
  static const char* const kKeys[] = {"prompt", "system", "max_new_tokens", "temperature", "top_k",
                                      "top_p",  "seed"};
  for (const auto& [key, value] : e.items()) {
    const auto known = [&](const char* k) { return key == k; };
    if (std::find_if(std::begin(kKeys), std::end(kKeys), known) == std::end(kKeys)) {
      ES_THROW(FormatError, where, ": unknown field '", key,
               "' (known: prompt, system, max_new_tokens, temperature, top_k, top_p, seed)");
    }
  }
  r.prompt = e.at("prompt").get<std::string>();
  if (e.contains("system")) {
    if (!e.at("system").is_string())
      ES_THROW(FormatError, where, ": field 'system' must be a string");
    r.system = e.at("system").get<std::string>();
  }
  // A number's JSON text is parsed as a flag's would be, so both take and refuse the same
  // values; any other JSON value (a string, true, null) fails that parse and is refused too.
  for (const runtime::RequestField field : kNumericFields) {
    const std::string key(runtime::requestFieldKey(field));
    if (e.contains(key)) {
      runtime::setRequestField(r.settings, field, e.at(key).dump(), where,
                               runtime::FieldNaming::kKey);
    }
  }
  runtime::validateRequestSettings(r.settings, where, runtime::FieldNaming::kKey);
  return r;
}

// The requests: the command line's one, or --input-file's JSON array whose entries are a prompt
// string or an object {"prompt", "system"?, "max_new_tokens"?, "temperature"?, "top_k"?,
// "top_p"?, "seed"?}; fields left out take the command line's values.
std::vector<PromptSpec> readRequests(const GenerateOptions& o) {
  const PromptSpec defaults{.prompt = o.prompt, .system = o.system, .settings = o.request};
  if (o.inputFile.empty()) return {defaults};
  const std::string text =
      readInputFile(o.inputFile, kMaxRequestFileBytes, "generate", "--input-file");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ES_THROW(FormatError, o.inputFile, ": not valid JSON (", e.what(), ")");
  }
  const size_t maxRequests = o.oneAtATime ? kMaxSequentialRequests : kMaxRequests;
  if (!doc.is_array() || doc.empty() || doc.size() > maxRequests) {
    ES_THROW(FormatError, o.inputFile, ": must be a JSON array of 1 to ", maxRequests, " requests",
             o.oneAtATime ? "" : " (--one-at-a-time takes more)", " (it is ",
             doc.is_array() ? std::to_string(doc.size()) + " entries" : std::string("not an array"),
             ")");
  }
  std::vector<PromptSpec> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    out.push_back(
        parseRequestEntry(doc[i], o.inputFile + ": entry " + std::to_string(i), defaults));
  }
  return out;
}

// A request's answer as text: streaming decode (never half a UTF-8 character) and stop strings
// (server/stop_strings.h: the answer ends before the first one, which is never printed; a tail
// that could begin one is held back), and what may be printed so far.
class AnswerText {
 public:
  AnswerText(const tokenizer::BpeTokenizer& tok, const std::vector<std::string>& stops)
      : stream_(tok, /*skipSpecial=*/true), stops_(stops) {}
  // Adds a token; returns the text that may be printed now.
  std::string push(int32_t id) {
    if (stops_.stopped()) return {};
    return stops_.push(stream_.push(id));
  }
  // The end of the answer; returns the rest to print.
  std::string finish() {
    std::string out = stops_.stopped() ? std::string() : stops_.push(stream_.flush());
    return out + stops_.finish();
  }
  bool stopped() const { return stops_.stopped(); }
  const std::string& text() const { return stops_.text(); }

 private:
  tokenizer::StreamingDecoder stream_;
  server::StopStringMatcher stops_;
};

// Checks of the flags that concern the command line only (the engine's own values are checked
// by runtime::validateEngineConfig), before anything loads.
void validateOptions(const GenerateOptions& o) {
  runtime::validateRequestSettings(o.request, "generate", runtime::FieldNaming::kFlag);
  validateEngineFlags(o.engine, "generate");
  for (const std::string& stop : o.stops) {
    ES_CHECK_ARG(!stop.empty() && stop.size() <= 256, "generate", "--stop", "\"" + stop + "\"",
                 "must be 1 to 256 bytes");
    // A stop string cuts the answer where it starts: it must be whole characters.
    ES_CHECK_ARG(isValidUtf8(stop), "generate", "--stop", "(bytes)", "must be valid UTF-8");
  }
  ES_CHECK_ARG(!o.oneAtATime || !o.inputFile.empty(), "generate", "--one-at-a-time", "set",
               "needs --input-file (it decodes the file's requests one after another)");
}

// Each request's prompt as token ids: the chat template (unless --raw) around its messages.
std::vector<std::vector<int32_t>> encodePrompts(const GenerateOptions& o,
                                                const tokenizer::BpeTokenizer& tok,
                                                const std::vector<PromptSpec>& specs) {
  const size_t n = specs.size();
  std::vector<std::vector<int32_t>> prompts;
  for (size_t r = 0; r < n; ++r) {
    const PromptSpec& spec = specs[r];
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
    // Named where the user wrote it: the flag, or the file's entry.
    if (o.inputFile.empty()) {
      ES_CHECK_ARG(!prompts.back().empty(), "generate", "--prompt", "\"\"", "encodes to no tokens");
    } else {
      ES_CHECK_ARG(!prompts.back().empty(), o.inputFile + ": entry " + std::to_string(r),
                   "field 'prompt'", "\"\"", "encodes to no tokens");
    }
  }
  return prompts;
}

// The draft: the flags' choice; the default draft's policy sees every request's temperature.
runtime::DraftConfig draftConfig(const GenerateOptions& o, const std::vector<PromptSpec>& specs) {
  std::vector<float> temperatures;
  for (const PromptSpec& spec : specs) {
    temperatures.push_back(runtime::toSamplingConfig(spec.settings).temperature);
  }
  return cli::draftConfig(o.engine, std::move(temperatures));
}

runtime::EngineConfig engineConfig(const GenerateOptions& o, const fs::path& model,
                                   const std::vector<PromptSpec>& specs,
                                   const std::vector<std::vector<int32_t>>& prompts,
                                   ProgressCallback onProgress) {
  int64_t longestPrompt = 0, longestRequest = 0;
  for (size_t r = 0; r < specs.size(); ++r) {
    const int64_t length = static_cast<int64_t>(prompts[r].size());
    longestPrompt = std::max(longestPrompt, length);
    longestRequest = std::max(longestRequest, length + specs[r].settings.maxNewTokens);
  }
  return {.model = model,
          .backend = o.engine.backend,
          .draft = draftConfig(o, specs),
          .verifyWidth = verifyWidthFlag(o.engine, "generate"),
          .prefillChunk = prefillChunkFlag(o.engine, "generate"),
          // All requests form one batch, or one at a time.
          .maxBatch = o.oneAtATime ? 1 : static_cast<int32_t>(specs.size()),
          .longestPrompt = longestPrompt,
          .longestRequest = longestRequest,
          .prefixCachePages = o.engine.prefixCachePages,
          .onStatus = printStatus,
          .onProgress = std::move(onProgress)};
}

// What generate() gave for one batch and how long it took.
struct BatchRun {
  std::vector<runtime::GenerationResult> results;
  std::vector<AnswerText> answers;
  std::vector<std::string> tails;  // each answer's text not yet printed when it finished
  int64_t generated = 0;           // tokens, the prefills' first ones included
  double ttftS = 0.0;              // from generate() to the first token
  double tokS = 0.0;               // tokens after each request's first, per second of the loop
};

// Everything a batch shares: the engine, the tokenizer, the encoded requests.
struct GenerateContext {
  const GenerateOptions& options;
  runtime::Engine& engine;
  const tokenizer::BpeTokenizer& tok;
  const std::vector<PromptSpec>& specs;
  const std::vector<std::vector<int32_t>>& prompts;
  const std::vector<int32_t>& stopIds;
  double loadS = 0.0;
};

// The first step of each (batch size, greedy/sampled) runs eagerly and is captured as a CUDA
// graph inside the loop; an untimed run of the same requests, a few steps long, pays that (for
// this batch size) so the timings are steady-state. Its tokens are discarded. With
// --prefix-cache-pages it also publishes the prompts: the timed run then reuses them.
void warmUp(runtime::DecodeEngine& decoder, std::vector<runtime::GenerationRequest> requests) {
  for (runtime::GenerationRequest& q : requests) {
    q.maxNewTokens = std::min<int32_t>(q.maxNewTokens, 4);
    q.stopWhen = nullptr;  // the answers belong to the timed run
  }
  decoder.generate(requests, [](int32_t, int32_t) {});
}

// Decodes requests [first, first + count) as one batch; a lone request without --json streams
// its answer to stdout as it comes.
BatchRun decodeBatch(const GenerateContext& c, int32_t first, int32_t count) {
  BatchRun run;
  run.answers.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) run.answers.emplace_back(c.tok, c.options.stops);
  std::vector<runtime::GenerationRequest> requests;
  for (int32_t i = 0; i < count; ++i) {
    const size_t r = static_cast<size_t>(first + i);
    std::vector<AnswerText>& answers = run.answers;
    requests.push_back(
        {.prompt = c.prompts[r],
         .maxNewTokens = static_cast<int32_t>(c.specs[r].settings.maxNewTokens),
         .stopTokens = c.stopIds,
         .sampling = runtime::toSamplingConfig(c.specs[r].settings),
         .stopWhen = [&answers, i] { return answers[static_cast<size_t>(i)].stopped(); }});
  }
  runtime::DecodeEngine& decoder = c.engine.decoder();
  if (c.options.warmup) warmUp(decoder, requests);
  const bool streaming = !c.options.json && c.specs.size() == 1;
  const Clock::time_point start = Clock::now();
  Clock::time_point firstToken;
  run.results = decoder.generate(requests, [&](int32_t i, int32_t id) {
    if (run.generated++ == 0) firstToken = Clock::now();
    const std::string piece = run.answers[static_cast<size_t>(i)].push(id);
    if (streaming) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
  });
  for (AnswerText& a : run.answers) run.tails.push_back(a.finish());
  const Clock::time_point end = Clock::now();
  if (run.generated == 0) firstToken = end;  // every request failed before its first token
  run.ttftS = std::chrono::duration<double>(firstToken - start).count();
  const double decodeS = std::chrono::duration<double>(end - firstToken).count();
  run.tokS = run.generated > count ? static_cast<double>(run.generated - count) / decodeS : 0.0;
  return run;
}

// One JSON line for request r (index `i` of its batch). prompt_ids and stop_ids let another
// implementation replay exactly this request (tools/hf_greedy_check.py).
nlohmann::json answerJson(const GenerateContext& c, const BatchRun& run, int32_t r, int32_t i) {
  const runtime::GenerationResult& result = run.results[static_cast<size_t>(i)];
  const AnswerText& answer = run.answers[static_cast<size_t>(i)];
  const runtime::EnginePlan& plan = c.engine.plan();
  const runtime::DecodeEngine& decoder = c.engine.decoder();
  nlohmann::json out = {{"text", answer.text()},
                        {"tokens", result.tokens},
                        {"prompt_tokens", c.prompts[static_cast<size_t>(r)].size()},
                        {"prompt_ids", c.prompts[static_cast<size_t>(r)]},
                        {"stop_ids", c.stopIds},
                        {"finish_reason", runtime::finishReasonName(result.finish)},
                        {"backend", c.engine.backend().name()},
                        {"load_s", c.loadS},
                        {"time_to_first_token_s", run.ttftS},
                        {"decode_tok_s", run.tokS},
                        {"prefill_chunk", plan.maxTokens}};
  if (c.specs.size() > 1) out["request"] = r;
  if (result.finish == runtime::FinishReason::kError) out["error"] = result.error;
  if (answer.stopped()) out["stop_string_hit"] = true;
  if (c.engine.cache().prefixReuse()) out["reused_prompt_tokens"] = decoder.stats().reusedTokens;
  if (c.engine.draft()) {
    out["draft"] = plan.draftDir.string();
    out["verify_width"] = plan.verifyWidth;
    out["tau"] = decoder.stats().meanAcceptLength();
    out["accept_histogram"] = decoder.stats().acceptHistogram;
  }
  return out;
}

// Prints the batch's answers (the rest of a streamed one, or each whole, or one JSON line
// each), then, without --json, its statistics on stderr.
void printBatch(const GenerateContext& c, const BatchRun& run, int32_t first, int32_t count) {
  const bool streaming = !c.options.json && c.specs.size() == 1;
  for (int32_t i = 0; i < count; ++i) {
    const int32_t r = first + i;
    if (c.options.json) {
      std::printf("%s\n", answerJson(c, run, r, i).dump().c_str());
    } else if (streaming) {
      std::printf("%s\n", run.tails[static_cast<size_t>(i)].c_str());
    } else {
      std::printf("=== request %d (%s) ===\n%s\n", r,
                  runtime::finishReasonName(run.results[static_cast<size_t>(i)].finish),
                  run.answers[static_cast<size_t>(i)].text().c_str());
    }
  }
  std::fflush(stdout);  // the answers before the statistics line on stderr
  if (c.options.json) return;
  std::fprintf(stderr,
               "[edgespec] %s backend: %d request(s), prompt %zu tokens, generated %lld; load %.2f "
               "s, first token %.2f s, decode %.1f tok/s\n",
               c.engine.backend().name().c_str(), count,
               c.prompts[static_cast<size_t>(first)].size(), static_cast<long long>(run.generated),
               c.loadS, run.ttftS, run.tokS);
  if (c.engine.draft()) {
    std::fprintf(stderr,
                 "[edgespec] DFlash draft: mean accept length %.2f of verify width %d (block %d)\n",
                 c.engine.decoder().stats().meanAcceptLength(), c.engine.plan().verifyWidth,
                 c.engine.plan().blockSize);
  }
}

void runGenerate(const GenerateOptions& o) {
  validateOptions(o);
  const std::vector<PromptSpec> specs = readRequests(o);
  const fs::path model = resolveModel(o.engine, "generate");
  const Clock::time_point loadStart = Clock::now();
  tokenizer::BpeTokenizer tok(loadTokenizer(model, "generate"));
  const std::vector<std::vector<int32_t>> prompts = encodePrompts(o, tok, specs);
  std::unique_ptr<ProgressPrinter> progress = o.engine.quiet ? nullptr : stderrProgress();
  const std::unique_ptr<runtime::Engine> engine = runtime::buildEngine(
      engineConfig(o, model, specs, prompts, progress ? progress->callback() : nullptr));
  const std::vector<int32_t> stopIds = stopTokens(tok, engine->target().config());
  const GenerateContext context{
      .options = o,
      .engine = *engine,
      .tok = tok,
      .specs = specs,
      .prompts = prompts,
      .stopIds = stopIds,
      .loadS = std::chrono::duration<double>(Clock::now() - loadStart).count()};
  const int32_t n = static_cast<int32_t>(specs.size());
  const int32_t batch = engine->plan().maxBatch;
  // A failed request (FinishReason::kError) does not stop the others; the command then fails
  // with each one's error ("request R: why"), after every answer is printed.
  std::string failures;
  for (int32_t first = 0; first < n; first += batch) {
    const int32_t count = std::min(batch, n - first);
    const BatchRun run = decodeBatch(context, first, count);
    printBatch(context, run, first, count);
    for (int32_t i = 0; i < count; ++i) {
      const runtime::GenerationResult& result = run.results[static_cast<size_t>(i)];
      if (result.finish != runtime::FinishReason::kError) continue;
      failures += (failures.empty() ? "request " : "; request ") + std::to_string(first + i) +
                  ": " + result.error;
    }
  }
  if (!failures.empty()) ES_THROW(Error, failures);
}

}  // namespace

namespace {

// A request setting's flag: its text goes through runtime::setRequestField (the request file's
// parser), so CLI11 never wraps or coerces it; validateOptions then checks the bounds.
void addRequestFlag(CLI::App* cmd, const std::string& names, runtime::RequestField field,
                    runtime::RequestSettings& settings, const std::string& description) {
  const std::string shownDefault =
      field == runtime::RequestField::kMaxNewTokens  ? std::to_string(settings.maxNewTokens)
      : field == runtime::RequestField::kTemperature ? formatDouble(settings.temperature)
      : field == runtime::RequestField::kTopK        ? std::to_string(settings.topK)
      : field == runtime::RequestField::kTopP        ? formatDouble(settings.topP)
                                                     : std::to_string(settings.seed);
  cmd->add_option_function<std::string>(
         names,
         [&settings, field](const std::string& text) {
           runtime::setRequestField(settings, field, text, "generate", runtime::FieldNaming::kFlag);
         },
         description)
      ->type_name("NUMBER")
      ->default_str(shownDefault);
}

}  // namespace

void addGenerateCommand(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text from a prompt (greedy or sampled; speculative with --draft)");
  addEngineFlags(cmd, options->engine);
  cmd->add_option("-p,--prompt", options->prompt, "The user message")->capture_default_str();
  cmd->add_option("--system", options->system, "A system message");
  cmd->add_option(
      "--input-file", options->inputFile,
      "JSON array of requests decoded as one batch: prompt strings or objects {prompt, system, "
      "max_new_tokens, temperature, top_k, top_p, seed} (missing fields: the command line's)");
  cmd->add_option("--stop", options->stops, "Stop string (repeatable): the answer ends before it");
  addRequestFlag(cmd, "-n,--max-new-tokens", runtime::RequestField::kMaxNewTokens, options->request,
                 "Tokens to generate at most");
  addRequestFlag(
      cmd, "--temperature", runtime::RequestField::kTemperature, options->request,
      "Sampling temperature, 0 to " + formatDouble(runtime::kMaxTemperature) + " (0 = greedy)");
  addRequestFlag(
      cmd, "--top-k", runtime::RequestField::kTopK, options->request,
      "Keep the k most likely tokens, 0 to " + std::to_string(runtime::kMaxTopK) + " (0 = off)");
  addRequestFlag(cmd, "--top-p", runtime::RequestField::kTopP, options->request,
                 "Nucleus: keep the smallest set of mass p, in (0, 1] (1 = off)");
  addRequestFlag(cmd, "--seed", runtime::RequestField::kSeed, options->request,
                 "Seed of the request-stable sampler, 0 to 2^64 - 1");
  cmd->add_flag("--raw", options->raw, "Use the prompt as raw text (no chat template)");
  cmd->add_flag("--no-think", options->noThink, "Qwen3: disable thinking (enable_thinking=false)");
  cmd->add_flag("--json", options->json, "Print one JSON object (text, tokens, timings) on stdout");
  cmd->add_flag("--one-at-a-time", options->oneAtATime,
                "With --input-file: decode each request alone (batch 1), one after another, in "
                "this one process "
                "(the model loads once; up to " +
                    std::to_string(kMaxSequentialRequests) + " requests)");
  cmd->add_flag("--warmup", options->warmup,
                "Run the requests for a few tokens first, untimed (graph capture), so timings are "
                "steady-state");
  cmd->callback([options] { runGenerate(*options); });
}

}  // namespace es::cli
