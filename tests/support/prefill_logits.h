#pragma once
// prefillSequence leaves the prompt's last-row logits on the backend (the engine samples them
// there); tests that compare them read them back with this.
#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/target_model.h"
#include "runtime/prefill.h"

namespace es::test {

// runtime::prefillSequence, then a host copy of the f32 logits [vocab] of the prompt's last row.
inline std::vector<float> prefillLogits(model::TargetModel& target, kv::KvCacheManager& cache,
                                        int32_t slot, const std::vector<int32_t>& prompt,
                                        int32_t firstPosition = 0) {
  runtime::prefillSequence(target, cache, slot, prompt, {}, firstPosition);
  std::vector<float> logits(static_cast<size_t>(target.config().vocab_size));
  target.backend().copyToHost(logits.data(), target.logitsDevice(),
                              static_cast<int64_t>(logits.size() * sizeof(float)));
  return logits;
}

}  // namespace es::test
