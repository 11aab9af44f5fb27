#include "runtime/plain_decoder.h"

#include <algorithm>
#include <string>

#include "common/errors.h"
#include "kernels/sampling.h"

namespace es::runtime {
namespace {

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);  // first maximum
}

// The token that follows position `lastPosition`, chosen from f32 logits `row` [vocab].
int32_t chooseToken(const float* row, int64_t vocab, const SamplingConfig& s, int64_t lastPosition) {
  if (s.temperature < 1e-3f) return argmax(row, vocab);
  SamplingParams p;
  p.logits = row;
  p.logits_dtype = DType::kF32;
  p.batch = 1;
  p.vocab = static_cast<int32_t>(vocab);
  p.temperature = s.temperature;
  p.top_k = s.topK;
  p.top_p = s.topP;
  p.seeds = &s.seed;
  p.positions = &lastPosition;
  int32_t token = -1;
  p.tokens = &token;
  ref::sample_rows(p);
  return token;
}

}  // namespace

PlainDecoder::PlainDecoder(model::TargetModel& target, kv::KvCacheManager& cache)
    : target_(target), cache_(cache) {}

std::vector<GenerationResult> PlainDecoder::generate(const std::vector<GenerationRequest>& requests,
                                                     const TokenCallback& onToken) {
  const int32_t n = static_cast<int32_t>(requests.size());
  ES_CHECK_ARG(cache_.activeCount() == 0, "PlainDecoder::generate", "active slots",
               cache_.activeCount(), "must be 0: the cache must be empty");
  ES_CHECK_ARG(n > 0 && n <= cache_.maxBatchSize(), "PlainDecoder::generate", "requests.size()", n,
               "must be in [1, maxBatchSize = ", cache_.maxBatchSize(), "]");
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

  // Prefill, one request at a time, in chunks of at most maxTokens rows.
  for (int32_t r = 0; r < n; ++r) {
    const int32_t slot = cache_.admit();
    slotOf[static_cast<size_t>(r)] = slot;
    const std::vector<int32_t>& prompt = requests[static_cast<size_t>(r)].prompt;
    const int32_t L = static_cast<int32_t>(prompt.size());
    for (int32_t first = 0; first < L; first += target_.maxTokens()) {
      const int32_t count = std::min(target_.maxTokens(), L - first);
      model::ForwardBatch b;
      b.cuQSeqLens.assign(static_cast<size_t>(slot) + 2, 0);
      b.kvLengths.assign(static_cast<size_t>(slot) + 1, 0);
      for (int32_t s = 0; s < slot; ++s) b.kvLengths[static_cast<size_t>(s)] = cache_.baseLength(s);
      for (int32_t i = 0; i < count; ++i) {
        b.tokens.push_back(prompt[static_cast<size_t>(first + i)]);
        b.positions.push_back(first + i);
        b.tokenToSequence.push_back(slot);
      }
      b.cuQSeqLens[static_cast<size_t>(slot) + 1] = count;  // only this sequence has rows
      b.kvLengths[static_cast<size_t>(slot)] = first + count;
      if (first + count == L) b.logitRows = {count - 1};
      const model::ForwardResult out = target_.forward(b, cache_);
      cache_.commitBase(slot, count);
      if (first + count == L) {
        next[static_cast<size_t>(r)] =
            chooseToken(out.logits.data(), V, requests[static_cast<size_t>(r)].sampling, L - 1);
      }
    }
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
