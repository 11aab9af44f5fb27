// Host validation of ArgmaxParams (every build).
#include "common/errors.h"
#include "kernels/argmax.h"

namespace es {

void validateArgmaxParams(const ArgmaxParams& p, const char* where) {
  ES_CHECK_ARG(p.rows >= 0, where, "rows", p.rows, "must be >= 0");
  ES_CHECK_ARG(p.vocab > 0, where, "vocab", p.vocab, "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, where,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(p.rowStride == 0 || p.rowStride >= p.vocab, where, "row_stride", p.rowStride,
               "must be 0 or >= vocab (", p.vocab, ")");
  if (p.rows == 0) return;
  ES_CHECK_ARG(p.logits != nullptr, where, "logits", "null", "must be non-null");
  ES_CHECK_ARG(p.out != nullptr, where, "out", "null", "must be non-null");
}

}  // namespace es
