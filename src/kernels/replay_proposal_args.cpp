// Host validation of the replay-proposal launcher (compiled in every build).
#include "common/errors.h"
#include "kernels/replay_proposal.h"

namespace es::kernel {

bool validate(const ReplayProposalParams& p) {
  constexpr const char* kWhere = "launchReplayProposal";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.blockSize > 0, kWhere, "blockSize", p.blockSize, "must be > 0");
  ES_CHECK_ARG(p.stride > 0, kWhere, "stride", p.stride, "must be > 0");
  ES_CHECK_ARG(p.vocab > 0, kWhere, "vocab", p.vocab, "must be > 0");
  ES_CHECK_ARG(p.corruptRate >= 0.0f && p.corruptRate <= 1.0f, kWhere, "corruptRate", p.corruptRate,
               "must be in [0, 1]");
  if (p.batchSize == 0) return false;
  ES_CHECK_ARG(p.recorded && p.recordedLengths && p.anchors && p.positions && p.out, kWhere,
               "recorded/recordedLengths/anchors/positions/out", "null", "must not be null");
  return true;
}

}  // namespace es::kernel
