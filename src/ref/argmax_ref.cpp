// CPU reference of row argmax: first index of the maximum; NaN beats every number. With
// flagNonFinite a row whose maximum is not finite gets kNonFiniteToken.
#include <cmath>

#include "common/dtype.h"
#include "kernels/argmax.h"

namespace es::ref {

namespace {
float load(const ArgmaxParams& p, int64_t i) {
  switch (p.dtype) {
    case DType::kF16:
      return to_float(static_cast<const fp16*>(p.logits)[i]);
    case DType::kBF16:
      return to_float(static_cast<const bf16*>(p.logits)[i]);
    default:
      return static_cast<const float*>(p.logits)[i];
  }
}
}  // namespace

void argmaxRows(const ArgmaxParams& p) {
  validateArgmaxParams(p, "ref::argmax_rows");
  const int64_t stride = p.rowStride ? p.rowStride : p.vocab;
  for (int32_t r = 0; r < p.rows; ++r) {
    int32_t best = 0;
    float bestV = load(p, r * stride);
    for (int32_t i = 1; i < p.vocab && !std::isnan(bestV); ++i) {
      const float v = load(p, r * stride + i);
      if (std::isnan(v) || v > bestV) {
        best = i;
        bestV = v;
      }
    }
    p.out[r] = p.flagNonFinite && !std::isfinite(bestV) ? kNonFiniteToken : best;
  }
}

}  // namespace es::ref
