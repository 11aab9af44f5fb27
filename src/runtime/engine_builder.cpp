#include "runtime/engine_builder.h"

#include <algorithm>
#include <utility>

#include "common/errors.h"
#include "kv/page_geometry.h"
#include "model/model_config.h"

namespace es::runtime {
namespace {

constexpr const char* kWhere = "engine";

bool isSpeculative(DraftKind kind) { return kind != DraftKind::kNone; }

// The draft folder to load for `config`, empty for none (a replay draft loads nothing).
// kDefaultDFlash resolves here by defaultDraftPays.
std::filesystem::path chooseDraftDir(const EngineConfig& config, const ops::Backend& backend,
                                     bool* defaultSkipped) {
  const DraftConfig& d = config.draft;
  *defaultSkipped = false;
  if (d.kind == DraftKind::kDFlash) return d.dir;
  if (d.kind != DraftKind::kDefaultDFlash) return {};
  if (defaultDraftPays(backend.name(), d.temperatures)) return d.dir;
  *defaultSkipped = true;
  return {};
}

// The plan's widths and row counts, from the resolved draft and the prompts' lengths.
EnginePlan planEngine(const EngineConfig& config, const std::string& backendName,
                      const std::filesystem::path& draftDir, bool defaultSkipped) {
  EnginePlan plan{.draftDir = draftDir,
                  .speculative = !draftDir.empty() || config.draft.kind == DraftKind::kReplay,
                  .defaultDraftSkipped = defaultSkipped,
                  .maxBatch = config.maxBatch};
  if (!draftDir.empty()) plan.blockSize = model::DFlashDraft::blockSizeOf(draftDir);
  if (config.draft.kind == DraftKind::kReplay) plan.blockSize = config.draft.replayBlockSize;
  if (plan.speculative) {
    plan.verifyWidth = resolveVerifyWidth(config.verifyWidth, backendName, plan.blockSize);
  }
  plan.prefillChunk = resolvePrefillChunk(config.prefillChunk, backendName, config.longestPrompt);
  // A step's batch · W rows are one forward, all with logits; a prefill chunk needs only its
  // last row's logits, so a long chunk costs no logits buffer of its size.
  plan.maxLogitRows = config.maxBatch * plan.verifyWidth;
  plan.maxTokens = std::max(plan.prefillChunk, plan.maxLogitRows);
  plan.prefillBudget = resolvePrefillBudget(config.prefillBudget, plan.maxTokens);
  plan.kvCapacity = kvCapacityTokens(config.longestRequest, plan.verifyWidth, plan.blockSize);
  ES_CHECK_ARG(plan.kvCapacity <= kv::kMaxKvCacheCapacity, kWhere, "prompt + max new tokens",
               config.longestRequest,
               "must be <= ", kv::kMaxKvCacheCapacity - (plan.kvCapacity - config.longestRequest),
               " (the largest KV capacity less the rows a speculative step writes past it)");
  return plan;
}

kv::KvCacheConfig planCache(const EngineConfig& config, const EnginePlan& plan,
                            const ops::Backend& backend, const model::TargetModel& target,
                            const model::DFlashDraft* draft) {
  kv::KvCacheConfig kvc{
      .maxBatchSize = plan.maxBatch,
      .maxSequenceLength = static_cast<int32_t>(plan.kvCapacity),
      .dtype = backend.computeDtype(),
      .baseLayers = target.kvLayerShapes(),
      .draftLayers = draft ? draft->kvLayerShapes() : std::vector<kv::KvLayerShape>{}};
  if (config.prefixCachePages > 0) {
    // Checked here so the error names the option; the cache's plan checks the same bound.
    const int64_t limit = kv::kMaxKvPoolPages -
                          kv::computeMinimumKvPoolPages(kvc.maxBatchSize, kvc.maxSequenceLength);
    ES_CHECK_ARG(config.prefixCachePages <= limit, kWhere, "--prefix-cache-pages",
                 config.prefixCachePages, "must be <= ", limit,
                 " (kMaxKvPoolPages less the minimum pool for this batch)");
    kvc.prefixCachePages = config.prefixCachePages;
    // Shared pages hold whole prompt blocks, which a bounded window pool drops as it slides:
    // with reuse, sliding layers keep full-capacity storage (the window stays a mask).
    kvc.slidingWindowStorage = kv::SlidingWindowStorage::kFullCapacity;
  }
  return kvc;
}

// The RoPE table of `model` (the target or the draft, named by `option`) must hold every position
// the plan's requests write: an InvalidArgument in terms the user controls otherwise (the model's
// max_position_embeddings against the prompt, --max-new-tokens and the speculative rows).
void checkPositions(const EngineConfig& config, const EnginePlan& plan, const char* option,
                    const std::filesystem::path& model, bool defaultDraft) {
  const model::ModelConfig c = model::loadModelConfig(model);
  const int64_t positions = std::min<int64_t>(c.max_position_embeddings, model::kMaxPositions);
  if (plan.kvCapacity <= positions) return;
  const int64_t ahead = plan.kvCapacity - config.longestRequest;
  const std::string speculative =
      ahead == 0
          ? std::string()
          : detail::concat(", plus ", ahead, " rows a speculative step at verify width ",
                           plan.verifyWidth, " and block size ", plan.blockSize, " writes ahead");
  const std::string remedy = std::string("shorten the prompt or --max-new-tokens") +
                             (std::string_view(option) == "--draft"
                                  ? (defaultDraft ? ", or decode without the draft (--no-draft)"
                                                  : ", or decode without this draft")
                                  : "");
  ES_CHECK_ARG(false, kWhere, option, model.string(),
               "has max_position_embeddings = ", c.max_position_embeddings,
               ", but the longest request needs ", plan.kvCapacity,
               " positions (prompt + max new tokens = ", config.longestRequest, speculative, "); ",
               remedy);
}

void status(const EngineConfig& config, const std::string& line) {
  if (config.onStatus) config.onStatus(line);
}

}  // namespace

int32_t resolveVerifyWidth(std::optional<int32_t> requested, std::string_view backendName,
                           int32_t blockSize) {
  if (!requested) return backendName == "cuda" ? blockSize : std::min(kCpuVerifyWidth, blockSize);
  ES_CHECK_ARG(*requested >= 2 && *requested <= blockSize, kWhere, "--verify-width", *requested,
               "must be auto or an integer in [2, draft block size = ", blockSize, "]");
  return *requested;
}

int32_t resolvePrefillChunk(std::optional<int32_t> requested, std::string_view backendName,
                            int64_t longestPrompt) {
  if (!requested) {
    if (backendName != "cuda") return 256;
    const int64_t rounded = (std::max<int64_t>(longestPrompt, 1) + 255) / 256 * 256;
    return static_cast<int32_t>(std::clamp<int64_t>(rounded, 256, kMaxAutoPrefillChunk));
  }
  ES_CHECK_ARG(*requested >= kMinPrefillChunk && *requested <= kMaxPrefillChunk, kWhere,
               "--prefill-chunk", *requested, "must be auto or an integer in [", kMinPrefillChunk,
               ", ", kMaxPrefillChunk, "]");
  return *requested;
}

int32_t resolvePrefillBudget(std::optional<int32_t> requested, int32_t maxTokens) {
  if (!requested) return maxTokens;
  ES_CHECK_ARG(*requested >= kMinPrefillChunk && *requested <= kMaxPrefillChunk, kWhere,
               "--prefill-budget", *requested, "must be auto or an integer in [", kMinPrefillChunk,
               ", ", kMaxPrefillChunk, "]");
  return *requested;
}

bool defaultDraftPays(std::string_view backendName, const std::vector<float>& temperatures) {
  if (backendName != "cuda") return false;
  return std::all_of(temperatures.begin(), temperatures.end(), [](float t) { return t == 0.0f; });
}

void validateEngineConfig(const EngineConfig& c) {
  ES_CHECK_ARG(!c.model.empty(), kWhere, "--model", "\"\"",
               "is required (a model folder or GGUF file)");
  ES_CHECK_ARG(c.backend == "auto" || c.backend == "cpu" || c.backend == "cuda", kWhere,
               "--backend", c.backend, "must be auto, cpu or cuda");
  const DraftConfig& d = c.draft;
  ES_CHECK_ARG(d.kind == DraftKind::kNone || d.kind == DraftKind::kReplay || !d.dir.empty(), kWhere,
               "--draft", "\"\"", "must name a DFlash draft folder");
  if (d.kind == DraftKind::kReplay) {
    ES_CHECK_ARG(d.replayBlockSize >= 2 && d.replayBlockSize <= kMaxReplayBlockSize, kWhere,
                 "--block-size", d.replayBlockSize, "must be in [2, ", kMaxReplayBlockSize, "]");
  }
  if (c.verifyWidth) {
    ES_CHECK_ARG(isSpeculative(d.kind), kWhere, "--verify-width", *c.verifyWidth,
                 "needs a draft (plain decoding verifies one row)");
    ES_CHECK_ARG(*c.verifyWidth >= 2, kWhere, "--verify-width", *c.verifyWidth,
                 "must be auto or an integer in [2, draft block size]");
  }
  if (c.prefillChunk) resolvePrefillChunk(c.prefillChunk, "", 1);  // the range check
  if (c.prefillBudget) resolvePrefillBudget(c.prefillBudget, 1);   // the range check
  ES_CHECK_ARG(c.maxBatch >= 1 && c.maxBatch <= kMaxEngineBatch, kWhere, "--batch", c.maxBatch,
               "must be in [1, ", kMaxEngineBatch, "]");
  ES_CHECK_ARG(c.longestPrompt >= 1, kWhere, "prompt length", c.longestPrompt, "must be >= 1");
  ES_CHECK_ARG(c.longestRequest > c.longestPrompt, kWhere, "prompt + max new tokens",
               c.longestRequest, "must exceed the longest prompt (", c.longestPrompt,
               "): every request generates a token");
  ES_CHECK_ARG(c.prefixCachePages >= 0, kWhere, "--prefix-cache-pages", c.prefixCachePages,
               "must be >= 0 (0 = prefix reuse off)");
  ES_CHECK_ARG(c.maxQueued >= 1, kWhere, "--max-queued", c.maxQueued, "must be >= 1");
}

Engine::~Engine() = default;

DecodeEngine& Engine::decoder() const {
  ES_CHECK_ARG(decoder_ != nullptr, "Engine::decoder", "draft kind", "replay",
               "has no built decoder (make one around the ReplayProposer)");
  return *decoder_;
}

std::unique_ptr<Engine> buildEngine(const EngineConfig& config) {
  validateEngineConfig(config);
  std::unique_ptr<Engine> e(new Engine());
  e->backend_ = ops::makeBackend(config.backend);
  const std::string backendName = e->backend_->name();
  bool defaultSkipped = false;
  const std::filesystem::path draftDir = chooseDraftDir(config, *e->backend_, &defaultSkipped);
  if (defaultSkipped) {
    status(config,
           "plain decoding: the default draft runs on the cuda backend with greedy requests "
           "only, where it is faster than plain decoding (--draft " +
               config.draft.dir.string() + " forces it)");
    if (config.verifyWidth) {
      status(config, "--verify-width " + std::to_string(*config.verifyWidth) +
                         " has no effect: plain decoding (no draft)");
    }
  }
  e->plan_ = planEngine(config, backendName, draftDir, defaultSkipped);
  const EnginePlan& plan = e->plan_;
  // Before any weight loads: the RoPE tables must reach the last position a request writes.
  checkPositions(config, plan, "--model", config.model, false);
  if (!draftDir.empty()) {
    checkPositions(config, plan, "--draft", draftDir,
                   config.draft.kind == DraftKind::kDefaultDFlash);
  }

  status(config, "loading " + config.model.string() + " on the " + backendName + " backend");
  const std::vector<int32_t> taps =
      draftDir.empty()
          ? std::vector<int32_t>{}
          : model::DFlashDraft::requiredTargetTaps(draftDir, model::loadModelConfig(config.model));
  e->target_ = std::make_unique<model::TargetModel>(config.model, *e->backend_, plan.maxTokens,
                                                    taps, plan.maxLogitRows, config.onProgress);
  if (!draftDir.empty()) {
    status(config, "loading the DFlash draft " + draftDir.string() +
                       (config.draft.kind == DraftKind::kDefaultDFlash
                            ? " (the default model's; --no-draft to decode without it)"
                            : ""));
    // Every target forward's rows become draft context: the draft takes maxTokens rows a call.
    e->draft_ = std::make_unique<model::DFlashDraft>(draftDir, *e->backend_, *e->target_,
                                                     plan.maxTokens, plan.maxBatch);
  }
  e->cacheConfig_ = planCache(config, plan, *e->backend_, *e->target_, e->draft_.get());
  e->cache_ = std::make_unique<kv::KvCacheManager>(e->cacheConfig_, e->backend_->space());
  if (config.draft.kind == DraftKind::kReplay) return e;
  if (e->draft_) e->proposer_ = std::make_unique<DFlashProposer>(*e->draft_);
  const bool adaptive = e->draft_ && config.adaptiveWidth && !config.verifyWidth;
  e->decoder_ = std::make_unique<DecodeEngine>(
      *e->target_, *e->cache_, e->proposer_.get(),
      EngineOptions{.verifyWidth = e->draft_ ? plan.verifyWidth : 0,
                    .adaptiveWidth = adaptive,
                    .sampledWidth = adaptive ? config.sampledWidth : 0,
                    .onProgress = config.onProgress,
                    .maxQueued = config.maxQueued,
                    .prefillTokensPerStep = plan.prefillBudget});
  return e;
}

}  // namespace es::runtime
