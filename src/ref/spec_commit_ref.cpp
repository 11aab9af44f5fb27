// CPU reference of the step commit (kernels/spec_commit.h), plain loops.
#include <algorithm>

#include "kernels/spec_commit.h"

namespace es::ref {

void specCommit(const kernel::SpecCommitParams& p) {
  if (!kernel::validate(p)) return;
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int32_t raw = p.counts ? p.counts[b] + p.countOffset : 1;
    const int32_t count = std::clamp(raw, 1, p.width);
    const int32_t length = p.lengths[b] + count;
    const int32_t last = p.tokens[static_cast<int64_t>(b) * p.width + count - 1];
    p.emitCounts[b] = count;  // after reading counts[b]: they may alias
    p.newLengths[b] = length;
    if (p.anchorPositions) p.anchorPositions[b] = length;
    p.lastTokens[b] = last;
  }
}

}  // namespace es::ref
