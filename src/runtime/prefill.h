#pragma once
// The chunked prefill of one sequence (DecodeEngine's first phase; tests call it directly).
#include <cstdint>
#include <functional>
#include <vector>

#include "common/progress.h"
#include "kv/kv_cache_manager.h"
#include "model/target_model.h"

namespace es::runtime {

// Runs prompt positions [firstPosition, prompt.size()) through the target into page-table row
// `slot` (an active slot of `cache` whose lower slots keep their lengths, with firstPosition
// tokens committed: a reused prefix, 0 without one), in chunks of prefillChunkRows(...,
// target.maxTokens()) rows, each one prefillChunk. The prompt's last row's f32 logits [vocab] are
// left on the backend, in target.logitsDevice() (no host copy: the engine chooses the token
// there). onProgress hears "prefill" with the prompt positions done before the first chunk and
// after each one.
void prefillSequence(model::TargetModel& target, kv::KvCacheManager& cache, int32_t slot,
                     const std::vector<int32_t>& prompt,
                     const std::function<void(const model::ForwardBatch&)>& onChunk = {},
                     int32_t firstPosition = 0, const ProgressCallback& onProgress = {});

// Rows of the prefill chunk of `slot` that starts at prompt position `first`: at most maxRows,
// the rest of the prompt (promptSize - first) and cache.maxStepTokens(slot) (capacity, and the
// sliding-window reservation).
int32_t prefillChunkRows(const kv::KvCacheManager& cache, int32_t slot, int32_t promptSize,
                         int32_t first, int32_t maxRows);

// One prefill chunk: prompt positions [first, first + count) through the target into row `slot`
// (first = the slot's committed length, count <= target.maxTokens() and
// cache.maxStepTokens(slot)) as one cache step (beginStep, forward, completeStep), committed to
// the base cache; then onChunk hears the chunk's forward batch. A chunk that ends the prompt
// leaves its last row's f32 logits in target.logitsDevice().
void prefillChunk(model::TargetModel& target, kv::KvCacheManager& cache, int32_t slot,
                  const std::vector<int32_t>& prompt, int32_t first, int32_t count,
                  const std::function<void(const model::ForwardBatch&)>& onChunk = {});

// Tells onProgress (if set) that `done` of a prompt's `total` positions are in the cache (task
// "prefill", unit "tokens").
void reportPrefill(const ProgressCallback& onProgress, int32_t done, int32_t total);

}  // namespace es::runtime
