#pragma once
// A quantized W [n, k] on the host, already in its backend layout (common/quant_format.h): what
// the checkpoint readers produce (HF quantized folders: model/quantized_checkpoint.h; GGUF:
// WeightStore::readQuantized) and what a model uploads row for row.
#include <cstdint>
#include <vector>

#include "common/quant_format.h"

namespace es::model {

struct HostQuantizedMatrix {
  QuantFormat format = QuantFormat::kInt4;
  int32_t group = 0;
  int64_t n = 0;                // rows (output features)
  int64_t k = 0;                // columns (input features)
  std::vector<uint8_t> data;    // [n, dataRowBytes(format, k, group)]
  std::vector<uint8_t> scales;  // [n, scaleRowBytes(...)], empty where the format has none
  std::vector<uint8_t> zeros;   // [n, zeroRowBytes(...)], empty where the format has none

  QuantizedWeightView view() const {
    return {.format = format,
            .data = data.data(),
            .scales = scales.empty() ? nullptr : scales.data(),
            .zeros = zeros.empty() ? nullptr : zeros.data(),
            .group = group};
  }
  int64_t bytes() const { return static_cast<int64_t>(data.size() + scales.size() + zeros.size()); }
};

}  // namespace es::model
