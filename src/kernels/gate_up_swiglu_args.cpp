// Host validation of launchGateUpSwiglu / ref::gateUpSwiglu (every build).
#include "common/errors.h"
#include "kernels/gate_up_swiglu.h"

namespace es::kernel {

bool validate(const GateUpSwigluParams& p) {
  constexpr const char* kWhere = "launchGateUpSwiglu";
  if (!validate(p.linear)) return false;
  const LinearParams& l = p.linear;
  ES_CHECK_ARG(l.n % 2 == 0, kWhere, "linear.n", l.n, "must be even (gate and up rows)");
  ES_CHECK_ARG(p.layout == GateUpLayout::kHalves || l.n % (2 * kGateUpGroup) == 0, kWhere,
               "linear.n", l.n, "must be a multiple of 16 for the interleaved gate/up layout");
  ES_CHECK_ARG(l.outDtype == l.dtype, kWhere, "linear.outDtype", dtype_name(l.outDtype),
               "must equal linear.dtype (", dtype_name(l.dtype), ")");
  ES_CHECK_ARG(p.out != nullptr, kWhere, "out", "null", "must not be null");
  ES_CHECK_ARG(p.out != l.x && p.out != l.y, kWhere, "out", "aliases x or linear.y",
               "must be a separate buffer");
  return true;
}

SwigluParams swigluStep(const GateUpSwigluParams& p) {
  return {.gateUp = p.linear.y,
          .out = p.out,
          .rows = p.linear.m,
          .intermediateSize = p.linear.n / 2,
          .dtype = p.linear.dtype,
          .layout = p.layout};
}

}  // namespace es::kernel
