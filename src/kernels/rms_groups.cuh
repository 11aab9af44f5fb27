#pragma once
// The order in which an RMSNorm row's sum of squares is added, shared by launchRmsNorm and the
// gemv's fused norm (linear_gemv.cu) so that both get the same scale bit for bit:
//   1. each group of kRmsGroup = 16 consecutive elements is summed in ascending order
//      (group_sum_sq; elements past the row count as 0),
//   2. lane l of one warp adds groups l, l + 32, l + 64, ... in order, then the warp adds its
//      lanes with warp_sum's xor tree (row_sum_of_groups).
// The gemv's producer side forms step 1 in the epilogue of the layer that writes the row (the
// residual add), its consumer side step 2 before normalizing x.
#include <cstdint>

#include "kernels/forward_ops_device.cuh"

namespace es::kernel::fwd {

inline constexpr int kRmsGroup = 16;

// s + v * v, each operation rounded once (no fused multiply-add, whatever the compiler flags).
__device__ __forceinline__ float add_square(float s, float v) { return __fadd_rn(s, __fmul_rn(v, v)); }

// Step 2 for one row, by a whole warp: every lane returns the row's sum.
__device__ __forceinline__ float row_sum_of_groups(const float* groups, int32_t num_groups, int lane) {
  float s = 0.0f;
  for (int32_t i = lane; i < num_groups; i += 32) s = __fadd_rn(s, groups[i]);
  return warp_sum(s);
}

__device__ __forceinline__ float rms_scale(float sum_sq, int32_t hidden, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(hidden) + eps);
}

// One normalized element: (v * scale) * weight, before its rounding to the dtype.
__device__ __forceinline__ float rms_apply(float v, float scale, float weight) {
  return __fmul_rn(__fmul_rn(v, scale), weight);
}

}  // namespace es::kernel::fwd
