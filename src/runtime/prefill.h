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
// tokens committed: a reused prefix, 0 without one), in chunks of at most target.maxTokens()
// rows (and cache.maxStepTokens(slot): sliding-window reservations), each one cache step
// (beginStep, forward, completeStep), committing each chunk to the base cache and then calling
// onChunk with that chunk's forward batch. The prompt's last row's f32 logits [vocab] are left on
// the backend, in target.logitsDevice() (no host copy: the engine chooses the token there).
// onProgress hears "prefill" with the prompt positions done before the first chunk and after
// each one.
void prefillSequence(model::TargetModel& target, kv::KvCacheManager& cache, int32_t slot,
                     const std::vector<int32_t>& prompt,
                     const std::function<void(const model::ForwardBatch&)>& onChunk = {},
                     int32_t firstPosition = 0, const ProgressCallback& onProgress = {});

}  // namespace es::runtime
