// Host validation of the step-commit launcher (compiled in every build).
#include "common/errors.h"
#include "kernels/spec_commit.h"

namespace es::kernel {

bool validate(const SpecCommitParams& p) {
  constexpr const char* kWhere = "launchSpecCommit";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.width > 0, kWhere, "width", p.width, "must be > 0");
  ES_CHECK_ARG(p.countOffset == 0 || p.countOffset == 1, kWhere, "countOffset", p.countOffset,
               "must be 0 or 1");
  if (p.batchSize == 0) return false;
  ES_CHECK_ARG(p.tokens != nullptr, kWhere, "tokens", "null", "must not be null");
  ES_CHECK_ARG(p.lengths != nullptr, kWhere, "lengths", "null", "must not be null");
  ES_CHECK_ARG(p.emitCounts != nullptr, kWhere, "emitCounts", "null", "must not be null");
  ES_CHECK_ARG(p.newLengths != nullptr, kWhere, "newLengths", "null", "must not be null");
  ES_CHECK_ARG(p.lastTokens != nullptr, kWhere, "lastTokens", "null", "must not be null");
  ES_CHECK_ARG(p.newLengths != p.lengths, kWhere, "newLengths", "== lengths",
               "must not alias lengths (other kernels of the step still read the old lengths)");
  ES_CHECK_ARG(!(p.countOffset == 1 && p.counts != nullptr && p.emitCounts == p.counts), kWhere,
               "emitCounts", "== counts", "may alias counts only when countOffset = 0");
  return true;
}

}  // namespace es::kernel
