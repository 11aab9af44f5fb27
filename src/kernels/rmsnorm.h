#pragma once
// RMSNorm with an optional fused residual add (the pre-norm transformer's
// "residual += sublayer output; x = norm(residual)"):
//   if residual: residual[r] += x[r]   (rounded to dtype, as the framework's residual stream is)
//   out[r, i] = dtype( (v[i] * rsqrt(mean(v^2) + eps)) * weight[i] ),  v = residual[r] or x[r]
// Statistics in fp32. out may alias x; residual must not alias out (nor x).
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

struct RmsNormParams {
  const void* x = nullptr;       // [rows, hiddenSize] dtype
  void* residual = nullptr;      // [rows, hiddenSize] dtype in/out, or null (no fused add)
  const void* weight = nullptr;  // [hiddenSize] dtype
  void* out = nullptr;           // [rows, hiddenSize] dtype
  int32_t rows = 0;              // >= 0; 0 = no-op
  int32_t hiddenSize = 0;        // > 0
  float eps = 1e-6f;             // > 0
  DType dtype = DType::kBF16;    // f32, f16 or bf16
};

bool validate(const RmsNormParams& p);
void launchRmsNorm(const RmsNormParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void rmsNorm(const kernel::RmsNormParams& p);
}
