#pragma once
// Shared pieces of the decoders: the chunked prefill of one sequence and the host-side choice of
// the next token from a logits row.
#include <cstdint>
#include <functional>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "runtime/generation.h"

namespace es::runtime {

// Runs prompt positions [firstPosition, prompt.size()) through the target into page-table row
// `slot` (an active slot of `cache` whose lower slots keep their lengths, with firstPosition
// tokens committed: a reused prefix, 0 without one), in chunks of at most target.maxTokens()
// rows (and cache.maxStepTokens(slot): sliding-window reservations), each one cache step
// (beginStep, forward, completeStep), committing each chunk to the base cache and then calling
// onChunk with that chunk's forward batch. Returns the f32 logits [vocab] of the prompt's last
// row.
std::vector<float> prefillSequence(model::TargetModel& target, kv::KvCacheManager& cache,
                                   int32_t slot, const std::vector<int32_t>& prompt,
                                   const std::function<void(const model::ForwardBatch&)>& onChunk = {},
                                   int32_t firstPosition = 0);

// First maximum (ties to the lower index, spec §3.2).
int32_t argmaxRow(const float* row, int64_t vocab);

// The token following absolute position `lastPosition`: argmax for a greedy config, else a
// filtered sample with request_uniform(seed, lastPosition, kTarget, 0) (spec §3.6).
int32_t chooseToken(const float* row, int64_t vocab, const SamplingConfig& sampling,
                    int64_t lastPosition);

}  // namespace es::runtime
