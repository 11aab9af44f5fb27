// Host validation of the DFlash draft-side metadata launchers (compiled in every build).
#include <cstdint>

#include "common/errors.h"
#include "kernels/dflash_metadata.h"

namespace es::kernel {
namespace {

// Null check of params field `field` of `p`, reported under the field's own name.
#define ES_CHECK_PTR(where, field) \
  ES_CHECK_ARG(p.field != nullptr, where, #field, "null", "must not be null")

// Token-major rows are addressed by int32 row ids downstream (numDeltaTokens is int32).
void checkRowsFit(const char* where, const char* widthName, int32_t width, int32_t batch) {
  ES_CHECK_ARG(int64_t{batch} * width <= INT32_MAX, where, widthName, width,
               "times batchSize = ", batch, " must be <= ", INT32_MAX, " rows");
}

}  // namespace

bool validate(const DFlashProposalInputsParams& p) {
  constexpr const char* kWhere = "launchDFlashPrepareProposalInputs";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.blockSize > 0, kWhere, "blockSize", p.blockSize, "must be > 0");
  ES_CHECK_ARG(p.blockSize <= kDFlashMaxBlockSize, kWhere, "blockSize", p.blockSize,
               "must be <= ", kDFlashMaxBlockSize, " (one CTA per sequence, one thread per row)");
  checkRowsFit(kWhere, "blockSize", p.blockSize, p.batchSize);
  if (p.batchSize == 0) return false;
  ES_CHECK_PTR(kWhere, oldDraftCacheLengths);
  ES_CHECK_PTR(kWhere, deltaLengths);
  ES_CHECK_PTR(kWhere, packedAttentionMask);
  ES_CHECK_PTR(kWhere, attentionPosId);
  ES_CHECK_PTR(kWhere, contextLengths);
  ES_CHECK_PTR(kWhere, positions);
  ES_CHECK_PTR(kWhere, queryStartOffsets);
  ES_CHECK_PTR(kWhere, queryLengths);
  ES_CHECK_PTR(kWhere, pastLengths);
  ES_CHECK_PTR(kWhere, attentionSequenceLengths);
  return true;
}

bool validate(const DFlashDeltaMetadataParams& p) {
  constexpr const char* kWhere = "launchDFlashPrepareDeltaMetadata";
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.deltaWidth >= 0, kWhere, "deltaWidth", p.deltaWidth, "must be >= 0");
  checkRowsFit(kWhere, "deltaWidth", p.deltaWidth, p.batchSize);
  if (p.batchSize == 0 || p.deltaWidth == 0) return false;
  ES_CHECK_PTR(kWhere, oldDraftCacheLengths);
  ES_CHECK_PTR(kWhere, deltaLengths);
  ES_CHECK_PTR(kWhere, deltaPositions);
  ES_CHECK_PTR(kWhere, deltaTokenToSequence);
  return true;
}

#undef ES_CHECK_PTR

}  // namespace es::kernel
