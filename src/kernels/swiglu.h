#pragma once
// SwiGLU activation on the fused gate/up projection: out[r, i] = silu(g) * u with g the gate and
// u the up feature i of row r of gateUp, silu(g) = g / (1 + exp(-g)); fp32 math, one rounding to
// dtype. Where gate feature i and up feature i sit in a gateUp row is the GateUpLayout:
//   kHalves        gate | up: g at i, u at intermediate + i (the checkpoint's order; the draft
//                  model and any intermediate size)
//   kInterleaved8  groups of 8 gate then 8 up features: g at 16 * (i / 8) + i % 8, u 8 after it.
//                  The target model stores its gate/up matrix this way (intermediate % 8 == 0),
//                  so that a 16-row tile of the decode gemv holds the gate and up rows of the
//                  same 8 features and can apply SwiGLU in its epilogue (gate_up_swiglu.h).
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

enum class GateUpLayout : uint8_t { kHalves, kInterleaved8 };

inline constexpr int32_t kGateUpGroup = 8;  // features per group of kInterleaved8

// Offsets of gate feature i and of up feature i inside one gateUp row of 2 * inter values (also
// the rows of the [2 * inter, K] gate/up weight matrix and its bias).
constexpr int64_t gateOffset(GateUpLayout layout, int64_t i) {
  return layout == GateUpLayout::kHalves ? i
                                         : 2 * kGateUpGroup * (i / kGateUpGroup) + i % kGateUpGroup;
}
constexpr int64_t upOffset(GateUpLayout layout, int64_t i, int64_t inter) {
  return layout == GateUpLayout::kHalves ? inter + i : gateOffset(layout, i) + kGateUpGroup;
}

struct SwigluParams {
  const void* gateUp = nullptr;  // [rows, 2 * intermediateSize] dtype, in `layout`
  void* out = nullptr;           // [rows, intermediateSize] dtype
  int32_t rows = 0;              // >= 0; 0 = no-op
  int32_t intermediateSize = 0;  // > 0; a multiple of 8 for kInterleaved8
  DType dtype = DType::kBF16;
  GateUpLayout layout = GateUpLayout::kHalves;
};

bool validate(const SwigluParams& p);
void launchSwiglu(const SwigluParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void swiglu(const kernel::SwigluParams& p);
}
