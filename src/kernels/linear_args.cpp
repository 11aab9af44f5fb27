// Host validation of launchLinear / ref::linear (every build).
#include "common/errors.h"
#include "kernels/linear.h"

namespace es::kernel {

bool validate(const LinearParams& p) {
  constexpr const char* kWhere = "launchLinear";
  ES_CHECK_ARG(p.m >= 0, kWhere, "m", p.m, "must be >= 0");
  ES_CHECK_ARG(p.n > 0, kWhere, "n", p.n, "must be > 0");
  ES_CHECK_ARG(p.k > 0, kWhere, "k", p.k, "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16,
               kWhere, "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(p.outDtype == p.dtype || p.outDtype == DType::kF32, kWhere, "outDtype",
               dtype_name(p.outDtype), "must be dtype (", dtype_name(p.dtype), ") or f32");
  if (p.m == 0) return false;
  ES_CHECK_ARG(p.x != nullptr, kWhere, "x", "null", "must not be null");
  ES_CHECK_ARG(p.w != nullptr, kWhere, "w", "null", "must not be null");
  ES_CHECK_ARG(p.y != nullptr, kWhere, "y", "null", "must not be null");
  ES_CHECK_ARG(p.y != p.x, kWhere, "y", p.y, "must not alias x");
  return true;
}

}  // namespace es::kernel
