#include "common/cuda_check.h"

namespace es::detail {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  ES_THROW(CudaError, file, ":", line, ": ", call, " failed: ", cudaGetErrorName(status), " (",
           cudaGetErrorString(status), ")");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  ES_THROW(CudaError, file, ":", line, ": ", call, " failed: cuBLAS status ",
           static_cast<int>(status));
}

}  // namespace es::detail
