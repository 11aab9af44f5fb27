#include "runtime/prefill.h"

#include <algorithm>
#include <string>

#include "common/errors.h"

namespace es::runtime {

void prefillSequence(model::TargetModel& target, kv::KvCacheManager& cache, int32_t slot,
                     const std::vector<int32_t>& prompt,
                     const std::function<void(const model::ForwardBatch&)>& onChunk,
                     int32_t firstPosition, const ProgressCallback& onProgress) {
  constexpr const char* kWhere = "prefillSequence";
  const int32_t L = static_cast<int32_t>(prompt.size());
  // The last row's logits are the point of a prefill: at least one row runs.
  ES_CHECK_ARG(firstPosition >= 0 && firstPosition < L, kWhere, "firstPosition", firstPosition,
               "must be in [0, prompt.size() = ", L, ")");
  ES_CHECK_ARG(cache.baseLength(slot) == firstPosition, kWhere, "firstPosition", firstPosition,
               "must equal slot " + std::to_string(slot) + "'s committed length ",
               cache.baseLength(slot));
  reportPrefill(onProgress, firstPosition, L);
  for (int32_t first = firstPosition; first < L;) {
    const int32_t count = prefillChunkRows(cache, slot, L, first, target.maxTokens());
    prefillChunk(target, cache, slot, prompt, first, count, onChunk);
    first += count;
    reportPrefill(onProgress, first, L);
  }
}

int32_t prefillChunkRows(const kv::KvCacheManager& cache, int32_t slot, int32_t promptSize,
                         int32_t first, int32_t maxRows) {
  // A chunk binds the window pages of all its rows at once: with sliding-window layers the
  // slot's reservation bounds it (maxStepTokens >= 128 once earlier steps completed).
  return static_cast<int32_t>(
      std::min<int64_t>({maxRows, promptSize - first, cache.maxStepTokens(slot)}));
}

void prefillChunk(model::TargetModel& target, kv::KvCacheManager& cache, int32_t slot,
                  const std::vector<int32_t>& prompt, int32_t first, int32_t count,
                  const std::function<void(const model::ForwardBatch&)>& onChunk) {
  constexpr const char* kWhere = "prefillChunk";
  const int32_t L = static_cast<int32_t>(prompt.size());
  ES_CHECK_ARG(cache.baseLength(slot) == first, kWhere, "first", first,
               "must equal slot " + std::to_string(slot) + "'s committed length ",
               cache.baseLength(slot));
  ES_CHECK_ARG(count > 0, kWhere, "slot", slot, "has no room for a prefill chunk at position ",
               first, " (capacity or window reservation; complete the running steps first)");
  ES_CHECK_ARG(int64_t{first} + count <= L && count <= target.maxTokens(), kWhere, "count", count,
               "must fit the prompt (" + std::to_string(L - first) +
                   " positions left) and the target's rows per forward ",
               target.maxTokens());
  cache.checkWritable(slot, first, count);
  // Batch entry b is page-table row b: the lower slots take part with no rows.
  model::ForwardBatch b;
  b.cuQSeqLens.assign(static_cast<size_t>(slot) + 2, 0);
  b.kvLengths.assign(static_cast<size_t>(slot) + 1, 0);
  for (int32_t s = 0; s < slot; ++s) b.kvLengths[static_cast<size_t>(s)] = cache.baseLength(s);
  for (int32_t i = 0; i < count; ++i) {
    b.tokens.push_back(prompt[static_cast<size_t>(first + i)]);
    b.positions.push_back(first + i);
    b.tokenToSequence.push_back(slot);
  }
  b.cuQSeqLens[static_cast<size_t>(slot) + 1] = count;
  b.kvLengths[static_cast<size_t>(slot)] = first + count;
  if (first + count == L) b.logitRows = {count - 1};
  const kv::SwaStepWrite write{slot, count};
  const int64_t step = cache.beginStep({&write, 1});
  target.forwardOnBackend(b, cache);
  // forwardOnBackend() returned once the chunk completed, so the pages that leave the window
  // with this commit go straight back to the reservation.
  cache.completeStep(step);
  cache.commitBase(slot, count);
  if (onChunk) onChunk(b);
}

void reportPrefill(const ProgressCallback& onProgress, int32_t done, int32_t total) {
  if (onProgress) onProgress({.task = "prefill", .unit = "tokens", .done = done, .total = total});
}

}  // namespace es::runtime
