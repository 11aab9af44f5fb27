#pragma once
// A non-owning view of a contiguous row-major tensor: pointer, dtype, shape, memory space.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/dtype.h"
#include "common/errors.h"

namespace es {

enum class MemorySpace : uint8_t { kHost, kPinnedHost, kDevice };

constexpr int kMaxTensorRank = 6;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  MemorySpace space = MemorySpace::kHost;
  int rank = 0;
  std::array<int64_t, kMaxTensorRank> shape{};

  // Validates rank and dims (each >= 0) and that a non-empty view has data.
  static TensorView make(void* data, DType dtype, std::initializer_list<int64_t> dims,
                         MemorySpace space = MemorySpace::kHost);

  int64_t numel() const;
  int64_t bytes() const { return numel() * dtype_size(dtype); }
  int64_t dim(int i) const;      // checked: 0 <= i < rank
  std::string describe() const;  // e.g. "bf16[2, 16, 8, 128] device"

  // Typed pointer; throws if T does not match the view's dtype.
  template <typename T>
  T* as() const {
    if (dtype_of<T> != dtype) {
      ES_THROW(InvalidArgument, "TensorView::as: view holds ", dtype_name(dtype),
               " but was read as ", dtype_name(dtype_of<T>));
    }
    return static_cast<T*>(data);
  }
};

}  // namespace es
