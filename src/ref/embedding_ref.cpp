// CPU reference of the token embedding lookup: a byte copy of each table row (no rounding),
// zeros for ids outside [0, vocabSize).
#include <cstring>

#include "kernels/embedding.h"
#include "ref/forward_ref_util.h"

namespace es::ref {

void embedding(const kernel::EmbeddingParams& p) {
  if (!kernel::validate(p)) return;
  const int64_t rowBytes = int64_t{p.hiddenSize} * dtype_size(p.dtype);
  const auto* table = static_cast<const uint8_t*>(p.table);
  auto* out = static_cast<uint8_t*>(p.out);
  detail::parallelFor(p.numTokens, p.hiddenSize, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int32_t id = p.tokens[t];
      uint8_t* dst = out + t * rowBytes;
      if (id < 0 || id >= p.vocabSize) {
        std::memset(dst, 0, static_cast<size_t>(rowBytes));  // 0 bits = +0.0 in every dtype
      } else {
        std::memcpy(dst, table + int64_t{id} * rowBytes, static_cast<size_t>(rowBytes));
      }
    }
  });
}

}  // namespace es::ref
