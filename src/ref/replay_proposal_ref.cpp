// CPU reference of the replay proposal (kernels/replay_proposal.h), plain loops.
#include "common/rng.h"
#include "kernels/replay_proposal.h"

namespace es::ref {

void replayProposal(const kernel::ReplayProposalParams& p) {
  if (!kernel::validate(p)) return;
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int32_t* row = p.recorded + static_cast<int64_t>(b) * p.stride;
    int32_t* out = p.out + static_cast<int64_t>(b) * p.blockSize;
    out[0] = p.anchors[b];
    for (int32_t i = 1; i < p.blockSize; ++i) {
      const int32_t pos = p.positions[static_cast<int64_t>(b) * p.blockSize + i];
      const bool recorded = pos >= 0 && pos < p.recordedLengths[b];
      int32_t token = recorded ? row[pos] : 0;
      const bool corrupt = p.corruptRate > 0.0f &&
                           request_uniform(p.seed, pos, RngPurpose::kProposal, 0) < p.corruptRate;
      if (corrupt) token = token + 1 == p.vocab ? 0 : token + 1;
      out[i] = token;
    }
  }
}

}  // namespace es::ref
