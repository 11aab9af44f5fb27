// Host validation of launchRmsNorm / ref::rmsNorm (every build).
#include <cmath>

#include "common/errors.h"
#include "kernels/rmsnorm.h"

namespace es::kernel {

bool validate(const RmsNormParams& p) {
  constexpr const char* kWhere = "launchRmsNorm";
  ES_CHECK_ARG(p.rows >= 0, kWhere, "rows", p.rows, "must be >= 0");
  ES_CHECK_ARG(p.hiddenSize > 0, kWhere, "hiddenSize", p.hiddenSize, "must be > 0");
  ES_CHECK_ARG(p.eps > 0.0f && std::isfinite(p.eps), kWhere, "eps", p.eps,
               "must be finite and > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, kWhere,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  if (p.rows == 0) return false;
  ES_CHECK_ARG(p.x != nullptr, kWhere, "x", "null", "must not be null");
  ES_CHECK_ARG(p.weight != nullptr, kWhere, "weight", "null", "must not be null");
  ES_CHECK_ARG(p.out != nullptr, kWhere, "out", "null", "must not be null");
  if (p.residual != nullptr) {
    ES_CHECK_ARG(p.residual != p.out, kWhere, "residual", p.residual, "must not alias out");
    ES_CHECK_ARG(p.residual != p.x, kWhere, "residual", p.residual, "must not alias x");
  }
  return true;
}

}  // namespace es::kernel
