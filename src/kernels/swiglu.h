#pragma once
// SwiGLU activation on the fused gate/up projection: out[r, i] = silu(g) * u with
// g = gateUp[r, i], u = gateUp[r, intermediate + i], silu(g) = g / (1 + exp(-g)); fp32 math,
// one rounding to dtype.
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

struct SwigluParams {
  const void* gateUp = nullptr;  // [rows, 2 * intermediateSize] dtype: gate | up
  void* out = nullptr;           // [rows, intermediateSize] dtype
  int32_t rows = 0;              // >= 0; 0 = no-op
  int32_t intermediateSize = 0;  // > 0
  DType dtype = DType::kBF16;
};

bool validate(const SwigluParams& p);
void launchSwiglu(const SwigluParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void swiglu(const kernel::SwigluParams& p);
}
