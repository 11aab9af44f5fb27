// CPU reference of RMSNorm with the optional fused residual add (kernels/rmsnorm.h): the sum of
// squares in double, the scale 1/sqrt(mean + eps) in fp32, out = (v * scale) * weight in fp32,
// one rounding to dtype.
#include <cmath>
#include <vector>

#include "kernels/rmsnorm.h"
#include "ref/forward_ref_util.h"

namespace es::ref {

void rmsNorm(const kernel::RmsNormParams& p) {
  if (!kernel::validate(p)) return;
  const int64_t hidden = p.hiddenSize;
  std::vector<float> weight(static_cast<size_t>(hidden));
  loadFloats(p.weight, p.dtype, 0, hidden, weight.data());
  detail::parallelFor(p.rows, 4 * hidden, [&](int64_t begin, int64_t end) {
    std::vector<float> v(static_cast<size_t>(hidden));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = r * hidden;
      loadFloats(p.x, p.dtype, base, hidden, v.data());
      if (p.residual != nullptr) {
        for (int64_t i = 0; i < hidden; ++i) {
          const float sum = loadAsFloat(p.residual, p.dtype, base + i) + v[i];
          storeFromFloat(p.residual, p.dtype, base + i, sum);
          v[i] = detail::roundTo(p.dtype, sum);
        }
      }
      double sumSq = 0.0;
      for (int64_t i = 0; i < hidden; ++i) sumSq += double{v[i]} * v[i];
      const float mean = static_cast<float>(sumSq / static_cast<double>(hidden));
      const float scale = 1.0f / std::sqrt(mean + p.eps);
      for (int64_t i = 0; i < hidden; ++i) {
        storeFromFloat(p.out, p.dtype, base + i, (v[i] * scale) * weight[i]);
      }
    }
  });
}

}  // namespace es::ref
