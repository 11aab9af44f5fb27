// RMSNorm (+ fused residual add): one CTA per row. Pass 1 forms v (residual += x, rounded to
// dtype and stored) and the sums of squares of its 16-element groups; one warp adds the groups
// (rms_groups.cuh's order, which the gemv's fused norm repeats to get the same scale); pass 2
// re-reads v and writes (v * 1/sqrt(mean + eps)) * weight, one rounding. Pass 2 reads elements
// other threads wrote in pass 1 (after a barrier); out may alias x.
// VEC elements (16 bytes) per access when hiddenSize % VEC == 0 and every base is aligned.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/pdl.cuh"
#include "kernels/rms_groups.cuh"
#include "kernels/rmsnorm.h"

namespace es::kernel {
namespace {

// Dynamic shared memory: one float per 16-element group of the row.
template <typename T, int VEC>
__global__ void rmsnorm_kernel(const T* x, T* residual, const T* __restrict__ weight, T* out,
                               int32_t hidden, float eps) {
  extern __shared__ float group_sq[];  // [ceil(hidden / 16)]
  __shared__ float row_scale;
  pdl::enter();
  constexpr bool kAligned = VEC > 1;
  constexpr int kSpans = fwd::kRmsGroup / VEC;
  const int64_t base = int64_t{blockIdx.x} * hidden;
  const int32_t groups = (hidden + fwd::kRmsGroup - 1) / fwd::kRmsGroup;
  for (int32_t gi = threadIdx.x; gi < groups; gi += blockDim.x) {
    float sum_sq = 0.0f;
#pragma unroll
    for (int sp = 0; sp < kSpans; ++sp) {
      const int32_t e0 = gi * fwd::kRmsGroup + sp * VEC;  // whole spans: hidden % VEC == 0
      if (e0 < hidden) {
        float a[VEC];
        fwd::load_span<T, VEC, kAligned>(x + base + e0, a);
        if (residual != nullptr) {
          float r[VEC];
          fwd::load_span<T, VEC, kAligned>(residual + base + e0, r);
#pragma unroll
          for (int e = 0; e < VEC; ++e) a[e] = fwd::to_f(fwd::from_f<T>(__fadd_rn(r[e], a[e])));
          fwd::store_span<T, VEC, kAligned>(residual + base + e0, a);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum_sq = fwd::add_square(sum_sq, a[e]);
      }
    }
    group_sq[gi] = sum_sq;
  }
  __syncthreads();  // every group sum, and every residual element, written
  if (threadIdx.x < 32) {
    const float total = fwd::row_sum_of_groups(group_sq, groups, static_cast<int>(threadIdx.x));
    if (threadIdx.x == 0) row_scale = fwd::rms_scale(total, hidden, eps);
  }
  __syncthreads();
  const float scale = row_scale;
  const T* src = residual != nullptr ? residual : x;
  const int32_t vecs = hidden / VEC;
  for (int32_t v = threadIdx.x; v < vecs; v += blockDim.x) {
    float a[VEC], w[VEC];
    fwd::load_span<T, VEC, kAligned>(src + base + int64_t{v} * VEC, a);
    fwd::load_span<T, VEC, kAligned>(weight + int64_t{v} * VEC, w);
#pragma unroll
    for (int e = 0; e < VEC; ++e) a[e] = fwd::rms_apply(a[e], scale, w[e]);
    fwd::store_span<T, VEC, kAligned>(out + base + int64_t{v} * VEC, a);
  }
}

template <typename T, int VEC>
void launch(const RmsNormParams& p, cudaStream_t stream) {
  const int32_t vecs = p.hiddenSize / VEC;
  int threads = 1024;
  while (threads > 32 && threads / 2 >= vecs) threads /= 2;
  const size_t smem = sizeof(float) * static_cast<size_t>((p.hiddenSize + fwd::kRmsGroup - 1) / fwd::kRmsGroup);
  pdl::launch(rmsnorm_kernel<T, VEC>, dim3(p.rows), dim3(threads), smem, stream,
      static_cast<const T*>(p.x), static_cast<T*>(p.residual), static_cast<const T*>(p.weight),
      static_cast<T*>(p.out), p.hiddenSize, p.eps);
}

}  // namespace

void launchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  fwd::dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    const bool aligned = fwd::aligned16(p.x) && fwd::aligned16(p.weight) && fwd::aligned16(p.out) &&
                         (p.residual == nullptr || fwd::aligned16(p.residual));
    if (p.hiddenSize % kVec == 0 && aligned) {
      launch<T, kVec>(p, stream);
    } else {
      launch<T, 1>(p, stream);
    }
  });
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
