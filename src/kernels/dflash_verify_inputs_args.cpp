// Host validation of the DFlash verify-input launchers (compiled in every build).
#include <cstdint>

#include "common/errors.h"
#include "kernels/dflash_verify_inputs.h"

namespace es::kernel {
namespace {

// Null check of params field `field` of `p`, reported under the field's own name.
#define ES_CHECK_PTR(where, field) \
  ES_CHECK_ARG(p.field != nullptr, where, #field, "null", "must not be null")

void checkVerifySize(const char* where, int32_t verifySize) {
  ES_CHECK_ARG(verifySize > 0, where, "verifySize", verifySize, "must be > 0");
  ES_CHECK_ARG(verifySize <= kDFlashMaxBlockSize, where, "verifySize", verifySize,
               "must be <= ", kDFlashMaxBlockSize, " (one CTA per sequence, one thread per row)");
}

}  // namespace

bool validate(const DFlashBaseVerifyInputsParams& p) {
  constexpr const char* kWhere = "launchDFlashPrepareBaseVerifyInputs";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  checkVerifySize(kWhere, p.verifySize);
  if (p.batchSize == 0) return false;
  ES_CHECK_PTR(kWhere, baseKVCacheLengths);
  ES_CHECK_PTR(kWhere, packedAttentionMask);
  ES_CHECK_PTR(kWhere, attentionPosId);
  ES_CHECK_PTR(kWhere, selectTokenIndices);
  ES_CHECK_PTR(kWhere, contextLengths);
  return true;
}

bool validate(const DFlashLinearVerifyInputsParams& p) {
  constexpr const char* kWhere = "launchDFlashBuildLinearVerifyInputs";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.proposalLen >= 0, kWhere, "proposalLen", p.proposalLen, "must be >= 0");
  checkVerifySize(kWhere, p.verifySize);
  ES_CHECK_ARG(int64_t{p.verifySize} == int64_t{p.proposalLen} + 1, kWhere, "verifySize",
               p.verifySize, "must equal proposalLen + 1 = ", int64_t{p.proposalLen} + 1);
  // Slot S-1 reads draft row S-1, so each draft row block must hold S entries (>= proposalLen
  // would be one short).
  ES_CHECK_ARG(p.draftTokenStride >= p.verifySize, kWhere, "draftTokenStride", p.draftTokenStride,
               "must be >= verifySize = ", p.verifySize);
  if (p.batchSize == 0) return false;
  ES_CHECK_PTR(kWhere, lastAcceptedTokens);
  ES_CHECK_PTR(kWhere, draftTokenIds);
  ES_CHECK_PTR(kWhere, verifyTokenIds);
  ES_CHECK_PTR(kWhere, verifyTreeMask);
  return true;
}

#undef ES_CHECK_PTR

}  // namespace es::kernel
