// Host validation of launchSwiglu / ref::swiglu (every build).
#include "common/errors.h"
#include "kernels/swiglu.h"

namespace es::kernel {

bool validate(const SwigluParams& p) {
  constexpr const char* kWhere = "launchSwiglu";
  ES_CHECK_ARG(p.rows >= 0, kWhere, "rows", p.rows, "must be >= 0");
  ES_CHECK_ARG(p.intermediateSize > 0, kWhere, "intermediateSize", p.intermediateSize,
               "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, kWhere,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(p.layout == GateUpLayout::kHalves || p.intermediateSize % kGateUpGroup == 0, kWhere,
               "intermediateSize", p.intermediateSize,
               "must be a multiple of 8 for the interleaved gate/up layout");
  if (p.rows == 0) return false;
  ES_CHECK_ARG(p.gateUp != nullptr, kWhere, "gateUp", "null", "must not be null");
  ES_CHECK_ARG(p.out != nullptr, kWhere, "out", "null", "must not be null");
  return true;
}

}  // namespace es::kernel
