// RMSNorm (+ fused residual add): one CTA per row. Pass 1 forms v (residual += x, rounded to
// dtype and stored) and the fp32 sum of squares; pass 2 re-reads v (each thread its own
// elements, so out may alias x) and writes (v * 1/sqrt(mean + eps)) * weight, one rounding.
// VEC elements (16 bytes) per access when hiddenSize % VEC == 0 and every base is aligned.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/pdl.cuh"
#include "kernels/rmsnorm.h"

namespace es::kernel {
namespace {

template <typename T, int VEC>
__global__ void rmsnormKernel(const T* x, T* residual, const T* __restrict__ weight, T* out,
                              int32_t hidden, float eps) {
  pdl::enter();
  constexpr bool kAligned = VEC > 1;
  const int64_t base = int64_t{blockIdx.x} * hidden;
  const int32_t vecs = hidden / VEC;
  float sumSq = 0.0f;
  for (int32_t v = threadIdx.x; v < vecs; v += blockDim.x) {
    float a[VEC];
    fwd::loadSpan<T, VEC, kAligned>(x + base + int64_t{v} * VEC, a);
    if (residual != nullptr) {
      float r[VEC];
      fwd::loadSpan<T, VEC, kAligned>(residual + base + int64_t{v} * VEC, r);
#pragma unroll
      for (int e = 0; e < VEC; ++e) a[e] = fwd::toF(fwd::fromF<T>(__fadd_rn(r[e], a[e])));
      fwd::storeSpan<T, VEC, kAligned>(residual + base + int64_t{v} * VEC, a);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) sumSq += a[e] * a[e];
  }
  sumSq = fwd::blockSum(sumSq);
  const float scale = 1.0f / sqrtf(sumSq / static_cast<float>(hidden) + eps);
  const T* src = residual != nullptr ? residual : x;
  for (int32_t v = threadIdx.x; v < vecs; v += blockDim.x) {
    float a[VEC], w[VEC];
    fwd::loadSpan<T, VEC, kAligned>(src + base + int64_t{v} * VEC, a);
    fwd::loadSpan<T, VEC, kAligned>(weight + int64_t{v} * VEC, w);
#pragma unroll
    for (int e = 0; e < VEC; ++e) a[e] = __fmul_rn(__fmul_rn(a[e], scale), w[e]);
    fwd::storeSpan<T, VEC, kAligned>(out + base + int64_t{v} * VEC, a);
  }
}

template <typename T, int VEC>
void launch(const RmsNormParams& p, cudaStream_t stream) {
  const int32_t vecs = p.hiddenSize / VEC;
  int threads = 1024;
  while (threads > 32 && threads / 2 >= vecs) threads /= 2;
  pdl::launch(rmsnormKernel<T, VEC>, dim3(p.rows), dim3(threads), 0, stream,
              static_cast<const T*>(p.x), static_cast<T*>(p.residual),
              static_cast<const T*>(p.weight), static_cast<T*>(p.out), p.hiddenSize, p.eps);
}

}  // namespace

void launchRmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  fwd::dispatchDtype(p.dtype, [&](auto tag) {
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
