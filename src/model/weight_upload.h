#pragma once
// Moving checkpoint tensors into backend memory: streamed from the memory-mapped file in chunks
// of at most kUploadChunkBytes, converted to the backend's dtype on the way, so host memory
// beyond the page cache stays at one chunk whatever the model size.
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/buffer.h"
#include "model/weight_store.h"
#include "ops/backend.h"

namespace es::model {

inline constexpr int64_t kUploadChunkBytes = int64_t{16} << 20;

// Copies the tensor `name` (any supported dtype) converted to `dtype` into backend memory at
// `dst` (numel * dtype_size bytes).
void uploadTensor(ops::Backend& backend, const WeightStore& store, std::string_view name,
                  DType dtype, void* dst);

// Allocates one backend buffer and uploads `names` one after another (row concatenation, e.g.
// q/k/v projections into one fused matrix). The store must already have passed checkWeights.
Buffer uploadConcatenated(ops::Backend& backend, const WeightStore& store,
                          const std::vector<std::string>& names, DType dtype);

}  // namespace es::model
