#pragma once
// The MLP's gate/up projection followed by SwiGLU, as one op:
//   out[m, I] = swiglu(x[m, k] · W[2I, k]^T + bias[2I])   (swiglu.h; I = linear.n / 2)
// where W and bias hold the gate and up rows in `layout`. Two ways to compute it, same bits:
//   fused    the decode gemv applies SwiGLU in its epilogue (GemvEpilogue::kSwiglu, one kernel,
//            linear.y untouched). Taken on the GPU when launchLinear would take the gemv for
//            `linear` (linear.h: kAuto with m <= 16, or kGemv) and the layout is kInterleaved8.
//   unfused  the linear layer into linear.y ([m, 2I] scratch), then SwiGLU from it (prefill rows,
//            cuBLASLt, the kHalves layout, the CPU reference).
// The fused epilogue rounds gate and up to the dtype before SwiGLU, as the unfused path stores
// them, so a model's tokens do not depend on which way ran.
#include "kernels/linear.h"
#include "kernels/swiglu.h"

namespace es::kernel {

struct GateUpSwigluParams {
  // x [m, k], W [2I, k] and bias [2I] in `layout`; y: [m, 2I] scratch of dtype (outDtype must be
  // dtype), written only by the unfused path but always required.
  LinearParams linear = {};
  void* out = nullptr;  // [m, I] dtype; must not alias x or linear.y
  GateUpLayout layout = GateUpLayout::kHalves;
};

// Validates linear (linear.h) and the op's own conditions: n even (and a multiple of 16 for
// kInterleaved8), outDtype == dtype, out not null. False when m == 0 (a no-op).
bool validate(const GateUpSwigluParams& p);

// The SwiGLU step of the unfused path: linear.y -> out.
SwigluParams swigluStep(const GateUpSwigluParams& p);

void launchGateUpSwiglu(const GateUpSwigluParams& p, LinearContext& context, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void gateUpSwiglu(const kernel::GateUpSwigluParams& p);
}
