// CPU reference of the greedy EAGLE accept (spec §2 "Accept"), plain loops.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/eagle_accept.h"

namespace es::ref {

void eagleAccept(const kernel::EagleAcceptParams& p) {
  if (!kernel::validate(p)) return;
  const int32_t s = p.verifySize;
  std::vector<int32_t> path;
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int64_t base = int64_t{b} * s;
    path.assign(1, 0);
    int32_t cur = 0;
    // At most S - 1 moves: a malformed parent array (a cycle) cannot loop forever.
    for (int32_t step = 1; step < s; ++step) {
      const int32_t want = p.targetTopIds[base + cur];
      int32_t next = -1;
      for (int32_t c = 1; c < s && next < 0; ++c) {
        const int32_t parent = p.treeParentIds ? p.treeParentIds[base + c] : c - 1;
        if (parent == cur && p.verifyTokenIds[base + c] == want) next = c;
      }
      if (next < 0) break;
      path.push_back(next);
      cur = next;
    }
    const int32_t matchedPlusOne = static_cast<int32_t>(path.size());
    const int32_t budget = p.remainingBudget ? std::max(p.remainingBudget[b], 0) : s;
    const int32_t length = std::min(matchedPlusOne, budget);
    p.acceptLengths[b] = length;
    for (int32_t k = 0; k < s; ++k) {
      p.acceptedNodeIds[base + k] = k < length ? path[k] : -1;
      p.acceptedTokens[base + k] = k < length ? p.targetTopIds[base + path[k]] : -1;
    }
  }
}

}  // namespace es::ref
