#include "common/tensor_view.h"

#include <sstream>

namespace es {

TensorView TensorView::make(void* data, DType dtype, std::initializer_list<int64_t> dims,
                            MemorySpace space) {
  ES_CHECK_ARG(static_cast<int>(dims.size()) <= kMaxTensorRank, "TensorView::make", "rank",
               dims.size(), "must be <= ", kMaxTensorRank);
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.space = space;
  view.rank = static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    ES_CHECK_ARG(d >= 0, "TensorView::make", "shape[" + std::to_string(i) + "]", d, "must be >= 0");
    view.shape[i++] = d;
  }
  ES_CHECK_ARG(data != nullptr || view.numel() == 0, "TensorView::make", "data", "null",
               "must be non-null for a view of ", view.numel(), " elements");
  return view;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::dim(int i) const {
  ES_CHECK_ARG(i >= 0 && i < rank, "TensorView::dim", "i", i, "must be in [0, ", rank, ")");
  return shape[i];
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << shape[i];
  os << "] "
     << (space == MemorySpace::kDevice       ? "device"
         : space == MemorySpace::kPinnedHost ? "pinned"
                                             : "host");
  return os.str();
}

}  // namespace es
