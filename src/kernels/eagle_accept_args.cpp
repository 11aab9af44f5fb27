// Host validation of the greedy EAGLE accept launcher (compiled in every build).
#include "common/errors.h"
#include "kernels/eagle_accept.h"

namespace es::kernel {

bool validate(const EagleAcceptParams& p) {
  constexpr const char* kWhere = "launchEagleAccept";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.verifySize > 0, kWhere, "verifySize", p.verifySize, "must be > 0");
  if (p.batchSize == 0) return false;
  ES_CHECK_ARG(p.targetTopIds != nullptr, kWhere, "targetTopIds", "null", "must not be null");
  ES_CHECK_ARG(p.verifyTokenIds != nullptr, kWhere, "verifyTokenIds", "null", "must not be null");
  ES_CHECK_ARG(p.acceptedTokens != nullptr, kWhere, "acceptedTokens", "null", "must not be null");
  ES_CHECK_ARG(p.acceptedNodeIds != nullptr, kWhere, "acceptedNodeIds", "null", "must not be null");
  ES_CHECK_ARG(p.acceptLengths != nullptr, kWhere, "acceptLengths", "null", "must not be null");
  return true;
}

}  // namespace es::kernel
