#pragma once
// The arithmetic of one RMSNorm row, shared by launchRmsNorm and the gemv's fused input norm
// (linear_gemv.cu) so that both give the same bits: kRmsThreads threads, thread t adding the
// squares of its 16-byte spans t, t + kRmsThreads, ... of the row in order (add_squares), then
// fwd::block_sum's tree over the 8 warps (each warp's warp_sum, then warp_sum of the 8 partials);
// the scale 1 / sqrt(mean + eps) (rms_scale) and each output (v * scale) * weight (rms_apply),
// rounded once to the dtype.
#include <cstdint>

#include "kernels/forward_ops_device.cuh"

namespace es::kernel::fwd {

inline constexpr int kRmsThreads = 256;

template <int VEC>
__device__ __forceinline__ float add_squares(float sum, const float (&a)[VEC]) {
#pragma unroll
  for (int e = 0; e < VEC; ++e) sum += a[e] * a[e];
  return sum;
}

__device__ __forceinline__ float rms_scale(float sum_sq, int32_t hidden, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(hidden) + eps);
}

__device__ __forceinline__ float rms_apply(float v, float scale, float weight) {
  return __fmul_rn(__fmul_rn(v, scale), weight);
}

}  // namespace es::kernel::fwd
