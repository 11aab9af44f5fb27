// Bias add for the linear layer when cuBLASLt's epilogue is not used (f32 output from 16-bit
// inputs: the bias stays in the input dtype): y[i, j] += bias[j] in fp32 on the f32 result.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/linear.h"

namespace es::kernel {
namespace {

template <typename T>
__global__ void addBiasF32Kernel(float* __restrict__ y, const T* __restrict__ bias, int64_t m,
                                 int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __fadd_rn(y[i], fwd::toF(bias[i % n]));
  }
}

// y[i, j] = Y(product[i, j] + bias[j]): the bias added in fp32, one rounding to y's type.
template <typename Y, typename B>
__global__ void addBiasRoundKernel(Y* __restrict__ y, const float* __restrict__ product,
                                   const B* __restrict__ bias, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = fwd::fromF<Y>(__fadd_rn(product[i], fwd::toF(bias[i % n])));
  }
}

}  // namespace

namespace detail {
// Declared in linear_cuda.cpp.
void launchAddBiasF32(float* y, const void* bias, DType biasDtype, int64_t m, int64_t n,
                      cudaStream_t stream) {
  const int64_t total = m * n;
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;
  fwd::dispatchDtype(biasDtype, [&](auto tag) {
    using T = decltype(tag);
    addBiasF32Kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        y, static_cast<const T*>(bias), m, n);
  });
  ES_CUDA_CHECK_LAUNCH();
}
void launchAddBiasRound(void* y, DType yDtype, const float* product, const void* bias,
                        DType biasDtype, int64_t m, int64_t n, cudaStream_t stream) {
  const int64_t total = m * n;
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;
  fwd::dispatchDtype(yDtype, [&](auto ytag) {
    using Y = decltype(ytag);
    fwd::dispatchDtype(biasDtype, [&](auto btag) {
      using B = decltype(btag);
      addBiasRoundKernel<Y, B><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
          static_cast<Y*>(y), product, static_cast<const B*>(bias), m, n);
    });
  });
  ES_CUDA_CHECK_LAUNCH();
}
}  // namespace detail

}  // namespace es::kernel
