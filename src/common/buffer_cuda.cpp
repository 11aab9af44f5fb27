// CUDA-backed parts of common/buffer.h.
#include <cuda_runtime_api.h>

#include "common/buffer.h"
#include "common/cuda_check.h"

namespace es {
namespace detail {

void* cuda_allocate(MemorySpace space, int64_t bytes) {
  void* data = nullptr;
  if (space == MemorySpace::kDevice) {
    ES_CUDA_CHECK(cudaMalloc(&data, static_cast<size_t>(bytes)));
  } else {
    ES_CUDA_CHECK(cudaMallocHost(&data, static_cast<size_t>(bytes)));
  }
  return data;
}

void cuda_free(MemorySpace space, void* data) noexcept {
  // Destructors must not throw; a failing free at teardown has nothing left to protect.
  if (space == MemorySpace::kDevice) {
    (void)cudaFree(data);
  } else {
    (void)cudaFreeHost(data);
  }
}

}  // namespace detail

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver"/"no device" error
    return 0;
  }
  return count;
}

}  // namespace es
