// CPU reference of SwiGLU (kernels/swiglu.h): silu(g) * u in fp32, one rounding to dtype.
#include <cmath>

#include "kernels/swiglu.h"
#include "ref/forward_ref_util.h"

namespace es::ref {

void swiglu(const kernel::SwigluParams& p) {
  if (!kernel::validate(p)) return;
  const int64_t inter = p.intermediateSize;
  detail::parallelFor(p.rows, 8 * inter, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const float g =
            loadAsFloat(p.gateUp, p.dtype, r * 2 * inter + kernel::gateOffset(p.layout, i));
        const float u =
            loadAsFloat(p.gateUp, p.dtype, r * 2 * inter + kernel::upOffset(p.layout, i, inter));
        const float silu = g / (1.0f + std::exp(-g));
        storeFromFloat(p.out, p.dtype, r * inter + i, silu * u);
      }
    }
  });
}

}  // namespace es::ref
