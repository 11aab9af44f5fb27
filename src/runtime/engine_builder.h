#pragma once
// The one place that builds an engine: EngineConfig (what the caller asks for) -> Engine (the
// backend, the target model, the draft, the KV cache and the DecodeEngine that runs them).
// `edgespec generate`, `edgespec bench` and any other front end describe what they want here and
// leave the sizing to buildEngine(): the KV capacity (kvCapacityTokens, runtime/kv_capacity.h),
// the verify width
// (resolveVerifyWidth), the prefill chunk (resolvePrefillChunk), the rows of one target forward
// and the default-draft policy (defaultDraftPays) live in this file and its .cpp only.
//
// Errors name the option a user sets (`--verify-width`, `--prefill-chunk`, ...): the CLI's flags
// carry the same names, so a message points at what to change.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/progress.h"
#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/decode_engine.h"
#include "runtime/dflash_proposer.h"
#include "runtime/kv_capacity.h"

namespace es::runtime {

enum class DraftKind {
  kNone,           // plain decoding
  kDFlash,         // the DFlash draft in DraftConfig::dir
  kDefaultDFlash,  // the DFlash draft in DraftConfig::dir where defaultDraftPays, else plain
  kReplay,         // a replay draft of DraftConfig::replayBlockSize (tests and benchmarks: the
                   // caller makes the ReplayProposer, which needs a recorded run)
};

struct DraftConfig {
  DraftKind kind = DraftKind::kNone;
  std::filesystem::path dir = {};  // kDFlash, kDefaultDFlash
  int32_t replayBlockSize = 16;    // kReplay: BS in [2, kMaxReplayBlockSize]
  // kDefaultDFlash: every request's temperature (the default draft runs only if all are 0).
  std::vector<float> temperatures = {};
};

struct EngineConfig {
  std::filesystem::path model = {};  // an HF model folder or a GGUF file
  std::string backend = "auto";      // auto (cuda when a device is usable), cpu or cuda
  DraftConfig draft = {};
  // W, the rows one speculative step verifies per sequence; nullopt: resolveVerifyWidth's rule.
  // An explicit width needs a draft and lies in [2, BS].
  std::optional<int32_t> verifyWidth = std::nullopt;
  // With a draft and verifyWidth unset: the decoder picks each step's W (EngineOptions::
  // adaptiveWidth, runtime/speculation_policy.h) up to resolveVerifyWidth's width, W = 1 (plain)
  // included. An explicit verifyWidth fixes W. Off: every step verifies resolveVerifyWidth's W.
  bool adaptiveWidth = false;
  // adaptiveWidth: W of the steps whose batch holds a sampled request (EngineOptions::
  // sampledWidth): 0 the largest width; 1 plain steps, the tokens of decoding without a draft.
  int32_t sampledWidth = 0;
  // Rows of one prefill forward; nullopt: resolvePrefillChunk's rule. Else in
  // [kMinPrefillChunk, kMaxPrefillChunk].
  std::optional<int32_t> prefillChunk = std::nullopt;
  // Prompt rows one engine step prefills at most before its decode step
  // (EngineOptions::prefillTokensPerStep); nullopt: one target forward's rows. Else in
  // [kMinPrefillChunk, kMaxPrefillChunk].
  std::optional<int32_t> prefillBudget = std::nullopt;
  int32_t maxBatch = 1;       // sequences decoded together, [1, kMaxEngineBatch]
  int64_t longestPrompt = 1;  // tokens of the longest prompt (sizes the auto prefill chunk)
  // The longest request, prompt + maxNewTokens: kvCapacityTokens sizes the cache from it.
  int64_t longestRequest = 1;
  int64_t prefixCachePages = 0;  // KV pages retained for prefix reuse (0: off)
  int32_t maxQueued = 256;       // requests DecodeEngine::submit lets wait (EngineOptions), >= 1
  // Told what is being loaded, and why a default draft is not used (one line each, no newline).
  std::function<void(const std::string&)> onStatus = {};
  // Told the target's layers as they load and each prompt's prefill (common/progress.h).
  ProgressCallback onProgress = {};
};

inline constexpr int32_t kMaxEngineBatch = 256;
inline constexpr int32_t kMaxReplayBlockSize = 32;  // a replay draft's largest block
inline constexpr int32_t kMinPrefillChunk = 16;
inline constexpr int32_t kMaxPrefillChunk = 65536;
// The verify width on the cpu backend when none is asked for: the fastest of 3 to 16 rows on a
// 2-core CPU with the default model's draft (a CPU forward costs about its rows, and most steps
// accept few tokens).
inline constexpr int32_t kCpuVerifyWidth = 4;
// The auto prefill chunk's ceiling on cuda: a prompt up to this long prefills in one forward.
inline constexpr int32_t kMaxAutoPrefillChunk = 4096;

// W for a draft of block size BS: the request if set (checked: [2, BS], an InvalidArgument
// naming --verify-width otherwise); else BS on cuda, where a verify of BS rows costs about one
// decode step, and min(kCpuVerifyWidth, BS) on cpu, where a forward is compute-bound and each
// row costs.
int32_t resolveVerifyWidth(std::optional<int32_t> requested, std::string_view backendName,
                           int32_t blockSize);

// Rows of one prefill forward (each reads every weight once): the request if set (checked:
// [kMinPrefillChunk, kMaxPrefillChunk], an InvalidArgument naming --prefill-chunk otherwise);
// else on cuda the longest prompt rounded up to a multiple of 256 within [256,
// kMaxAutoPrefillChunk], so a prompt up to 4,096 tokens prefills in one forward (on Qwen3-8B one
// 4,096-row forward takes about 0.6x the time of 256-row chunks); on cpu 256, since the
// workspace's activations grow with the rows and the CPU gains nothing from longer ones.
int32_t resolvePrefillChunk(std::optional<int32_t> requested, std::string_view backendName,
                            int64_t longestPrompt);

// Prompt rows one engine step prefills at most: the request if set (checked: [kMinPrefillChunk,
// kMaxPrefillChunk], an InvalidArgument naming --prefill-budget otherwise); else maxTokens, the
// rows of one target forward (one prefill chunk a step).
int32_t resolvePrefillBudget(std::optional<int32_t> requested, int32_t maxTokens);

// Whether the default model's shipped draft runs (DraftKind::kDefaultDFlash): only where it
// measured faster than plain decoding, on the cuda backend with every request at temperature 0.
// At temperature 1 a sampled step runs the full-row sampler for the proposals and again for the
// verify (about 0.96x plain on an H200); on a 2-core CPU it stays at 0.92-1.06x plain at the
// best verify width. Temperatures in between are untested: plain decoding.
bool defaultDraftPays(std::string_view backendName, const std::vector<float>& temperatures);

// Every value of `config` checked on its own (before anything loads): an InvalidArgument names
// the option and its limit. Limits that depend on the draft's block size are checked by
// buildEngine once the draft's config is read.
void validateEngineConfig(const EngineConfig& config);

// What buildEngine resolved.
struct EnginePlan {
  std::filesystem::path draftDir = {};  // the DFlash draft loaded, empty when none
  bool speculative = false;             // a DFlash or replay draft
  bool defaultDraftSkipped = false;     // kDefaultDFlash resolved to plain decoding
  int32_t blockSize = 1;                // BS (1 plain)
  int32_t verifyWidth = 1;              // W (1 plain)
  int32_t prefillChunk = 0;             // rows of one prefill forward
  int32_t maxTokens = 0;      // rows of one target forward: max(prefill chunk, batch · W)
  int32_t prefillBudget = 0;  // prompt rows one engine step prefills at most
  int32_t maxLogitRows = 0;   // rows of one forward with logits: batch · W
  int32_t maxBatch = 1;
  int64_t kvCapacity = 0;  // kvCapacityTokens(longestRequest, W, BS)
};

class Engine {
 public:
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  const EnginePlan& plan() const { return plan_; }
  ops::Backend& backend() const { return *backend_; }
  model::TargetModel& target() const { return *target_; }
  model::DFlashDraft* draft() const { return draft_.get(); }  // null unless a DFlash draft
  kv::KvCacheManager& cache() const { return *cache_; }
  // The decoder on cache(): plain, or with the DFlash draft at plan().verifyWidth. A replay
  // draft has none: its caller builds a DecodeEngine (on a cache of cacheConfig()) around the
  // ReplayProposer once it has the run to replay.
  DecodeEngine& decoder() const;
  // The cache's configuration, for callers that need more caches of the same shape (a benchmark
  // running plain and speculative decoding side by side).
  const kv::KvCacheConfig& cacheConfig() const { return cacheConfig_; }

 private:
  friend std::unique_ptr<Engine> buildEngine(const EngineConfig& config);
  Engine() = default;

  EnginePlan plan_;
  std::unique_ptr<ops::Backend> backend_;
  std::unique_ptr<model::TargetModel> target_;
  std::unique_ptr<model::DFlashDraft> draft_;
  kv::KvCacheConfig cacheConfig_;
  std::unique_ptr<kv::KvCacheManager> cache_;
  std::unique_ptr<DFlashProposer> proposer_;
  std::unique_ptr<DecodeEngine> decoder_;
};

// Validates `config`, makes the backend, resolves the draft, the verify width and the prefill
// chunk, loads the target (with the draft's taps) and the draft, plans the KV cache by
// kvCapacityTokens and makes the decoder.
std::unique_ptr<Engine> buildEngine(const EngineConfig& config);

}  // namespace es::runtime
