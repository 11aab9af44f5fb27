#pragma once
// Moving checkpoint tensors into backend memory: read from the file with pread in chunks of at
// most kUploadChunkBytes (straight into the destination on a host backend when no conversion is
// needed), converted to the backend's dtype on the way, so host memory beyond the page cache
// stays at one chunk whatever the model size. pread rather than the mapping: a file truncated by
// someone else while it loads is a FormatError naming the file and the offset, not a SIGBUS.
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

// The [2 * features, ...] gate/up matrix (or bias) `halves` (gate rows, then up rows, rowBytes
// each) reordered into kernel::GateUpLayout::kInterleaved8 (8 gate rows, the 8 up rows of the same
// features, ...) in a new backend buffer; features % 8 == 0. Two strided copies on the backend.
Buffer interleaveGateUp(ops::Backend& backend, const Buffer& halves, int64_t features,
                        int64_t rowBytes);

}  // namespace es::model
