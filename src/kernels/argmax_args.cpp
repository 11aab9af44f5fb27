// Host validation of ArgmaxParams (every build).
#include "common/errors.h"
#include "kernels/argmax.h"

namespace es {

void validate_argmax_params(const ArgmaxParams& p, const char* where) {
  ES_CHECK_ARG(p.rows >= 0, where, "rows", p.rows, "must be >= 0");
  ES_CHECK_ARG(p.vocab > 0, where, "vocab", p.vocab, "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, where,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(p.row_stride == 0 || p.row_stride >= p.vocab, where, "row_stride", p.row_stride,
               "must be 0 or >= vocab (", p.vocab, ")");
  if (p.rows == 0) return;
  ES_CHECK_ARG(p.logits != nullptr, where, "logits", "null", "must be non-null");
  ES_CHECK_ARG(p.out != nullptr, where, "out", "null", "must be non-null");
}

}  // namespace es
