#include "runtime/decode_engine.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "common/errors.h"
#include "runtime/kv_capacity.h"
#include "runtime/prefill.h"
#include "runtime/request_settings.h"

namespace es::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

DecodeEngine::DecodeEngine(model::TargetModel& target, kv::KvCacheManager& cache,
                           DraftProposer* proposer, EngineOptions options)
    : target_(target),
      cache_(cache),
      proposer_(proposer),
      backend_(target.backend()),
      options_(options) {
  constexpr const char* kWhere = "DecodeEngine";
  vocab_ = static_cast<int32_t>(target_.config().vocab_size);
  blockSize_ = proposer_ ? proposer_->blockSize() : 1;
  ES_CHECK_ARG(!proposer_ || (blockSize_ >= 2 && blockSize_ <= kernel::kDFlashMaxBlockSize), kWhere,
               "blockSize", blockSize_, "must be in [2, ", kernel::kDFlashMaxBlockSize, "]");
  if (proposer_) {
    width_ = options_.verifyWidth == 0 ? blockSize_ : options_.verifyWidth;
    ES_CHECK_ARG(width_ >= 2 && width_ <= blockSize_, kWhere, "EngineOptions::verifyWidth",
                 options_.verifyWidth,
                 "must be 0 (the block size) or in [2, block size = ", blockSize_, "]");
  } else {
    ES_CHECK_ARG(options_.verifyWidth == 0, kWhere, "EngineOptions::verifyWidth",
                 options_.verifyWidth,
                 "must be 0 without a proposer (plain decoding verifies one row)");
    width_ = 1;
  }
  ES_CHECK_ARG(!options_.adaptiveWidth || proposer_, kWhere, "EngineOptions::adaptiveWidth", "true",
               "needs a proposer (plain decoding verifies one row)");
  ES_CHECK_ARG(cache_.space() == backend_.space(), kWhere, "cache memory space",
               static_cast<int>(cache_.space()), "must be the target backend's");
  // A step's B x W rows are one forward and all get logits: maxLogitRows (<= maxTokens) bounds B.
  maxBatch_ = std::min(cache_.maxBatchSize(), target_.maxLogitRows() / width_);
  if (proposer_) {
    maxBatch_ = std::min(maxBatch_, proposer_->maxBatch());
    // Every target forward's rows go to the draft as context: prefill chunks and verifies.
    ES_CHECK_ARG(target_.maxTokens() <= proposer_->maxContextRows(), kWhere, "target maxTokens",
                 target_.maxTokens(), "must be <= the draft's context rows per call (",
                 proposer_->maxContextRows(), ")");
  }
  ES_CHECK_ARG(maxBatch_ >= 1, kWhere, "target maxLogitRows", target_.maxLogitRows(),
               "must hold at least one step of ", width_, " rows");
  ES_CHECK_ARG(options_.maxQueued >= 1, kWhere, "EngineOptions::maxQueued", options_.maxQueued,
               "must be >= 1");
  ES_CHECK_ARG(options_.prefillTokensPerStep >= 0, kWhere, "EngineOptions::prefillTokensPerStep",
               options_.prefillTokensPerStep, "must be >= 0 (0 = the target's rows per forward, ",
               target_.maxTokens(), ")");
  prefillBudget_ =
      options_.prefillTokensPerStep == 0 ? target_.maxTokens() : options_.prefillTokensPerStep;
  prefillChunk_ = static_cast<int32_t>(std::min<int64_t>(target_.maxTokens(), prefillBudget_));
  withDraft_ = proposer_ && proposer_->usesDraftCache();
  if (options_.adaptiveWidth) {
    policy_ = std::make_unique<SpeculationPolicy>(
        SpeculationPolicyOptions{.maxWidth = width_,
                                 .maxBatch = maxBatch_,
                                 .computeBoundRows = defaultComputeBoundRows(backend_.name()),
                                 .explorePeriod = options_.explorePeriod});
    widths_ = policy_->widths();
    sampledWidth_ = options_.sampledWidth == 0 ? width_ : options_.sampledWidth;
    ES_CHECK_ARG(std::find(widths_.begin(), widths_.end(), sampledWidth_) != widths_.end(), kWhere,
                 "EngineOptions::sampledWidth", options_.sampledWidth,
                 "must be 0 (the largest width, ", width_,
                 ") or one of the adaptive widths (1, the powers of two below it, it)");
  } else {
    ES_CHECK_ARG(options_.sampledWidth == 0, kWhere, "EngineOptions::sampledWidth",
                 options_.sampledWidth, "must be 0 without adaptiveWidth (every step is at W)");
    widths_ = {width_};
    sampledWidth_ = width_;
  }
  resetStats();
  allocate();
}

void DecodeEngine::allocate() {
  const int64_t B = maxBatch_, W = width_, BS = blockSize_;
  const int64_t widthCount = static_cast<int64_t>(widths_.size());
  const int64_t maskWords = (W + 31) / 32, propMaskWords = (BS + 31) / 32;

  // Sampling workspace for every batch size a step can take (the need is not monotone in the
  // batch: the general path splits rows into more chunks when there are fewer rows), with
  // per-row filtering arrays as the step passes them (only their presence matters here).
  const int32_t anyRow = 0;
  const bool sampledProposals = proposer_ && proposer_->proposalLogits() != nullptr;
  sampleWorkspaceBytes_ = 0;
  for (int32_t b = 1; b <= maxBatch_; ++b) {
    const SamplingParams rows{.batch = b, .vocab = vocab_, .topKs = &anyRow};
    sampleWorkspaceBytes_ = std::max(sampleWorkspaceBytes_, samplingWorkspaceBytes(rows));
    for (const int32_t w : widths_) {
      if (w == 1) continue;
      if (sampledProposals) {  // the draft's b * w scored rows (prepareNext)
        const SamplingParams proposals{
            .batch = b * w, .vocab = vocab_, .topKs = &anyRow, .rowsPerRequest = w};
        sampleWorkspaceBytes_ = std::max(sampleWorkspaceBytes_, samplingWorkspaceBytes(proposals));
      }
      const SpecVerifyParams verify{
          .batch = b, .numDraft = w - 1, .vocab = vocab_, .topKs = &anyRow};
      sampleWorkspaceBytes_ = std::max(sampleWorkspaceBytes_, specVerifyWorkspaceBytes(verify));
    }
  }

  // One arena: i32 arrays, then i64/u64 (8-byte aligned), f32, i8, workspace (256-aligned).
  struct Slot {
    void** at;
    int64_t bytes;
  };
  std::vector<Slot> slots;
  auto i32 = [&](int32_t*& p, int64_t n) {
    slots.push_back({reinterpret_cast<void**>(&p), n * 4});
  };
  i32(lengths_, B);
  i32(newLengths_, B);
  i32(lastTokens_, B);
  i32(zeros_, B);
  i32(topKs_, B);
  // Verify side: W rows per sequence; proposal side: BS rows per sequence, of which the
  // proposer returns the first W (draftOut_, proposalProbs_).
  i32(owners_, widthCount * B * W);
  i32(cuQ_, widthCount * (B + 1));
  i32(rows_, B * W);
  i32(verifyTokens_, B * W);
  i32(verifyPositions_, B * W);
  i32(verifyKvLengths_, B);
  i32(verifyMask_, B * W * maskWords);
  i32(argmax_, B * W);
  i32(acceptNodes_, B * W);
  i32(acceptCounts_, B);
  i32(out_, B + B * W);
  i32(deltaPositions_, B * W);
  i32(deltaOwners_, B * W);
  i32(propMask_, B * BS * propMaskWords);
  i32(propAttPos_, B * BS);
  i32(propContextLengths_, B);
  i32(propPositions_, B * BS);
  i32(propQStart_, B + 1);
  i32(propQLengths_, B);
  i32(propPast_, B);
  i32(propSeqLengths_, B);
  i32(draftOut_, B * W);
  slots.push_back({reinterpret_cast<void**>(&anchors_), B * 8});
  slots.push_back({reinterpret_cast<void**>(&selectIndices_), B * W * 8});
  slots.push_back({reinterpret_cast<void**>(&seeds_), B * 8});
  slots.push_back({reinterpret_cast<void**>(&temperatures_), B * 4});
  slots.push_back({reinterpret_cast<void**>(&topPs_), B * 4});
  slots.push_back({reinterpret_cast<void**>(&treeMask_), B * W * W});
  if (sampledProposals)
    slots.push_back({reinterpret_cast<void**>(&proposalProbs_), B * W * vocab_ * 4});
  slots.push_back({&sampleWorkspace_, static_cast<int64_t>(sampleWorkspaceBytes_)});
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const Slot& s : slots) {
    total = (total + 255) / 256 * 256;
    offsets.push_back(total);
    total += std::max<int64_t>(s.bytes, 1);
  }
  arena_ = backend_.allocate(total);
  for (size_t i = 0; i < slots.size(); ++i) *slots[i].at = arena_.as<uint8_t>() + offsets[i];
  if (sampleWorkspaceBytes_ == 0) sampleWorkspace_ = nullptr;

  // Constants: zeros, logit rows r, and per width w: row owners r / w, query offsets b·w.
  std::vector<int32_t> host(static_cast<size_t>(B * W));
  std::fill(host.begin(), host.begin() + B, 0);
  backend_.copyFromHost(zeros_, host.data(), B * 4);
  for (int64_t r = 0; r < B * W; ++r) host[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  backend_.copyFromHost(rows_, host.data(), B * W * 4);
  std::vector<int32_t> cuQ(static_cast<size_t>(B) + 1);
  for (const int32_t w : widths_) {
    for (int64_t r = 0; r < B * w; ++r) host[static_cast<size_t>(r)] = static_cast<int32_t>(r / w);
    backend_.copyFromHost(ownersOf(w), host.data(), B * w * 4);
    for (int64_t b = 0; b <= B; ++b) cuQ[static_cast<size_t>(b)] = static_cast<int32_t>(b * w);
    backend_.copyFromHost(cuQOf(w), cuQ.data(), (B + 1) * 4);
  }

  const MemorySpace hostSpace =
      backend_.space() == MemorySpace::kDevice ? MemorySpace::kPinnedHost : MemorySpace::kHost;
  outHost_ = Buffer::allocate(hostSpace, (B + B * W) * 4);
}

int32_t* DecodeEngine::ownersOf(int32_t W) const {
  const auto at = std::find(widths_.begin(), widths_.end(), W) - widths_.begin();
  return owners_ + at * int64_t{maxBatch_} * width_;
}

int32_t* DecodeEngine::cuQOf(int32_t W) const {
  const auto at = std::find(widths_.begin(), widths_.end(), W) - widths_.begin();
  return cuQ_ + at * (int64_t{maxBatch_} + 1);
}

void DecodeEngine::checkRequests(const std::vector<GenerationRequest>& requests) const {
  constexpr const char* kWhere = "DecodeEngine::generate";
  const int32_t n = static_cast<int32_t>(requests.size());
  ES_CHECK_ARG(cache_.activeCount() == 0, kWhere, "active slots", cache_.activeCount(),
               "must be 0: the cache must be empty");
  ES_CHECK_ARG(running_.empty() && waiting_.empty(), kWhere, "submitted requests",
               running_.size() + waiting_.size(), "must be 0: generate() needs an idle engine");
  ES_CHECK_ARG(n > 0 && n <= maxBatch_, kWhere, "requests.size()", n, "must be in [1, ", maxBatch_,
               "] (min of cache maxBatchSize = ", cache_.maxBatchSize(),
               ", target maxLogitRows / step width = ", target_.maxLogitRows() / width_,
               proposer_ ? ", draft maxBatch" : "", ")");
  for (int32_t r = 0; r < n; ++r) {
    checkRequest(requests[static_cast<size_t>(r)], kWhere, "requests[" + std::to_string(r) + "]");
  }
}

void DecodeEngine::checkRequest(const GenerationRequest& q, const char* where,
                                const std::string& name) const {
  const char* kWhere = where;
  ES_CHECK_ARG(!q.prompt.empty(), kWhere, name + ".prompt.size()", 0, "must be > 0");
  for (int32_t t : q.prompt) {
    ES_CHECK_ARG(t >= 0 && t < vocab_, kWhere, name + ".prompt token", t,
                 "must be in [0, vocab = ", vocab_, ")");
  }
  ES_CHECK_ARG(q.maxNewTokens >= 1, kWhere, name + ".maxNewTokens", q.maxNewTokens, "must be >= 1");
  // The bounds every front end checks (runtime/request_settings.h), for API callers too.
  ES_CHECK_ARG(std::isfinite(q.sampling.temperature) && q.sampling.temperature >= 0.0f &&
                   q.sampling.temperature <= kMaxTemperature,
               kWhere, name + ".sampling.temperature", q.sampling.temperature,
               "must be a finite number in [0, ", kMaxTemperature, "]");
  ES_CHECK_ARG(q.sampling.topK >= 0, kWhere, name + ".sampling.topK", q.sampling.topK,
               "must be >= 0 (0 = off)");
  ES_CHECK_ARG(q.sampling.topP > 0.0f && q.sampling.topP <= 1.0f, kWhere, name + ".sampling.topP",
               q.sampling.topP, "must be in (0, 1]");
  // The positions the request may write (runtime/kv_capacity.h) must exist in the cache and in
  // the RoPE tables.
  const int64_t total = static_cast<int64_t>(q.prompt.size()) + q.maxNewTokens;
  const int64_t needed = positionsNeeded(q);
  const int64_t positions =
      std::min<int64_t>(target_.maxPositions(), proposer_ ? proposer_->maxPositions() : INT32_MAX);
  const int64_t limit = std::min<int64_t>(cache_.capacity(), positions) - (needed - total);
  ES_CHECK_ARG(total <= limit, kWhere, name + " prompt + maxNewTokens", total, "must be <= ", limit,
               ": the KV capacity (", cache_.capacity(), ") and RoPE tables (", positions,
               " positions) less ", needed - total,
               " rows a speculative step may write past the budget");
}

int64_t DecodeEngine::positionsNeeded(const GenerationRequest& q) const {
  return kvCapacityTokens(static_cast<int64_t>(q.prompt.size()) + q.maxNewTokens, width_,
                          blockSize_);
}

void DecodeEngine::uploadState(int32_t B, const std::vector<int32_t>& lastTokens,
                               const std::vector<const GenerationRequest*>& requestOfSlot) {
  std::vector<int32_t> lengths(static_cast<size_t>(B)), topKs(static_cast<size_t>(B));
  std::vector<int64_t> anchors(static_cast<size_t>(B));
  std::vector<uint64_t> seeds(static_cast<size_t>(B));
  std::vector<float> temperatures(static_cast<size_t>(B)), topPs(static_cast<size_t>(B));
  for (int32_t s = 0; s < B; ++s) {
    const SamplingConfig& c = requestOfSlot[static_cast<size_t>(s)]->sampling;
    lengths[static_cast<size_t>(s)] = cache_.baseLength(s);
    anchors[static_cast<size_t>(s)] = cache_.baseLength(s);
    seeds[static_cast<size_t>(s)] = c.seed;
    temperatures[static_cast<size_t>(s)] = c.temperature;
    topKs[static_cast<size_t>(s)] = c.topK;
    topPs[static_cast<size_t>(s)] = c.topP;
  }
  backend_.copyFromHost(lengths_, lengths.data(), int64_t{B} * 4);
  backend_.copyFromHost(lastTokens_, lastTokens.data(), int64_t{B} * 4);
  backend_.copyFromHost(anchors_, anchors.data(), int64_t{B} * 8);
  backend_.copyFromHost(seeds_, seeds.data(), int64_t{B} * 8);
  backend_.copyFromHost(temperatures_, temperatures.data(), int64_t{B} * 4);
  backend_.copyFromHost(topKs_, topKs.data(), int64_t{B} * 4);
  backend_.copyFromHost(topPs_, topPs.data(), int64_t{B} * 4);
}

// The prefill's last chunk left the prompt's last row in the target's logits [1, V]. The token
// after it is chosen as a step chooses its tokens, on the backend: argmax for a greedy request,
// else a filtered sample with request_uniform(seed, lastPosition, kTarget, 0) (spec §3.6). It
// overwrites slot 0 of the per-slot arrays and out_: the caller runs prepare() before the next
// step.
int32_t DecodeEngine::sampleFirstToken(const SamplingConfig& sampling, int64_t lastPosition) {
  if (isGreedy(sampling)) {
    backend_.argmax(ArgmaxParams{.logits = target_.logitsDevice(),
                                 .dtype = DType::kF32,
                                 .rows = 1,
                                 .vocab = vocab_,
                                 .out = out_,
                                 .flagNonFinite = true});
  } else {
    backend_.copyFromHost(temperatures_, &sampling.temperature, 4);
    backend_.copyFromHost(topKs_, &sampling.topK, 4);
    backend_.copyFromHost(topPs_, &sampling.topP, 4);
    backend_.copyFromHost(seeds_, &sampling.seed, 8);
    backend_.copyFromHost(anchors_, &lastPosition, 8);
    sampleRows(target_.logitsDevice(), 1, out_);
  }
  int32_t token = -1;
  backend_.copyToHost(&token, out_, 4);
  return token;
}

void DecodeEngine::sampleRows(const float* logits, int32_t rows, int32_t* tokens) {
  backend_.sampleRows({.logits = logits,
                       .batch = rows,
                       .vocab = vocab_,
                       .temperatures = temperatures_,
                       .topKs = topKs_,
                       .topPs = topPs_,
                       .seeds = seeds_,
                       .positions = anchors_,
                       .tokens = tokens,
                       .flagNonFinite = true,
                       .workspace = sampleWorkspace_,
                       .workspaceBytes = sampleWorkspaceBytes_});
}

// The step's inputs from lengths_ (committed) and lastTokens_ (anchors): for W > 1 the draft's
// proposal of BS rows (the first W scored), then the verify rows [anchor, d_1 … d_{W−1}] at
// positions length + i.
void DecodeEngine::prepareNext(int32_t B, int32_t W) {
  const int32_t BS = blockSize_;
  if (proposer_ && W > 1) {
    backend_.dflashProposalInputs({.oldDraftCacheLengths = lengths_,
                                   .deltaLengths = zeros_,  // the delta is already committed
                                   .blockSize = BS,
                                   .packedAttentionMask = propMask_,
                                   .attentionPosId = propAttPos_,
                                   .contextLengths = propContextLengths_,
                                   .positions = propPositions_,
                                   .queryStartOffsets = propQStart_,
                                   .queryLengths = propQLengths_,
                                   .pastLengths = propPast_,
                                   .attentionSequenceLengths = propSeqLengths_,
                                   .batchSize = B});
    proposer_->propose({.anchors = lastTokens_,
                        .positions = propPositions_,
                        .kvLengths = propContextLengths_,
                        .batchSize = B,
                        .rowsPerBlock = W,
                        .argmaxOut = draftOut_},  // [B, W]
                       cache_);
    if (sampled_ && proposalProbs_ != nullptr) {
      // Sampled requests draw their drafts from the draft's distribution, filtered like their
      // target rows, with the proposal uniforms of spec §3.6 (row j of a block: lane j at its
      // anchor), and keep it as q for the verify: accepted with sum min(p, q) instead of
      // p(argmax q). Greedy requests of the batch get the argmax again (one-hot q).
      backend_.sampleRows({.logits = proposer_->proposalLogits(),  // [B, W, V]
                           .batch = B * W,
                           .vocab = vocab_,
                           .temperatures = temperatures_,
                           .topKs = topKs_,
                           .topPs = topPs_,
                           .rowsPerRequest = W,
                           .seeds = seeds_,
                           .positions = anchors_,
                           .purpose = RngPurpose::kProposal,
                           .tokens = draftOut_,
                           .probs = proposalProbs_,
                           .workspace = sampleWorkspace_,
                           .workspaceBytes = sampleWorkspaceBytes_});
    }
    backend_.dflashLinearVerifyInputs({.lastAcceptedTokens = lastTokens_,
                                       .draftTokenIds = draftOut_,
                                       .verifyTokenIds = verifyTokens_,
                                       .verifyTreeMask = treeMask_,
                                       .batchSize = B,
                                       .proposalLen = W - 1,
                                       .draftTokenStride = W,
                                       .verifySize = W});
  } else {
    backend_.copy(verifyTokens_, lastTokens_, int64_t{B} * 4);
  }
  backend_.dflashBaseVerifyInputs({.baseKVCacheLengths = lengths_,
                                   .verifySize = W,
                                   .packedAttentionMask = verifyMask_,
                                   .attentionPosId = verifyPositions_,
                                   .selectTokenIndices = selectIndices_,
                                   .contextLengths = verifyKvLengths_,
                                   .batchSize = B});
}

// One iteration, device work only: inputs (proposal), forward, accept, commit, draft context.
void DecodeEngine::step(int32_t B, int32_t W) {
  prepareNext(B, W);
  target_.forwardDevice({.tokens = verifyTokens_,
                         .positions = verifyPositions_,
                         .tokenToSequence = ownersOf(W),
                         .cuQSeqLens = cuQOf(W),
                         .kvLengths = verifyKvLengths_,
                         .logitRows = rows_,
                         .numTokens = B * W,
                         .batchSize = B,
                         .maxQSeqLen = W,
                         .numLogitRows = B * W},
                        cache_);
  const float* logits = target_.logitsDevice();

  // Accept into out_ = [counts B | tokens B·W] (the step's device-to-host payload). A target row
  // whose logits are not finite gives kNonFiniteToken and ends its sequence's accepted run there
  // (greedy: it matches no draft; sampled: specVerify stops at it); the host makes it an error.
  int32_t* counts = out_;
  int32_t* tokens = out_ + B;
  // The accept below sets how many of each sequence's W tokens count (null: one each).
  kernel::SpecCommitParams commit{.tokens = tokens,
                                  .lengths = lengths_,
                                  .emitCounts = counts,
                                  .newLengths = newLengths_,
                                  .anchorPositions = anchors_,
                                  .lastTokens = lastTokens_,
                                  .batchSize = B,
                                  .width = W};
  if (!sampled_) {
    backend_.argmax({.logits = logits,
                     .dtype = DType::kF32,
                     .rows = B * W,
                     .vocab = vocab_,
                     .out = W == 1 ? tokens : argmax_,
                     .flagNonFinite = true});
    if (W > 1) {
      backend_.eagleAccept({.targetTopIds = argmax_,
                            .verifyTokenIds = verifyTokens_,
                            .acceptedTokens = tokens,
                            .acceptedNodeIds = acceptNodes_,
                            .acceptLengths = acceptCounts_,
                            .batchSize = B,
                            .verifySize = W});
      commit.counts = acceptCounts_;
    }
  } else if (W == 1) {
    sampleRows(logits, B, tokens);
  } else {
    // With proposal distributions, rows 1 … W−1 of each [W, V] block are the drafts' q.
    const bool withQ = proposalProbs_ != nullptr;
    backend_.specVerify({.targetLogits = logits,
                         .draftTokens = verifyTokens_ + 1,
                         .draftTokensStride = W,
                         .draftProbs = withQ ? proposalProbs_ + vocab_ : nullptr,
                         .draftProbsStride = withQ ? W : 0,
                         .batch = B,
                         .numDraft = W - 1,
                         .vocab = vocab_,
                         .temperatures = temperatures_,
                         .topKs = topKs_,
                         .topPs = topPs_,
                         .seeds = seeds_,
                         .anchors = anchors_,
                         .outTokens = tokens,
                         .numAccepted = acceptCounts_,
                         .flagNonFinite = true,
                         .workspace = sampleWorkspace_,
                         .workspaceBytes = sampleWorkspaceBytes_});
    commit.counts = acceptCounts_;
    commit.countOffset = 1;
  }
  backend_.specCommit(commit);

  if (proposer_) {  // rows 0 … count−1 of each sequence became committed context
    backend_.dflashDeltaMetadata({.oldDraftCacheLengths = lengths_,
                                  .deltaLengths = counts,
                                  .deltaWidth = W,
                                  .deltaPositions = deltaPositions_,
                                  .deltaTokenToSequence = deltaOwners_,
                                  .batchSize = B});
    proposer_->appendContext(model::DraftContextDelta{.taps = target_.tapsDevice(),
                                                      .positions = deltaPositions_,
                                                      .tokenToSequence = deltaOwners_,
                                                      .numTokens = B * W},
                             cache_);
  }
  backend_.copy(lengths_, newLengths_, int64_t{B} * 4);
}

bool DecodeEngine::launchStep(int32_t B, int32_t W) {
  // A captured step reads the page-table copies at the addresses they had at capture: should
  // a copy move (the model was used with a cache of another shape), capture again.
  // The window table (sliding-window layers) is one more copy the graphs read by address; its
  // entries change between steps (beginStep binds, commits clear), which only needs the upload.
  const auto [baseTable, windowTable] = target_.syncPageTable(cache_);
  const std::array<const void*, 3> tables{baseTable, windowTable,
                                          proposer_ ? proposer_->prepareLaunch(cache_) : nullptr};
  if (tables != capturedTables_) {
    graphs_.clear();
    capturedTables_ = tables;
  }
  const StepKey key{B, sampled_, W};
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    it->second->launch();
    return true;
  }
  // The first run of a key is eager (it also settles library state such as cuBLASLt's
  // heuristics); the second one is captured and replayed from then on. Neither is timed.
  int32_t& runs = eagerRuns_[key];
  if (options_.useGraphs && runs >= 1) {
    std::unique_ptr<ops::CapturedWork> graph = backend_.capture([&] { step(B, W); });
    if (graph) {
      graph->launch();
      graphs_.emplace(key, std::move(graph));
      return false;
    }
  }
  ++runs;
  step(B, W);
  return runs >= 2;
}

// One submitted request and its progress.
struct DecodeEngine::Request {
  RequestId id = -1;
  int32_t index = 0;  // what the token callback and the proposer see
  GenerationRequest q;
  TokenCallback onToken;
  GenerationResult result;
  int32_t pending = 0;    // the last emitted token (the next anchor)
  int32_t prefilled = 0;  // prompt positions in the cache (a reused prefix included)
  bool decoding = false;  // its prompt is in the cache: it takes part in the decode steps
  bool done = false;      // leaves the batch at the next retirement
  bool cancelled = false;
};

// After Request is complete: the queues' unique_ptrs delete it.
DecodeEngine::~DecodeEngine() = default;

std::vector<GenerationResult> DecodeEngine::generate(const std::vector<GenerationRequest>& requests,
                                                     const TokenCallback& onToken) {
  checkRequests(requests);
  resetStats();
  const size_t n = requests.size();
  // Every request is here from the start and nothing streams meanwhile: all prefills run
  // before the first decode step (in the same chunks as under the step budget), so every step
  // decodes the whole batch.
  unboundedPrefill_ = true;
  try {
    for (size_t r = 0; r < n; ++r) enqueue(requests[r], onToken, static_cast<int32_t>(r));
    while (step()) {
    }
  } catch (...) {
    unboundedPrefill_ = false;
    finished_.clear();  // the engine was idle: every finished request is this call's
    throw;
  }
  unboundedPrefill_ = false;
  std::vector<GenerationResult> results(n);
  for (FinishedRequest& f : takeFinished()) {
    results[static_cast<size_t>(f.index)] = std::move(f.result);
  }
  return results;
}

void DecodeEngine::resetStats() {
  stats_ = SpeculationStats{};
  stats_.acceptHistogram.assign(static_cast<size_t>(width_) + 1, 0);
  stats_.widthSteps.assign(static_cast<size_t>(width_) + 1, 0);
}

RequestId DecodeEngine::submit(GenerationRequest request, TokenCallback onToken, int32_t index) {
  constexpr const char* kWhere = "DecodeEngine::submit";
  checkRequest(request, kWhere, "request");
  if (static_cast<int32_t>(waiting_.size()) >= options_.maxQueued) {
    ES_THROW(QueueFull, kWhere, ": the admission queue is full (", waiting_.size(),
             " requests wait, EngineOptions::maxQueued = ", options_.maxQueued,
             "); run step() until requests are admitted, then submit again");
  }
  return enqueue(std::move(request), std::move(onToken), index);
}

RequestId DecodeEngine::enqueue(GenerationRequest request, TokenCallback onToken, int32_t index) {
  auto req = std::make_unique<Request>();
  req->id = nextId_++;
  req->index = index >= 0 ? index : static_cast<int32_t>(req->id & 0x7fffffff);
  req->q = std::move(request);
  req->onToken = std::move(onToken);
  const RequestId id = req->id;
  waiting_.push_back(std::move(req));
  return id;
}

bool DecodeEngine::cancel(RequestId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id != id) continue;
    (*it)->result.finish = FinishReason::kCancelled;
    finished_.push_back({.id = id, .index = (*it)->index, .result = std::move((*it)->result)});
    waiting_.erase(it);
    return true;
  }
  for (std::unique_ptr<Request>& req : running_) {
    if (req->id != id || req->done) continue;
    req->result.finish = FinishReason::kCancelled;
    req->done = req->cancelled = true;
    // Between steps nothing on the backend reads its pages any more: retire it now. From a
    // callback inside step(), that step retires it when its host work is done.
    if (!inStep_) retireFinished();
    return true;
  }
  return false;
}

std::vector<FinishedRequest> DecodeEngine::takeFinished() {
  std::vector<FinishedRequest> out;
  out.swap(finished_);
  return out;
}

bool DecodeEngine::step() {
  inStep_ = true;
  try {
    const Clock::time_point prefillStart = Clock::now();
    if (prefillArrivals()) stats_.prefillSeconds += secondsSince(prefillStart);
    retireFinished();  // requests done at their first token, or cancelled while prefilling
    const int32_t decoding = decodingCount();
    if (decoding > 0) {
      const Clock::time_point decodeStart = Clock::now();
      if (!prepared_) prepare();
      decodeStep(decoding);
      retireFinished();
      stats_.decodeSeconds += secondsSince(decodeStart);
    }
  } catch (...) {
    inStep_ = false;
    abandon();
    throw;
  }
  inStep_ = false;
  return !running_.empty() || !waiting_.empty();
}

// Drops every queued and running request, leaving the cache empty so the engine (and the cache)
// can serve the next requests. A step that was begun may still run on the backend: wait for it
// before its window pages are released.
void DecodeEngine::abandon() {
  if (cache_.lastCompletedStep() < cache_.lastIssuedStep()) {
    try {
      backend_.synchronize();
    } catch (...) {
      // A failed device runs nothing any more; the original error is the one to report.
    }
    cache_.completeStep(cache_.lastIssuedStep());
  }
  const std::vector<uint8_t> none(static_cast<size_t>(cache_.activeCount()), 0);
  const std::vector<int32_t> oldToNew = cache_.retireAndCompact(none);
  if (proposer_) proposer_->onCompact(oldToNew);
  running_.clear();
  waiting_.clear();
  prepared_ = false;
}

// Emits `token` for the request; returns true when it is finished.
bool DecodeEngine::emit(Request& req, int32_t token) {
  const GenerationRequest& q = req.q;
  GenerationResult& res = req.result;
  res.tokens.push_back(token);
  if (req.onToken) req.onToken(req.index, token);
  if (req.cancelled) return true;  // cancelled from the callback
  if (std::find(q.stopTokens.begin(), q.stopTokens.end(), token) != q.stopTokens.end() ||
      (q.stopWhen && q.stopWhen())) {
    res.finish = FinishReason::kStop;
    return true;
  }
  if (static_cast<int32_t>(res.tokens.size()) >= q.maxNewTokens) {
    res.finish = FinishReason::kLength;
    return true;
  }
  return false;
}

// Ends the request with an error: the target's logits that would choose its next token are not
// finite. The tokens it emitted before stay.
void DecodeEngine::failNonFinite(Request& req) {
  GenerationResult& res = req.result;
  const size_t index = res.tokens.size();
  res.finish = FinishReason::kError;
  res.error = "the target model's logits are not finite (NaN or inf) at generated token " +
              std::to_string(index) + " (position " + std::to_string(req.q.prompt.size() + index) +
              "); the model weights or activations overflowed";
}

// The decoding requests: slots [0, D) (they precede the prefilling ones, see step()).
int32_t DecodeEngine::decodingCount() const {
  int32_t d = 0;
  while (d < static_cast<int32_t>(running_.size()) && running_[static_cast<size_t>(d)]->decoding) {
    ++d;
  }
  return d;
}

// The step's prefill: chunks of the admitted request still prefilling, then of queued requests
// admitted in order (a free slot, and pages), while the step's budget holds the next chunk; a
// chunk is never cut to fit the budget, so its rows depend only on the request. A request whose
// prompt completes samples its first token at once and decodes from this step on. Returns
// whether it did any work.
bool DecodeEngine::prefillArrivals() {
  int64_t rows = unboundedPrefill_ ? INT64_MAX : prefillBudget_;
  bool any = false;
  for (int32_t slot = decodingCount(); rows > 0;) {
    if (slot == static_cast<int32_t>(running_.size())) {
      if (waiting_.empty() || slot >= maxBatch_ || !admitNext()) break;
      any = true;
    }
    Request& req = *running_[static_cast<size_t>(slot)];
    if (req.done) {  // cancelled while prefilling, by a callback of this step: retired after it
      ++slot;
      continue;
    }
    const std::vector<int32_t>& prompt = req.q.prompt;
    const int32_t L = static_cast<int32_t>(prompt.size());
    const int32_t count = prefillChunkRows(cache_, slot, L, req.prefilled, prefillChunk_);
    if (count > rows) break;  // the next step runs it
    // A reused prefix already holds the target's K/V and, for a draft request, the draft's
    // context K/V of those positions: only the rest of the prompt runs; with a draft each chunk
    // becomes draft context at once (round 0).
    prefillChunk(
        target_, cache_, slot, prompt, req.prefilled, count, [&](const model::ForwardBatch& chunk) {
          if (!proposer_) return;
          proposer_->appendContext(target_, chunk.positions, chunk.tokenToSequence, cache_);
          cache_.commitDraft(slot, static_cast<int32_t>(chunk.tokens.size()));
        });
    req.prefilled += count;
    rows -= count;
    stats_.prefillRows += count;
    any = true;
    reportPrefill(options_.onProgress, req.prefilled, L);
    if (req.prefilled == L) {
      if (!req.done) finishPrefill(req, slot);  // done: cancelled by onProgress, retired after
      ++slot;
    }
  }
  return any;
}

// Admits the queue's first request into the next slot: every page it may touch (prompt and
// maxNewTokens, the speculative rows included) is its own from here to its end; with prefix
// reuse the longest published prefix of its prompt is shared and counts as prefilled. Returns
// false, changing nothing, when the cache cannot take it while other requests run (their pages
// are released as they finish).
bool DecodeEngine::admitNext() {
  Request& req = *waiting_.front();
  const GenerationRequest& q = req.q;
  int32_t slot = 0, reused = 0;
  try {
    if (cache_.prefixReuse()) {
      // The pages it may touch: checkRequest keeps positionsNeeded within the capacity.
      const kv::KvCacheManager::Admission a = cache_.admit(
          q.prompt, static_cast<int32_t>(std::min<int64_t>(positionsNeeded(q), cache_.capacity())),
          withDraft_);
      slot = a.slot;
      reused = a.reusedTokens;
    } else {
      slot = cache_.admit();  // the slot's identity-mapped pages hold the whole capacity
    }
  } catch (const Error&) {
    if (!running_.empty()) return false;
    throw;  // nothing runs that could free pages: the cache can never take it
  }
  running_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  if (proposer_) proposer_->onAdmit(slot, req.index);
  req.prefilled = reused;
  stats_.reusedTokens += reused;
  reportPrefill(options_.onProgress, reused, static_cast<int32_t>(q.prompt.size()));
  return true;
}

// The prompt of the request in `slot` is in the cache: publish its blocks, choose and emit its
// first token; it decodes from now on.
void DecodeEngine::finishPrefill(Request& req, int32_t slot) {
  const GenerationRequest& q = req.q;
  // Published now, so requests admitted after it share its prompt already.
  if (cache_.prefixReuse()) cache_.publish(slot, q.prompt);
  // The first token uses the per-slot arrays and out_; prepare() reloads them for the batch,
  // which this request joins.
  prepared_ = false;
  req.decoding = true;
  const int32_t first = sampleFirstToken(q.sampling, static_cast<int64_t>(q.prompt.size()) - 1);
  req.pending = first;
  if (first == kNonFiniteToken) {
    failNonFinite(req);
    req.done = true;
  } else {
    req.done = emit(req, first) || req.done;
  }
}

// Retires the finished requests of the batch (their slots and pages are free at once) and moves
// the survivors, in order, to the front.
void DecodeEngine::retireFinished() {
  std::vector<uint8_t> keep(running_.size(), 1);
  bool any = false;
  for (size_t s = 0; s < running_.size(); ++s) {
    if (!running_[s]->done) continue;
    keep[s] = 0;
    any = true;
  }
  if (!any) return;
  const std::vector<int32_t> oldToNew = cache_.retireAndCompact(keep);
  if (proposer_) proposer_->onCompact(oldToNew);
  // The decode batch's device state holds slots [0, D): it is stale when a decoding request
  // leaves or moves (prefilling requests sit above the decoding ones: their leaving moves none).
  std::vector<std::unique_ptr<Request>> survivors;
  for (size_t s = 0; s < running_.size(); ++s) {
    Request& req = *running_[s];
    if (req.decoding && oldToNew[s] != static_cast<int32_t>(s)) prepared_ = false;
    if (keep[s]) {
      survivors.push_back(std::move(running_[s]));
    } else {
      finished_.push_back({.id = req.id, .index = req.index, .result = std::move(req.result)});
    }
  }
  running_ = std::move(survivors);
}

// (Re)loads the per-slot state of the decoding requests (slots [0, D)); each step builds its own
// inputs.
void DecodeEngine::prepare() {
  const int32_t B = decodingCount();
  sampled_ =
      std::any_of(running_.begin(), running_.begin() + B,
                  [](const std::unique_ptr<Request>& r) { return !isGreedy(r->q.sampling); });
  std::vector<int32_t> lastTokens(static_cast<size_t>(B));
  std::vector<const GenerationRequest*> requestOfSlot(static_cast<size_t>(B));
  for (int32_t s = 0; s < B; ++s) {
    lastTokens[static_cast<size_t>(s)] = running_[static_cast<size_t>(s)]->pending;
    requestOfSlot[static_cast<size_t>(s)] = &running_[static_cast<size_t>(s)]->q;
  }
  uploadState(B, lastTokens, requestOfSlot);
  target_.syncPageTable(cache_);
  if (proposer_) proposer_->prepareLaunch(cache_);
  prepared_ = true;
}

// One device step of the B running slots, then the host's side of it: stream the emitted
// tokens, mirror the commits in the cache, mark finished requests.
void DecodeEngine::decodeStep(int32_t B) {
  const int32_t W = chooseWidth(B), BS = blockSize_;
  // The step writes W rows from each committed length (and the draft its block of BS rows
  // there): never into pages shared with other requests.
  stepWrites_.clear();
  for (int32_t s = 0; s < B; ++s) {
    cache_.checkWritable(s, cache_.baseLength(s), W);
    if (withDraft_) cache_.checkWritable(s, cache_.draftLength(s), BS);
    stepWrites_.push_back({s, W});
  }
  // Binds the window pages of the W rows (sliding-window layers) before launchStep uploads
  // the tables; the device commits at most W of them.
  const int64_t stepId = cache_.beginStep(stepWrites_);
  const Clock::time_point launched = Clock::now();
  const bool timed = launchStep(B, W);
  ++stats_.iterations;
  ++stats_.widthSteps[static_cast<size_t>(W)];
  int32_t* host = outHost_.as<int32_t>();
  backend_.copyToHost(host, out_, (int64_t{B} + int64_t{B} * W) * 4);  // the one D2H copy
  const double seconds = secondsSince(launched);
  // The copy waited for the whole step (same stream, after its last kernel): its window pages
  // are no longer read, so the pages the commits below push out of the window can be rebound.
  cache_.completeStep(stepId);

  for (int32_t s = 0; s < B; ++s) {
    Request& req = *running_[static_cast<size_t>(s)];
    const int32_t count = host[s];
    if (count < 1 || count > W) {
      ES_THROW(Error, "DecodeEngine::step: the step emitted ", count, " tokens for slot ", s,
               ", outside [1, ", W, "]: the device state is corrupt");
    }
    const int32_t* tokens = host + B + static_cast<int64_t>(s) * W;
    int32_t emitted = 0;
    bool finished = req.done, failed = false;  // done: cancelled by a callback of this step
    while (emitted < count && !finished) {
      if (tokens[emitted] == kNonFiniteToken) {  // the accepted run ends at such a token
        failNonFinite(req);
        finished = failed = true;
      } else {
        finished = emit(req, tokens[emitted++]);
      }
    }
    ++stats_.verifySteps;
    stats_.acceptedTokens += emitted;
    ++stats_.acceptHistogram[static_cast<size_t>(emitted)];
    // Mirror the device's commit (the whole count, even past a stop: such a slot retires).
    cache_.commitBase(s, count);
    if (proposer_) cache_.commitDraft(s, count);
    req.pending = tokens[count - 1];
    if (finished && !req.done) {
      // A failed request's cache state came from non-finite activations: not shared further.
      if (!failed) publishFinished(req, s);
      req.done = true;
    }
  }
  // The policy learns from the steps it chose (greedy batches; the counts are in range here).
  if (policy_ && !sampled_) policy_->observe(B, W, timed ? seconds : -1.0, host);
}

int32_t DecodeEngine::chooseWidth(int32_t B) {
  if (!policy_) return width_;
  if (sampled_) return sampledWidth_;  // fixed for a sampled request's whole life
  return policy_->choose(B);
}

// Publishes a finishing request's complete blocks (prompt and generated tokens whose K/V is
// committed) before its slot retires.
void DecodeEngine::publishFinished(const Request& req, int32_t slot) {
  if (!cache_.prefixReuse()) return;
  std::vector<int32_t> tokens = req.q.prompt;
  const std::vector<int32_t>& out = req.result.tokens;
  tokens.insert(tokens.end(), out.begin(), out.end());
  cache_.publish(slot, tokens);
}

}  // namespace es::runtime
