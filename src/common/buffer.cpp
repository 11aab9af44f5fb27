#include "common/buffer.h"

#include <cstdlib>
#include <utility>

namespace es {
namespace {
constexpr int64_t kHostAlignment = 256;
}

Buffer Buffer::allocate(MemorySpace space, int64_t bytes) {
  ES_CHECK_ARG(bytes >= 0, "Buffer::allocate", "bytes", bytes, "must be >= 0");
  Buffer buffer;
  buffer.space_ = space;
  buffer.bytes_ = bytes;
  if (bytes == 0) return buffer;
  if (space == MemorySpace::kHost) {
    const int64_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    buffer.data_ = std::aligned_alloc(kHostAlignment, static_cast<size_t>(rounded));
    if (buffer.data_ == nullptr) {
      ES_THROW(Error, "Buffer::allocate: out of host memory allocating ", bytes, " bytes");
    }
  } else {
    buffer.data_ = detail::cuda_allocate(space, bytes);
  }
  return buffer;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      space_(other.space_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    space_ = other.space_;
  }
  return *this;
}

Buffer::~Buffer() { release(); }

void Buffer::release() noexcept {
  if (data_ == nullptr) return;
  if (space_ == MemorySpace::kHost) {
    std::free(data_);
  } else {
    detail::cuda_free(space_, data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> dims) const {
  TensorView v = TensorView::make(data_, dtype, dims, space_);
  ES_CHECK_ARG(v.bytes() <= bytes_, "Buffer::view", "shape", v.describe(),
               "needs more than the buffer's ", bytes_, " bytes");
  return v;
}

#ifndef ES_HAVE_CUDA
namespace detail {
void* cuda_allocate(MemorySpace space, int64_t bytes) {
  ES_THROW(Error, "Buffer::allocate: ", bytes,
           " bytes of device or pinned memory requested, but this is a CPU-only build");
}
void cuda_free(MemorySpace, void*) noexcept {}
}  // namespace detail

int cuda_device_count() { return 0; }
#endif

}  // namespace es
