#pragma once
// CUDA and cuBLAS error checks (CUDA builds only). A failure throws es::CudaError naming the
// file, the line, the failing call and the library's own error text.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "common/errors.h"

namespace es::detail {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);
}  // namespace es::detail

#define ES_CUDA_CHECK(call)                                                  \
  do {                                                                       \
    const cudaError_t es_status_ = (call);                                   \
    if (es_status_ != cudaSuccess) {                                         \
      ::es::detail::throw_cuda_error(es_status_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)

// After every kernel launch: reports a bad launch configuration at the launch site.
#define ES_CUDA_CHECK_LAUNCH() ES_CUDA_CHECK(cudaGetLastError())

#define ES_CUBLAS_CHECK(call)                                                  \
  do {                                                                         \
    const cublasStatus_t es_status_ = (call);                                  \
    if (es_status_ != CUBLAS_STATUS_SUCCESS) {                                 \
      ::es::detail::throw_cublas_error(es_status_, #call, __FILE__, __LINE__); \
    }                                                                          \
  } while (0)
