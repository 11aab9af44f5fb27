#include "runtime/speculative_decoder.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "runtime/prefill.h"

namespace es::runtime {

std::vector<int32_t> acceptGreedyChain(const std::vector<int32_t>& drafts,
                                       const std::vector<int32_t>& targetArgmax, int32_t budget) {
  ES_CHECK_ARG(!drafts.empty() && drafts.size() == targetArgmax.size(), "acceptGreedyChain",
               "drafts.size()", drafts.size(), "must be > 0 and equal targetArgmax.size() = ",
               targetArgmax.size());
  ES_CHECK_ARG(budget >= 1, "acceptGreedyChain", "budget", budget, "must be >= 1");
  size_t matched = 0;
  while (matched + 1 < drafts.size() && drafts[matched + 1] == targetArgmax[matched]) ++matched;
  const size_t emitted = std::min(matched + 1, static_cast<size_t>(budget));
  return std::vector<int32_t>(targetArgmax.begin(), targetArgmax.begin() + static_cast<int64_t>(emitted));
}

SpeculativeDecoder::SpeculativeDecoder(model::TargetModel& target, DraftProposer& proposer,
                                       kv::KvCacheManager& cache)
    : target_(target), proposer_(proposer), cache_(cache) {}

std::vector<GenerationResult> SpeculativeDecoder::generate(
    const std::vector<GenerationRequest>& requests, const PlainDecoder::TokenCallback& onToken) {
  const int32_t n = static_cast<int32_t>(requests.size());
  const int32_t BS = proposer_.blockSize();
  const char* where = "SpeculativeDecoder::generate";
  ES_CHECK_ARG(cache_.activeCount() == 0, where, "active slots", cache_.activeCount(),
               "must be 0: the cache must be empty");
  ES_CHECK_ARG(n > 0 && n <= cache_.maxBatchSize(), where, "requests.size()", n,
               "must be in [1, maxBatchSize = ", cache_.maxBatchSize(), "]");
  ES_CHECK_ARG(BS >= 2, where, "blockSize", BS, "must be >= 2");
  ES_CHECK_ARG(static_cast<int64_t>(n) * BS <= target_.maxTokens(), where, "requests.size() * blockSize",
               static_cast<int64_t>(n) * BS, "must fit one verify forward (maxTokens = ",
               target_.maxTokens(), ")");
  // Every target forward's rows go to the draft as context: prefill chunks (maxTokens) and verifies.
  ES_CHECK_ARG(target_.maxTokens() <= proposer_.maxContextRows(), where, "target maxTokens",
               target_.maxTokens(), "must be <= the draft's context rows per call (",
               proposer_.maxContextRows(), ")");
  ES_CHECK_ARG(n <= proposer_.maxBatch(), where, "requests.size()", n,
               "must be <= the draft's maxBatch (", proposer_.maxBatch(), ")");
  for (int32_t r = 0; r < n; ++r) {
    const GenerationRequest& q = requests[static_cast<size_t>(r)];
    const std::string name = "requests[" + std::to_string(r) + "]";
    ES_CHECK_ARG(!q.prompt.empty(), where, name + ".prompt.size()", 0, "must be > 0");
    ES_CHECK_ARG(q.maxNewTokens >= 1, where, name + ".maxNewTokens", q.maxNewTokens, "must be >= 1");
    ES_CHECK_ARG(q.sampling.temperature < 1e-3f, where, name + ".sampling.temperature",
                 q.sampling.temperature,
                 "must be < 1e-3: this decoder is greedy (sampled speculative decoding, spec §3.7, "
                 "is not wired into the loop yet)");
    // Verify writes BS rows past the committed length (spec §6, capacity).
    const int64_t total = static_cast<int64_t>(q.prompt.size()) + q.maxNewTokens + BS;
    ES_CHECK_ARG(total <= std::min(cache_.capacity(), target_.maxPositions()), where,
                 name + " prompt + maxNewTokens + blockSize", total, "must fit the KV capacity (",
                 cache_.capacity(), ") and the RoPE table (", target_.maxPositions(), ")");
  }
  const int64_t V = target_.config().vocab_size;
  stats_ = SpeculationStats{};
  stats_.acceptHistogram.assign(static_cast<size_t>(BS) + 1, 0);
  std::vector<GenerationResult> results(static_cast<size_t>(n));
  std::vector<int32_t> slotOf(static_cast<size_t>(n));     // request -> slot, -1 when finished
  std::vector<int32_t> pending(static_cast<size_t>(n));    // last emitted token, in no cache yet
  std::vector<std::vector<int32_t>> drafts(static_cast<size_t>(n));  // [BS] proposal per request

  // Prefill (chunked), each chunk's rows becoming draft context right away (round 0).
  for (int32_t r = 0; r < n; ++r) {
    const int32_t slot = cache_.admit();
    slotOf[static_cast<size_t>(r)] = slot;
    const std::vector<int32_t>& prompt = requests[static_cast<size_t>(r)].prompt;
    const std::vector<float> logits =
        prefillSequence(target_, cache_, slot, prompt, [&](const model::ForwardBatch& chunk) {
          proposer_.appendContext(target_, chunk.positions, chunk.tokenToSequence, cache_);
          cache_.commitDraft(slot, static_cast<int32_t>(chunk.tokens.size()));
        });
    pending[static_cast<size_t>(r)] = argmaxRow(logits.data(), V);
  }

  auto proposeAll = [&]() {
    const int32_t B = cache_.activeCount();
    std::vector<int32_t> anchors(static_cast<size_t>(B)), starts(static_cast<size_t>(B));
    std::vector<int32_t> requestOfSlot(static_cast<size_t>(B), -1);
    for (int32_t r = 0; r < n; ++r) {
      const int32_t s = slotOf[static_cast<size_t>(r)];
      if (s < 0) continue;
      requestOfSlot[static_cast<size_t>(s)] = r;
      anchors[static_cast<size_t>(s)] = pending[static_cast<size_t>(r)];
      starts[static_cast<size_t>(s)] = cache_.draftLength(s);
    }
    const std::vector<int32_t> blocks = proposer_.propose(anchors, starts, cache_);
    ES_CHECK_ARG(blocks.size() == static_cast<size_t>(B) * BS, where, "proposal size",
                 blocks.size(), "must be batch * blockSize = ", static_cast<int64_t>(B) * BS);
    for (int32_t s = 0; s < B; ++s) {
      drafts[static_cast<size_t>(requestOfSlot[static_cast<size_t>(s)])].assign(
          blocks.begin() + static_cast<int64_t>(s) * BS, blocks.begin() + static_cast<int64_t>(s + 1) * BS);
    }
    return requestOfSlot;
  };

  std::vector<int32_t> requestOfSlot = proposeAll();
  while (true) {
    // Verify: rows [pending, d_1 .. d_{BS-1}] at positions baseLen + i, causal.
    const int32_t B = cache_.activeCount();
    model::ForwardBatch verify;
    verify.cuQSeqLens.assign(static_cast<size_t>(B) + 1, 0);
    verify.kvLengths.assign(static_cast<size_t>(B), 0);
    for (int32_t s = 0; s < B; ++s) {
      const int32_t r = requestOfSlot[static_cast<size_t>(s)];
      const int32_t base = cache_.baseLength(s);
      for (int32_t i = 0; i < BS; ++i) {
        verify.tokens.push_back(i == 0 ? pending[static_cast<size_t>(r)] : drafts[static_cast<size_t>(r)][static_cast<size_t>(i)]);
        verify.positions.push_back(base + i);
        verify.tokenToSequence.push_back(s);
        verify.logitRows.push_back(s * BS + i);
      }
      verify.cuQSeqLens[static_cast<size_t>(s) + 1] = (s + 1) * BS;
      verify.kvLengths[static_cast<size_t>(s)] = base + BS;
    }
    const model::ForwardResult out = target_.forward(verify, cache_);

    // Accept, emit, commit; the committed rows become the draft's next context delta.
    std::vector<int32_t> deltaPositions(static_cast<size_t>(B) * BS, -1), deltaOwners(deltaPositions.size(), -1);
    std::vector<int32_t> accepted(static_cast<size_t>(B));
    std::vector<uint8_t> keep(static_cast<size_t>(B), 1);
    for (int32_t s = 0; s < B; ++s) {
      const int32_t r = requestOfSlot[static_cast<size_t>(s)];
      const GenerationRequest& q = requests[static_cast<size_t>(r)];
      GenerationResult& res = results[static_cast<size_t>(r)];
      std::vector<int32_t> targetArgmax(static_cast<size_t>(BS));
      for (int32_t i = 0; i < BS; ++i) {
        targetArgmax[static_cast<size_t>(i)] = argmaxRow(out.logits.data() + (static_cast<int64_t>(s) * BS + i) * V, V);
      }
      // pending is emitted when it is produced; the chain's budget is what remains after it.
      if (res.tokens.empty()) {
        res.tokens.push_back(pending[static_cast<size_t>(r)]);
        if (onToken) onToken(r, pending[static_cast<size_t>(r)]);
      }
      const bool pendingStops = std::find(q.stopTokens.begin(), q.stopTokens.end(),
                                          pending[static_cast<size_t>(r)]) != q.stopTokens.end();
      const int32_t budget = q.maxNewTokens - static_cast<int32_t>(res.tokens.size());
      std::vector<int32_t> emitted;
      if (!pendingStops && budget > 0) {
        emitted = acceptGreedyChain(drafts[static_cast<size_t>(r)], targetArgmax, budget);
        const auto stop = std::find_first_of(emitted.begin(), emitted.end(), q.stopTokens.begin(), q.stopTokens.end());
        if (stop != emitted.end()) emitted.erase(stop + 1, emitted.end());
      }
      // Rows 0 .. emitted.size()-1 of this sequence (pending and the accepted drafts) are now
      // committed context; the last emitted token becomes the next pending.
      const int32_t count = static_cast<int32_t>(emitted.size());
      accepted[static_cast<size_t>(s)] = count;
      const int32_t base = cache_.baseLength(s);
      for (int32_t i = 0; i < count; ++i) {
        deltaPositions[static_cast<size_t>(s) * BS + i] = base + i;
        deltaOwners[static_cast<size_t>(s) * BS + i] = s;
      }
      for (int32_t t : emitted) {
        res.tokens.push_back(t);
        if (onToken) onToken(r, t);
      }
      if (count > 0) {
        ++stats_.verifySteps;
        stats_.acceptedTokens += count;
        ++stats_.acceptHistogram[static_cast<size_t>(count)];
        pending[static_cast<size_t>(r)] = emitted.back();
      }
      const bool stopped = pendingStops || (count > 0 && std::find(q.stopTokens.begin(), q.stopTokens.end(),
                                                                   emitted.back()) != q.stopTokens.end());
      if (stopped || static_cast<int32_t>(res.tokens.size()) >= q.maxNewTokens) {
        res.finish = stopped ? FinishReason::kStop : FinishReason::kLength;
        keep[static_cast<size_t>(s)] = 0;
      }
    }
    for (int32_t s = 0; s < B; ++s) cache_.commitBase(s, accepted[static_cast<size_t>(s)]);
    proposer_.appendContext(target_, deltaPositions, deltaOwners, cache_);
    for (int32_t s = 0; s < B; ++s) cache_.commitDraft(s, accepted[static_cast<size_t>(s)]);

    const std::vector<int32_t> oldToNew = cache_.retireAndCompact(keep);
    for (int32_t& slot : slotOf) {
      if (slot >= 0) slot = oldToNew[static_cast<size_t>(slot)];
    }
    if (cache_.activeCount() == 0) break;
    requestOfSlot = proposeAll();
  }
  return results;
}

}  // namespace es::runtime
