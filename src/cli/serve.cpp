#include "cli/serve.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/engine_flags.h"
#include "cli/numeric_flags.h"
#include "cli/progress_output.h"
#include "common/buffer.h"
#include "common/errors.h"
#include "common/logging.h"
#include "model/dflash_draft.h"
#include "model/gguf_weights.h"
#include "model/model_config.h"
#include "runtime/engine_builder.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/served_model.h"
#include "server/stop_signals.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"

namespace es::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWhere = "serve";
// Sequences decoded together when --max-batch is auto: a GPU step costs about the same for 16
// sequences as for one; a CPU forward costs about its rows.
constexpr int32_t kCudaMaxBatch = 16;
constexpr int32_t kCpuMaxBatch = 4;
// The context (prompt + answer) when --context is auto, capped by the model's positions: the
// KV cache holds it for each of --max-batch sequences.
constexpr int64_t kCudaDefaultContext = 8192;
constexpr int64_t kCpuDefaultContext = 2048;
constexpr int64_t kMaxQueuedLimit = 100000;
constexpr int64_t kMaxBodyBytesLimit = int64_t{1} << 30;
// HTTP threads beyond one per request the engine holds: /health, /metrics, /v1/models.
constexpr int32_t kSpareThreads = 8;

struct ServeOptions {
  EngineFlags engine{.prefixCachePages = 32};
  std::string host = "127.0.0.1";
  int32_t port = 8080;
  std::string maxBatch = "auto";
  std::string context = "auto";
  std::string prefillBudget = "auto";
  int32_t maxQueued = 64;
  int64_t maxBodyBytes = int64_t{1} << 20;
  std::string servedModelName;  // empty: the model folder's (or GGUF file's) name
};

std::string backendName(const std::string& flag) {
  if (flag != "auto") return flag;
  return cuda_device_count() > 0 ? "cuda" : "cpu";
}

// The rows a speculative step writes past a request's tokens: (W − 1) + (BS − 1) <= 2 (BS − 1).
int64_t speculativeRows(const runtime::DraftConfig& draft) {
  if (draft.kind == runtime::DraftKind::kNone) return 0;
  return 2 * (int64_t{model::DFlashDraft::blockSizeOf(draft.dir)} - 1);
}

std::string modelName(const ServeOptions& o, const fs::path& model) {
  if (!o.servedModelName.empty()) return o.servedModelName;
  const fs::path p = model.has_filename() ? model : model.parent_path();
  return model::isGgufPath(p) ? p.stem().string() : p.filename().string();
}

std::optional<tokenizer::ChatTemplate> chatTemplate(const tokenizer::BpeTokenizer& tok) {
  if (tok.spec().chatTemplate.empty()) {
    ES_LOG_WARN("serve: the model ships no chat template: /v1/chat/completions is refused");
    return std::nullopt;
  }
  try {
    return tokenizer::ChatTemplate::fromTemplateText(tok.spec().chatTemplate);
  } catch (const InvalidArgument& e) {
    ES_LOG_WARN("serve: /v1/chat/completions is refused: ", e.what());
    return std::nullopt;
  }
}

void runServe(const ServeOptions& o) {
  validateEngineFlags(o.engine, kWhere);
  const std::optional<int32_t> maxBatchFlag =
      parseAutoOrInteger(kWhere, o.maxBatch, "--max-batch", 1, runtime::kMaxEngineBatch);
  const std::optional<int32_t> contextFlag =
      parseAutoOrInteger(kWhere, o.context, "--context", 2, kv::kMaxKvCacheCapacity);
  ES_CHECK_ARG(!o.host.empty(), kWhere, "--host", "\"\"", "must be an address to listen on");

  const fs::path model = resolveModel(o.engine, kWhere);
  tokenizer::BpeTokenizer tok(loadTokenizer(model, kWhere));
  const model::ModelConfig config = model::loadModelConfig(model);
  const std::string backend = backendName(o.engine.backend);
  // Requests are not known yet: the default draft's policy sees no temperatures (it runs where
  // it pays for greedy requests, on cuda).
  const runtime::DraftConfig draft = draftConfig(o.engine, {});
  const int64_t positions = std::min(config.max_position_embeddings, model::kMaxPositions);
  const int64_t ahead = speculativeRows(draft);
  const int64_t context =
      contextFlag ? *contextFlag
                  : std::max<int64_t>(
                        2, std::min(backend == "cuda" ? kCudaDefaultContext : kCpuDefaultContext,
                                    positions - ahead));
  ES_CHECK_ARG(context + ahead <= positions, kWhere, "--context", context,
               "must be <= ", positions - ahead,
               ": the model's max_position_embeddings = ", positions,
               ahead ? detail::concat(" less ", ahead, " rows a speculative step writes ahead")
                     : std::string());
  const int32_t maxBatch = maxBatchFlag.value_or(backend == "cuda" ? kCudaMaxBatch : kCpuMaxBatch);

  std::unique_ptr<ProgressPrinter> progress = o.engine.quiet ? nullptr : stderrProgress();
  const std::unique_ptr<runtime::Engine> engine = runtime::buildEngine({
      .model = model,
      .backend = o.engine.backend,
      .draft = draft,
      .verifyWidth = verifyWidthFlag(o.engine, kWhere),
      // Requests of every batch size meet one engine: with a draft and --verify-width auto the
      // decoder picks each step's width (W = 1 where speculation does not pay).
      .adaptiveWidth = true,
      .prefillChunk = prefillChunkFlag(o.engine, kWhere),
      .prefillBudget = parseAutoOrInteger(kWhere, o.prefillBudget, "--prefill-budget",
                                          runtime::kMinPrefillChunk, runtime::kMaxPrefillChunk),
      .maxBatch = maxBatch,
      .longestPrompt = context - 1,
      .longestRequest = context,
      .prefixCachePages = o.engine.prefixCachePages,
      .maxQueued = o.maxQueued,
      .onStatus = printStatus,
      .onProgress = progress ? progress->callback() : nullptr,
  });
  const server::ServedModel served{.name = modelName(o, model),
                                   .tokenizer = &tok,
                                   .chatTemplate = chatTemplate(tok),
                                   .stopTokens = stopTokens(tok, engine->target().config()),
                                   .context = context};

  // SIGPIPE would end the process on a write to a client that left; the write's error says so.
  std::signal(SIGPIPE, SIG_IGN);
  // Before any thread of the server starts: they inherit the blocked signals.
  server::StopSignals signals;
  server::EngineLoop loop(engine->decoder(), engine->cache());
  server::HttpServer http(served, loop,
                          {.host = o.host,
                           .port = o.port,
                           .maxBodyBytes = static_cast<size_t>(o.maxBodyBytes),
                           .threads = engine->plan().maxBatch + o.maxQueued + kSpareThreads});
  const int32_t port = http.bind();
  signals.setStopAction([&http] { http.drain(); });
  std::fprintf(stderr, "edgespec serve: listening on http://%s:%d (model %s)\n", o.host.c_str(),
               port, served.name.c_str());
  std::fflush(stderr);
  http.run();
  loop.waitIdle();
  std::fprintf(stderr, "edgespec serve: stopped\n");
}

}  // namespace

void addServeCommand(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, "
      "/health, /metrics (docs/server.md)");
  addEngineFlags(cmd, options->engine);
  cmd->add_option("--host", options->host, "Address to listen on")->capture_default_str();
  addIntegerFlag(cmd, "--port", options->port, 0, 65535, "TCP port (0: a free one)");
  cmd->add_option("--max-batch", options->maxBatch,
                  "Requests decoded together: auto (" + std::to_string(kCudaMaxBatch) +
                      " on cuda, " + std::to_string(kCpuMaxBatch) +
                      " on cpu) or an integer in [1, " + std::to_string(runtime::kMaxEngineBatch) +
                      "]")
      ->capture_default_str();
  cmd->add_option("--context", options->context,
                  "Tokens of prompt + answer one request may use (sizes the KV cache): auto (" +
                      std::to_string(kCudaDefaultContext) + " on cuda, " +
                      std::to_string(kCpuDefaultContext) +
                      " on cpu, within the model's max_position_embeddings) or an integer")
      ->capture_default_str();
  cmd->add_option("--prefill-budget", options->prefillBudget,
                  "Prompt rows the engine prefills between two decode steps (an arriving prompt "
                  "delays the running answers by about this many rows a step): auto (one prefill "
                  "forward) or an integer in [" +
                      std::to_string(runtime::kMinPrefillChunk) + ", " +
                      std::to_string(runtime::kMaxPrefillChunk) + "]")
      ->capture_default_str();
  addIntegerFlag(cmd, "--max-queued", options->maxQueued, 1, kMaxQueuedLimit,
                 "Requests that may wait for a batch slot; more are answered 503");
  addIntegerFlag(cmd, "--max-body-bytes", options->maxBodyBytes, 1024, kMaxBodyBytesLimit,
                 "Largest request body; larger ones are answered 413");
  cmd->add_option("--served-model-name", options->servedModelName,
                  "The model's name in /v1/models and requests (default: the model folder's or "
                  "GGUF file's name)");
  cmd->callback([options] { runServe(*options); });
}

}  // namespace es::cli
