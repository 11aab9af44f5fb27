#include "runtime/plain_decoder.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "runtime/prefill.h"

namespace es::runtime {

PlainDecoder::PlainDecoder(model::TargetModel& target, kv::KvCacheManager& cache)
    : target_(target), cache_(cache) {}

std::vector<GenerationResult> PlainDecoder::generate(const std::vector<GenerationRequest>& requests,
                                                     const TokenCallback& onToken) {
  const int32_t n = static_cast<int32_t>(requests.size());
  ES_CHECK_ARG(cache_.activeCount() == 0, "PlainDecoder::generate", "active slots",
               cache_.activeCount(), "must be 0: the cache must be empty");
  ES_CHECK_ARG(n > 0 && n <= std::min(cache_.maxBatchSize(), target_.maxTokens()),
               "PlainDecoder::generate", "requests.size()", n, "must be in [1, min(maxBatchSize = ",
               cache_.maxBatchSize(), ", maxTokens = ", target_.maxTokens(), ")]: one decode step "
               "carries a row per request");
  for (int32_t r = 0; r < n; ++r) {
    const GenerationRequest& q = requests[static_cast<size_t>(r)];
    const std::string name = "requests[" + std::to_string(r) + "]";
    ES_CHECK_ARG(!q.prompt.empty(), "PlainDecoder::generate", name + ".prompt.size()", 0, "must be > 0");
    ES_CHECK_ARG(q.maxNewTokens >= 1, "PlainDecoder::generate", name + ".maxNewTokens",
                 q.maxNewTokens, "must be >= 1");
    ES_CHECK_ARG(q.sampling.temperature >= 0.0f, "PlainDecoder::generate",
                 name + ".sampling.temperature", q.sampling.temperature, "must be >= 0");
    ES_CHECK_ARG(q.sampling.topP > 0.0f && q.sampling.topP <= 1.0f, "PlainDecoder::generate",
                 name + ".sampling.topP", q.sampling.topP, "must be in (0, 1]");
    const int64_t total = static_cast<int64_t>(q.prompt.size()) + q.maxNewTokens;
    ES_CHECK_ARG(total <= std::min(cache_.capacity(), target_.maxPositions()),
                 "PlainDecoder::generate", name + " prompt + maxNewTokens", total,
                 "must fit the KV capacity (", cache_.capacity(), ") and the RoPE table (",
                 target_.maxPositions(), ")");
  }
  const int64_t V = target_.config().vocab_size;
  std::vector<GenerationResult> results(static_cast<size_t>(n));
  std::vector<int32_t> slotOf(static_cast<size_t>(n));  // request -> slot (-1 when finished)
  std::vector<int32_t> next(static_cast<size_t>(n));    // token to feed next, per request

  // Prefill, one request at a time (chunked), choosing each request's first token.
  for (int32_t r = 0; r < n; ++r) {
    const int32_t slot = cache_.admit();
    slotOf[static_cast<size_t>(r)] = slot;
    const GenerationRequest& q = requests[static_cast<size_t>(r)];
    const std::vector<float> logits = prefillSequence(target_, cache_, slot, q.prompt);
    next[static_cast<size_t>(r)] =
        chooseToken(logits.data(), V, q.sampling, static_cast<int64_t>(q.prompt.size()) - 1);
  }

  // Decode: emit the pending token of every live request, retire the finished, feed the rest.
  while (true) {
    std::vector<uint8_t> keep(static_cast<size_t>(cache_.activeCount()), 1);
    for (int32_t r = 0; r < n; ++r) {
      const int32_t slot = slotOf[static_cast<size_t>(r)];
      if (slot < 0) continue;
      GenerationResult& res = results[static_cast<size_t>(r)];
      const GenerationRequest& q = requests[static_cast<size_t>(r)];
      const int32_t token = next[static_cast<size_t>(r)];
      res.tokens.push_back(token);
      if (onToken) onToken(r, token);
      if (std::find(q.stopTokens.begin(), q.stopTokens.end(), token) != q.stopTokens.end()) {
        res.finish = FinishReason::kStop;
        keep[static_cast<size_t>(slot)] = 0;
      } else if (static_cast<int32_t>(res.tokens.size()) == q.maxNewTokens) {
        res.finish = FinishReason::kLength;
        keep[static_cast<size_t>(slot)] = 0;
      }
    }
    const std::vector<int32_t> oldToNew = cache_.retireAndCompact(keep);
    for (int32_t& slot : slotOf) {
      if (slot >= 0) slot = oldToNew[static_cast<size_t>(slot)];
    }
    const int32_t B = cache_.activeCount();
    if (B == 0) break;
    model::ForwardBatch step;
    step.cuQSeqLens.assign(static_cast<size_t>(B) + 1, 0);
    step.kvLengths.assign(static_cast<size_t>(B), 0);
    std::vector<int32_t> requestOfSlot(static_cast<size_t>(B), -1);
    for (int32_t r = 0; r < n; ++r) {
      if (slotOf[static_cast<size_t>(r)] >= 0) requestOfSlot[static_cast<size_t>(slotOf[static_cast<size_t>(r)])] = r;
    }
    for (int32_t s = 0; s < B; ++s) {  // batch entry s = page-table row s = slot s
      const int32_t r = requestOfSlot[static_cast<size_t>(s)];
      step.tokens.push_back(next[static_cast<size_t>(r)]);
      step.positions.push_back(cache_.baseLength(s));
      step.tokenToSequence.push_back(s);
      step.cuQSeqLens[static_cast<size_t>(s) + 1] = s + 1;
      step.kvLengths[static_cast<size_t>(s)] = cache_.baseLength(s) + 1;
      step.logitRows.push_back(s);
    }
    const model::ForwardResult out = target_.forward(step, cache_);
    for (int32_t s = 0; s < B; ++s) {
      const int32_t r = requestOfSlot[static_cast<size_t>(s)];
      const int64_t position = cache_.baseLength(s);  // of the token just fed
      cache_.commitBase(s, 1);
      next[static_cast<size_t>(r)] =
          chooseToken(out.logits.data() + s * V, V, requests[static_cast<size_t>(r)].sampling, position);
    }
  }
  return results;
}

}  // namespace es::runtime
