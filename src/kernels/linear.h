#pragma once
// Linear layer in the Hugging Face weight layout: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// Accumulation in fp32; y is rounded once to its dtype (bf16/f16 hidden states, or f32 logits).
// The bias is added in fp32 before that rounding. y must not alias x. f32 inputs are multiplied in
// true fp32 (no TF32).
// The CUDA path (launchLinear) runs either a hand skinny GEMM for decode shapes ("gemv":
// linear_gemv.cu, tensor-core mma.sync streaming W once with 16-byte loads) or cuBLASLt
// (LinearContext owns the handle and its workspace). Dispatch, by LinearParams::algo:
//   kAuto     the gemv when m <= kGemvAutoMaxRows and gemvSupported(p) (f16/bf16, 1 <= m <= 16,
//             k % 8 == 0, x and w 16-byte aligned, y and bias naturally aligned), else cuBLASLt.
//             The debug switch ES_LINEAR_ALGO=cublaslt (debug_switches.h) sends every kAuto call
//             to cuBLASLt.
//   kCublasLt always cuBLASLt.
//   kGemv     always the gemv; InvalidArgument (naming the failed condition) where unsupported.
// Both paths are CUDA-graph capturable once a shape has run eagerly (cuBLASLt plans are cached
// per shape; the gemv allocates nothing at all).
#include <cstdint>
#include <memory>
#include <optional>

#include "common/dtype.h"
#include "common/quant_format.h"
#include "common/stream.h"

namespace es::kernel {

enum class LinearAlgo : uint8_t { kAuto, kCublasLt, kGemv };

// kAuto takes the gemv up to this many rows. The gemv is faster than cuBLASLt on the Qwen3 decode
// shapes at m = 1 and 4; at m = 16 cuBLASLt is faster on some, but the bound stays at 16 because
// a batch-1 verify (16 rows) must sum each row exactly as the 1-row decode does: the gemv's K
// split does not depend on m (linear_gemv.h), cuBLASLt's choice of kernel does. That row
// invariance is what makes greedy speculative decoding equal plain decoding bit for bit on the
// GPU (docs/forward_ops.md).
inline constexpr int32_t kGemvAutoMaxRows = 16;

struct LinearParams {
  const void* x = nullptr;        // [M, K] dtype
  const void* w = nullptr;        // [N, K] weightDtype, else dtype (row-major, as stored by HF)
  const void* bias = nullptr;     // [N] dtype, or null
  void* y = nullptr;              // [M, N] outDtype
  int32_t m = 0;                  // rows, >= 0; 0 = no-op
  int32_t n = 0;                  // output features, > 0
  int32_t k = 0;                  // input features, > 0
  DType dtype = DType::kBF16;     // x, w, bias: f32, f16 or bf16
  DType outDtype = DType::kBF16;  // y: dtype or f32
  LinearAlgo algo = LinearAlgo::kAuto;  // CUDA path only (the CPU reference ignores it)
  // W's dtype where it differs from dtype: bf16 or f16 W with f32 x, on the CPU reference only
  // (the CPU backend keeps bf16 checkpoints' matrices in bf16, half the bytes a decode step
  // streams; widening bf16 to f32 is exact, so the results are those of f32 W). Empty: dtype.
  std::optional<DType> weightDtype = std::nullopt;
  // W held quantized (common/quant_format.h) instead of dense at `w`: the product is that of the
  // f32 values common/quant_dequant.h defines (x, bias and y as for a dense W of `dtype`; `w` and
  // weightDtype are unused).
  std::optional<QuantizedWeightView> quantized = std::nullopt;

  // A decode layer's RMSNorm and residual add, fused into the gemv (linear_gemv.cu) where
  // linearFusesRowNorm(m) says so; elsewhere the CUDA path rejects them (InvalidArgument) and the
  // models run launchRmsNorm instead. The CPU reference composes them from ref::rmsNorm and the
  // plain product (their definition).
  //   normWeight  [k] dtype, or null. x holds the un-normalized rows; the product is that of
  //               RMSNorm(x) * normWeight with eps normEps. The gemv forms it as s * (W · round(x *
  //               normWeight)) with s = 1 / sqrt(mean(x^2) + eps) per row, so it differs from the
  //               composition by where one rounding falls, and, like every gemv output, a row's
  //               result does not depend on m (a 16-row verify equals 1-row decodes bit for bit).
  //   accumulate  y (dtype) += the product rounded to dtype, rounded again: the residual add of
  //               launchRmsNorm (residual = y, x = the rounded product), bit for bit. outDtype
  //               must be dtype. The gemv reads y before its PDL wait (pdl.cuh): the kernel
  //               launched right before it must not write y.
  const void* normWeight = nullptr;
  float normEps = 1e-6f;
  bool accumulate = false;
};

bool validate(const LinearParams& p);

// InvalidArgument (naming `where` and the field) unless w is a usable quantized W [n, k]: a known
// format, a layout quantLayoutRejection accepts, and non-null data / scales / zeros where the
// format has them. validate(LinearParams) runs it whenever `quantized` is set.
void validateQuantizedWeight(const QuantizedWeightView& w, int32_t k, const char* where);

// Why the gemv cannot run p (a short requirement, e.g. "k must be a multiple of 8"), or nullptr
// when it can. Host-only checks of dtypes, m, k and pointer alignment (linear_args.cpp).
const char* gemvRejection(const LinearParams& p);
inline bool gemvSupported(const LinearParams& p) { return gemvRejection(p) == nullptr; }

// Whether launchLinear fuses normWeight and accumulate at m rows (CUDA builds): wherever the gemv
// takes m rows (1 <= m <= kGemvAutoMaxRows, unless ES_LINEAR_ALGO=cublaslt). Fusing removes a
// decode layer's two RMSNorm kernels. The fused rows round differently from the unfused ones, so
// the models take it only with a single-sequence cache (target_model.cpp).
bool linearFusesRowNorm(int32_t m);

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

// Whether launchLinear(p) takes a kernel that needs whole SMs for its CTAs (the gemv where
// detail::gemvFillsSms, linear_gemv.h), so the kernel launched before it should let it in only
// once its own CTAs are done (CUDA builds).
bool linearFillsSms(const LinearParams& p, LinearContext& context);

}  // namespace es::kernel

namespace es::ref {
void linear(const kernel::LinearParams& p);
}
