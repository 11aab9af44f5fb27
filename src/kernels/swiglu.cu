// SwiGLU: elementwise over [rows, intermediate] with a grid-stride loop; VEC elements (16 bytes)
// per thread-iteration when intermediate is a multiple of VEC and the bases are 16-byte aligned.
// VEC divides the interleaved layout's group of 8, so a vector's gate (and up) values are
// contiguous in either layout. silu(g) * u in fp32 (fwd::siluTimes), one rounding.
#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/pdl.cuh"
#include "kernels/swiglu.h"

namespace es::kernel {
namespace {

template <typename T, int VEC>
__global__ void swigluKernel(const T* __restrict__ gateUp, T* __restrict__ out, int64_t rows,
                             int64_t inter, GateUpLayout layout) {
  static_assert(kGateUpGroup % VEC == 0, "a vector must not straddle two groups");
  pdl::enter();
  const int64_t vecsPerRow = inter / VEC;
  const int64_t total = rows * vecsPerRow;
  for (int64_t v = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; v < total;
       v += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = v / vecsPerRow;
    const int64_t i = (v - r * vecsPerRow) * VEC;
    const T* row = gateUp + r * 2 * inter;
    float g[VEC], u[VEC], o[VEC];
    fwd::loadSpan<T, VEC, (VEC > 1)>(row + gateOffset(layout, i), g);
    fwd::loadSpan<T, VEC, (VEC > 1)>(row + upOffset(layout, i, inter), u);
#pragma unroll
    for (int e = 0; e < VEC; ++e) o[e] = fwd::siluTimes(g[e], u[e]);
    fwd::storeSpan<T, VEC, (VEC > 1)>(out + r * inter + i, o);
  }
}

template <typename T, int VEC>
void launch(const SwigluParams& p, cudaStream_t stream) {
  const int64_t total = int64_t{p.rows} * (p.intermediateSize / VEC);
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t{132} * 16);
  pdl::launch(swigluKernel<T, VEC>, dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream,
              static_cast<const T*>(p.gateUp), static_cast<T*>(p.out), p.rows, p.intermediateSize,
              p.layout);
}

}  // namespace

void launchSwiglu(const SwigluParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  fwd::dispatchDtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    if (p.intermediateSize % kVec == 0 && fwd::aligned16(p.gateUp) && fwd::aligned16(p.out)) {
      launch<T, kVec>(p, stream);
    } else {
      launch<T, 1>(p, stream);
    }
  });
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
