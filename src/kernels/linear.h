#pragma once
// Linear layer in the Hugging Face weight layout: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// Accumulation in fp32; y is rounded once to its dtype (bf16/f16 hidden states, or f32 logits).
// The bias is added in fp32 before that rounding. y must not alias x. f32 inputs are multiplied in
// true fp32 (no TF32).
// The CUDA path runs cuBLASLt (LinearContext owns the handle and its workspace).
#include <cstdint>
#include <memory>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

struct LinearParams {
  const void* x = nullptr;     // [M, K] dtype
  const void* w = nullptr;     // [N, K] dtype (row-major, as stored by HF)
  const void* bias = nullptr;  // [N] dtype, or null
  void* y = nullptr;           // [M, N] outDtype
  int32_t m = 0;               // rows, >= 0; 0 = no-op
  int32_t n = 0;               // output features, > 0
  int32_t k = 0;               // input features, > 0
  DType dtype = DType::kBF16;  // x, w, bias: f32, f16 or bf16
  DType outDtype = DType::kBF16;  // y: dtype or f32
};

bool validate(const LinearParams& p);

// cuBLASLt handle + workspace, created once per stream owner (CUDA builds only).
class LinearContext {
 public:
  explicit LinearContext(int64_t workspaceBytes = int64_t{32} << 20);
  ~LinearContext();
  LinearContext(const LinearContext&) = delete;
  LinearContext& operator=(const LinearContext&) = delete;
  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

void launchLinear(const LinearParams& p, LinearContext& context, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void linear(const kernel::LinearParams& p);
}
