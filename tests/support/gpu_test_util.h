#pragma once
// GPU-test helpers (CUDA builds only): a typed device array that uploads from and downloads to
// std::vector, poisoned on creation so unwritten elements are visible.
#include <cuda_runtime_api.h>

#include <vector>

#include "common/buffer.h"
#include "common/cuda_check.h"
#include "support/test_util.h"

namespace es::test {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count)
      : count_(count), buffer_(Buffer::allocate(MemorySpace::kDevice, sizeof(T) * count)) {
    poison();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }

  T* get() const { return buffer_.as<T>(); }
  size_t size() const { return count_; }

  // poison() and upload() are done when they return. cudaMemset on device memory, and a copy from
  // pageable host memory, may return before the device memory is written, queued on the legacy
  // default stream, which a cudaStreamNonBlocking stream does not wait for: a kernel or graph
  // launched there next could read stale inputs or have outputs overwritten after it wrote them
  // (seen once: 1,152 of 3,072 outputs of GateUpSwigluGpu.CapturedInAGraph left as the poison
  // under compute-sanitizer, session 26).
  void poison() {
    if (count_ == 0) return;
    ES_CUDA_CHECK(cudaMemset(buffer_.data(), kPoisonByte, sizeof(T) * count_));
    ES_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  void upload(const std::vector<T>& host) {
    if (host.size() != count_) ES_THROW(Error, "DeviceArray::upload: size mismatch");
    if (count_ == 0) return;
    ES_CUDA_CHECK(
        cudaMemcpy(buffer_.data(), host.data(), sizeof(T) * count_, cudaMemcpyHostToDevice));
    ES_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    if (count_)
      ES_CUDA_CHECK(
          cudaMemcpy(host.data(), buffer_.data(), sizeof(T) * count_, cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t count_;
  Buffer buffer_;
};

}  // namespace es::test
