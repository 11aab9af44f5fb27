#pragma once
// The decode engine: plain and speculative (DFlash) decoding for a batch of requests through one
// device-resident loop (spec §6). runtime::buildEngine (runtime/engine_builder.h) sizes and
// builds one with its target, draft and cache; tests also construct it directly.
//
// Requests come and go between steps: submit() queues a request (bounded FIFO); a step() first
// prefills arriving prompts, at most EngineOptions::prefillTokensPerStep rows, then runs one
// device step of the decoding requests; a request leaves the batch as soon as it is done (stop
// token, budget, error, cancel), releasing its slot and pages, and its result waits in
// takeFinished(). generate() is submit() of every request, then step() until idle, with every
// prefill before the first decode step (nothing streams meanwhile).
//
// Slots. The cache keeps active slots as the prefix [0, activeCount) and compaction keeps their
// order; the engine keeps the decoding requests in slots [0, D) and the requests still
// prefilling after them, in admission order. The decode step (and its CUDA graph, keyed by
// batch size) covers B = D slots; the oldest prefilling request is at slot D, so when its prompt
// is in, it decodes by growing D. A prefill chunk writes only its own slot's K/V (and, with a
// draft, its draft context), so the decoding slots' device state survives it.
//
// Prefill. A step spends its budget oldest first: the admitted request still prefilling, then
// queued requests admitted in order while a slot is free and the cache takes them. A chunk is
// min(target maxTokens, budget) rows from the first prompt position not yet in the cache (and
// bounded by the sliding-window reservation), each one cache step (beginStep, forward,
// completeStep); a chunk is never cut to fit what is left of the budget, so a request's chunks
// depend only on it and the options, never on when it arrived. A request whose prompt completes
// samples its first token then and decodes in the same step; with prefix reuse it publishes its
// prompt's blocks then, so requests admitted after it share them.
//
// Admission. submit() refuses (InvalidArgument) a request that can never run: prompt +
// maxNewTokens (and the rows a speculative step writes past them) beyond the KV capacity or the
// RoPE tables; one that is valid waits in the queue (QueueFull past maxQueued) until a slot is
// free and the cache takes it. Admission reserves every page the request may touch: without
// prefix reuse a slot owns its identity-mapped pages (the whole capacity); with it admit(prompt,
// positions) pins the reused blocks and allocates private pages up to positionsNeeded, evicting
// unused records (a pool of at least computeMinimumKvPoolPages always serves maxBatch such
// requests). Nothing is allocated later, and every page returns when the request ends, fails or
// is cancelled, prefilling or decoding (KvCacheManager::pageCounts counts them).
//
// A step whose batch holds any sampled request takes the sampled path; its greedy requests are
// rows of temperature 0, which every sampling kernel (sampleRows, specVerify, the sampled
// proposals) resolves as top-1 = argmax with ties to the lower index and the same non-finite
// flag, so a greedy request's tokens do not depend on its batch-mates' settings.
//
// Prefill runs on the host path in chunks (with a draft each chunk becomes draft
// context at once, round 0); the first token comes from the prompt's last row, chosen on the
// backend like a step's tokens. Then every iteration is one device step of verify width W (W = 1
// plain; with a proposer 1 <= W <= BS, see below) with no host work inside:
//   proposal (W > 1: proposal inputs + propose) and the verify inputs of the W rows
//   → forward of the W rows [anchor, d_1 … d_{W−1}] per sequence (causal)
//   → accept: greedy (argmax; greedy EAGLE accept for W > 1) or sampled (spec §3: sampleRows
//     for W = 1, specVerify for W > 1 with argmax drafts, q = onehot)
//   → commit on the device (spec_commit: lengths, next anchor)
//   → draft context of the committed rows (delta metadata + appendContext; W = 1 too, so the
//     draft can propose again at any later step).
// The draft always proposes a whole block of BS rows (block diffusion needs every position of
// the block), but only its first W rows are scored and verified: a step of W < BS rows emits at
// most W tokens and costs about W target rows, which pays where a forward is compute-bound (the
// CPU), since most steps accept few tokens anyway.
// W per step: EngineOptions::verifyWidth fixes it (0: BS); with EngineOptions::adaptiveWidth
// the SpeculationPolicy (runtime/speculation_policy.h) picks it for each greedy step from the
// batch size, the measured acceptance and the measured step times, up to verifyWidth; a step
// whose batch holds a sampled request runs at the fixed EngineOptions::sampledWidth (the
// largest by default), so a sampled request's tokens (whose random streams a different W would
// draw differently) stay a function of its prompt, settings and seed. Greedy tokens do not
// depend on W (lossless verification).
// The step for a (batch size, sampled, W) is captured once as a CUDA graph and replayed; its
// only device-to-host copy brings back the emitted counts and tokens [B + B·W] i32. The host then
// streams tokens, applies stop tokens and budgets, mirrors the commits in the KV cache manager,
// and retires finished requests (compaction re-uploads the per-slot state: a few bytes per slot).
// A target row whose logits are not finite (NaN or inf: the weights or activations overflowed)
// comes back as the token kNonFiniteToken from the kernel that chose it, in that same copy; the
// request ends there with FinishReason::kError (the others go on), keeping its earlier tokens.
// Every buffer is allocated at construction (the arena); nothing is allocated in the loop.
//
// Random numbers are request-stable (spec §3.6): a request's output depends only on its prompt,
// settings and seed, never on its batch-mates or on graphs.
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/errors.h"
#include "common/progress.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "ops/backend.h"
#include "runtime/draft_proposer.h"
#include "runtime/generation.h"
#include "runtime/speculation_policy.h"

namespace es::runtime {

struct EngineOptions {
  bool useGraphs = true;  // capture each batch size's step (CUDA backend); false: always eager
  // W, the rows one speculative step verifies per sequence: the anchor and the first W − 1
  // drafts of the proposed block. 0 = the draft's block size BS; else in [2, BS]. Must be 0
  // without a proposer (plain decoding verifies one row). With adaptiveWidth: the largest W.
  int32_t verifyWidth = 0;
  // Per-step W by the SpeculationPolicy (W = 1 included: a plain step) for greedy batches;
  // needs a proposer.
  bool adaptiveWidth = false;
  int32_t explorePeriod = 32;  // adaptiveWidth: SpeculationPolicyOptions::explorePeriod
  // adaptiveWidth: W of every step whose batch holds a sampled request, fixed for the engine's
  // life (a sampled request's tokens depend on the widths of its steps). 0: the largest width;
  // else one of the policy's widths (1: plain steps, the tokens of decoding without a draft).
  int32_t sampledWidth = 0;
  ProgressCallback onProgress = {};  // each request's prefill (runtime/prefill.h)
  // Requests submit() lets wait for admission; one more is refused (QueueFull). >= 1.
  int32_t maxQueued = 256;
  // Prompt rows one step() prefills at most before its decode step (one or more chunks, oldest
  // request first), so an arriving prompt delays the running streams by about this many rows a
  // step. 0 = the target's rows per forward (maxTokens). >= 0. A prefill chunk is
  // min(maxTokens, this) rows: a request's chunks depend only on it and these options.
  int32_t prefillTokensPerStep = 0;
};

// submit() refused a request: the admission queue holds EngineOptions::maxQueued requests.
class QueueFull : public Error {
 public:
  using Error::Error;
};

// Statistics since the last generate() call or resetStats().
struct SpeculationStats {
  int64_t verifySteps = 0;               // sequence-steps (a step of B sequences counts B)
  int64_t acceptedTokens = 0;            // tokens emitted by steps (the prefill's first excluded)
  std::vector<int64_t> acceptHistogram;  // [W + 1]: how often each emitted count occurred
  int64_t iterations = 0;                // device steps
  std::vector<int64_t> widthSteps;       // [W + 1]: device steps run at each width (W: largest)
  int64_t prefillRows = 0;               // prompt rows the target computed in prefill
  int64_t reusedTokens = 0;              // prompt tokens served from reused pages (prefix reuse)
  double prefillSeconds = 0.0;           // host wall clock
  double decodeSeconds = 0.0;            // host wall clock of the loop
  double meanAcceptLength() const {
    return verifySteps ? static_cast<double>(acceptedTokens) / static_cast<double>(verifySteps)
                       : 0.0;
  }
};

class DecodeEngine {
 public:
  // `cache` must be empty; with a proposer it must hold the draft layers too, and the target
  // must have the taps the draft needs. proposer == null: plain decoding. A cache with prefix
  // reuse (KvCacheConfig::prefixCachePages > 0) makes every generate() reuse the prompt blocks
  // published by earlier requests (of this call or earlier ones) and publish its own.
  DecodeEngine(model::TargetModel& target, kv::KvCacheManager& cache,
               DraftProposer* proposer = nullptr, EngineOptions options = {});
  ~DecodeEngine();

  // Sequences one step can carry: min(cache maxBatchSize, target maxLogitRows / W, draft maxBatch).
  int32_t maxBatch() const { return maxBatch_; }
  // W: rows per sequence of one step (1 plain; adaptive: the largest), and BS: rows of one
  // proposal (1 plain).
  int32_t stepWidth() const { return width_; }
  int32_t blockSize() const { return blockSize_; }

  // Runs `requests` (at most maxBatch(), on an idle engine with an empty cache) to completion
  // through submit() and step(); results in request order.
  std::vector<GenerationResult> generate(const std::vector<GenerationRequest>& requests,
                                         const TokenCallback& onToken = {});

  // Queues a request; it joins the running batch at a step() with room for it. Throws
  // InvalidArgument for a request that can never run (bad fields, prompt + maxNewTokens beyond
  // the KV capacity or RoPE tables) and QueueFull when maxQueued requests already wait.
  // `index`: what onToken and the proposer's onAdmit see for it (-1: the id's low 31 bits).
  RequestId submit(GenerationRequest request, TokenCallback onToken = {}, int32_t index = -1);
  // Ends a queued or running request now (FinishReason::kCancelled, its tokens so far kept): a
  // running one (prefilling or decoding) leaves the batch and its slot and pages are free at
  // once. Returns false when the id is unknown or already finished. From a callback inside
  // step() (a token callback, stopWhen), the request stops there and leaves the batch at the end
  // of that step.
  bool cancel(RequestId id);
  // Prefills arriving prompts (at most EngineOptions::prefillTokensPerStep rows, admitting
  // queued requests as it reaches them), then runs one device step of the decoding requests.
  // Returns whether requests remain (running or queued). On an exception every queued and
  // running request is dropped (the cache is left empty and the engine usable).
  bool step();
  // Requests finished since the last call, in the order they finished.
  std::vector<FinishedRequest> takeFinished();
  // Admitted requests (prefilling or decoding), and requests waiting for admission.
  int32_t runningCount() const { return static_cast<int32_t>(running_.size()); }
  int32_t queuedCount() const { return static_cast<int32_t>(waiting_.size()); }

  const SpeculationStats& stats() const { return stats_; }
  void resetStats();
  // The adaptive width rule (null unless EngineOptions::adaptiveWidth); it keeps what it
  // learned across resetStats().
  const SpeculationPolicy* policy() const { return policy_.get(); }

 private:
  struct Request;
  void checkRequests(const std::vector<GenerationRequest>& requests) const;
  // The checks of one request every entry point runs; `name` prefixes the field names.
  void checkRequest(const GenerationRequest& q, const char* where, const std::string& name) const;
  // KV positions a request may write (kvCapacityTokens of its prompt + maxNewTokens).
  int64_t positionsNeeded(const GenerationRequest& q) const;
  // The first token from the logits of the prompt's last row, sampled by the backend
  // (kNonFiniteToken when that row is not finite).
  int32_t sampleFirstToken(const SamplingConfig& sampling, int64_t lastPosition);
  // Samples `rows` target rows of f32 `logits` [rows, vocab] into `tokens` with the per-row
  // sampling parameters and anchors already in temperatures_, topKs_, topPs_, seeds_ and
  // anchors_; a row that is not finite gives kNonFiniteToken.
  void sampleRows(const float* logits, int32_t rows, int32_t* tokens);
  RequestId enqueue(GenerationRequest request, TokenCallback onToken, int32_t index);
  bool emit(Request& req, int32_t token);
  void failNonFinite(Request& req);
  int32_t decodingCount() const;
  bool prefillArrivals();
  bool admitNext();
  void finishPrefill(Request& req, int32_t slot);
  void retireFinished();
  void prepare();
  void decodeStep(int32_t B);
  void publishFinished(const Request& req, int32_t slot);
  void abandon();
  void allocate();
  void uploadState(int32_t B, const std::vector<int32_t>& lastTokens,
                   const std::vector<const GenerationRequest*>& requestOfSlot);
  // W of the next step of B sequences.
  int32_t chooseWidth(int32_t B);
  void prepareNext(int32_t B, int32_t W);
  void step(int32_t B, int32_t W);
  // Returns whether the step's time is representative (not a first eager run or a capture).
  bool launchStep(int32_t B, int32_t W);
  // Width W's constant tables in the arena: row owners r / W [B_max·W], query offsets b·W.
  int32_t* ownersOf(int32_t W) const;
  int32_t* cuQOf(int32_t W) const;

  model::TargetModel& target_;
  kv::KvCacheManager& cache_;
  DraftProposer* proposer_;
  ops::Backend& backend_;
  EngineOptions options_;
  int32_t blockSize_ = 1;     // BS: rows of one proposal (1 without a proposer)
  int32_t width_ = 1;         // W: verify rows per sequence and step (adaptive: the largest), <= BS
  int32_t sampledWidth_ = 1;  // W of a step whose batch holds a sampled request
  std::vector<int32_t> widths_;                // the widths a step may run at, ascending
  std::unique_ptr<SpeculationPolicy> policy_;  // adaptiveWidth only
  int32_t maxBatch_ = 0;                       // B_max
  int32_t vocab_ = 0;
  bool sampled_ = false;    // the decode batch holds a sampled request (else all are greedy)
  bool withDraft_ = false;  // the proposer keeps context in the cache's draft pools
  SpeculationStats stats_;

  // Prefill: rows of one chunk (min(maxTokens, the budget)), prompt rows one step() runs at
  // most, and whether generate() runs (every prefill before the first decode step).
  int32_t prefillChunk_ = 0;
  int64_t prefillBudget_ = 0;
  bool unboundedPrefill_ = false;

  std::deque<std::unique_ptr<Request>> waiting_;   // submitted, not admitted (FIFO)
  std::vector<std::unique_ptr<Request>> running_;  // by slot: running_[s] holds cache slot s
  std::vector<FinishedRequest> finished_;          // until takeFinished()
  RequestId nextId_ = 0;
  bool inStep_ = false;    // step() runs (cancel from its callbacks defers the retirement)
  bool prepared_ = false;  // the device's per-slot state matches slots [0, D)

  // Arena (backend memory), sized for maxBatch_ and the largest W (see allocate()); owners_ and
  // cuQ_ hold one table per width of widths_ (ownersOf, cuQOf).
  Buffer arena_;
  int32_t *lengths_ = nullptr, *newLengths_ = nullptr, *lastTokens_ = nullptr, *zeros_ = nullptr;
  int32_t *topKs_ = nullptr, *owners_ = nullptr, *cuQ_ = nullptr, *rows_ = nullptr;
  int32_t *verifyTokens_ = nullptr, *verifyPositions_ = nullptr, *verifyKvLengths_ = nullptr;
  int32_t *verifyMask_ = nullptr, *argmax_ = nullptr, *acceptNodes_ = nullptr,
          *acceptCounts_ = nullptr;
  int32_t *out_ = nullptr, *deltaPositions_ = nullptr, *deltaOwners_ = nullptr;
  int32_t *propMask_ = nullptr, *propAttPos_ = nullptr, *propContextLengths_ = nullptr;
  int32_t *propPositions_ = nullptr, *propQStart_ = nullptr, *propQLengths_ = nullptr;
  int32_t *propPast_ = nullptr, *propSeqLengths_ = nullptr, *draftOut_ = nullptr;
  // [B, W, V] f32: the distributions sampled proposals were drawn from (proposers with logits).
  float* proposalProbs_ = nullptr;
  int64_t *anchors_ = nullptr, *selectIndices_ = nullptr;
  uint64_t* seeds_ = nullptr;
  float *temperatures_ = nullptr, *topPs_ = nullptr;
  int8_t* treeMask_ = nullptr;
  void* sampleWorkspace_ = nullptr;
  size_t sampleWorkspaceBytes_ = 0;
  Buffer outHost_;  // pinned [B_max + B_max·W] i32, the step's one device-to-host copy

  // Captured steps per (batch size, sampled, W); a key runs eagerly once before it is captured.
  using StepKey = std::tuple<int32_t, bool, int32_t>;
  std::map<StepKey, std::unique_ptr<ops::CapturedWork>> graphs_;
  std::map<StepKey, int32_t> eagerRuns_;
  // Page-table copies the graphs read: base, window (sliding-window layers), draft.
  std::array<const void*, 3> capturedTables_{nullptr, nullptr, nullptr};
  std::vector<kv::SwaStepWrite> stepWrites_;  // the running step's writes (reused buffer)
};

}  // namespace es::runtime
