#pragma once
// Owning, move-only memory buffers: host (256-byte aligned), pinned host, or device.
// Pinned and device buffers need a CUDA build; asking for one elsewhere is a clear error.
#include <cstdint>
#include <initializer_list>

#include "common/tensor_view.h"

namespace es {

class Buffer {
 public:
  Buffer() = default;
  // bytes >= 0; a zero-byte buffer holds no memory.
  static Buffer allocate(MemorySpace space, int64_t bytes);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  MemorySpace space() const { return space_; }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

  // A view over the start of this buffer; throws if the shape needs more bytes than it holds.
  TensorView view(DType dtype, std::initializer_list<int64_t> dims) const;

 private:
  void release() noexcept;

  void* data_ = nullptr;
  int64_t bytes_ = 0;
  MemorySpace space_ = MemorySpace::kHost;
};

// Number of usable CUDA devices; 0 in a CPU-only build or when no driver/device is present.
int cuda_device_count();

namespace detail {
// Implemented in buffer_cuda.cpp (CUDA builds) or as clear errors (CPU-only builds).
void* cuda_allocate(MemorySpace space, int64_t bytes);
void cuda_free(MemorySpace space, void* data) noexcept;
}  // namespace detail

}  // namespace es
