// CPU reference of the gate/up projection and SwiGLU: the linear reference, then the SwiGLU
// reference over its output (kernels/gate_up_swiglu.h).
#include "kernels/gate_up_swiglu.h"

namespace es::ref {

void gateUpSwiglu(const kernel::GateUpSwigluParams& p) {
  if (!kernel::validate(p)) return;
  linear(p.linear);
  swiglu(kernel::swigluStep(p));
}

}  // namespace es::ref
