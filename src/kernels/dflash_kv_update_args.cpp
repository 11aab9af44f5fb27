// Host validation of the DFlash target KV update arguments (compiled in every build; the CUDA
// launcher and the CPU reference both call it before touching memory).
#include "common/errors.h"
#include "kernels/dflash_kv_update.h"

namespace es::kernel {
namespace {

constexpr const char* kWhere = "launchDFlashTargetKVCacheUpdate";

template <typename T>
bool validateImpl(const DFlashTargetKVCacheUpdateParams<T>& p) {
  ES_CHECK_ARG(p.numDeltaTokens >= 0, kWhere, "numDeltaTokens", p.numDeltaTokens, "must be >= 0");
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(p.numKVHeads > 0, kWhere, "numKVHeads", p.numKVHeads, "must be > 0");
  ES_CHECK_ARG(p.headDim > 0, kWhere, "headDim", p.headDim, "must be > 0");
  ES_CHECK_ARG(p.rotaryDim > 0, kWhere, "rotaryDim", p.rotaryDim, "must be > 0");
  ES_CHECK_ARG(p.rotaryDim % 2 == 0, kWhere, "rotaryDim", p.rotaryDim,
               "must be even (NeoX RoPE rotates halves)");
  ES_CHECK_ARG(p.rotaryDim <= p.headDim, kWhere, "rotaryDim", p.rotaryDim,
               "must be <= headDim = ", p.headDim);
  ES_CHECK_ARG(p.numPages > 0, kWhere, "numPages", p.numPages, "must be > 0");
  ES_CHECK_ARG(p.numPages <= kv::kMaxKvPoolPages, kWhere, "numPages", p.numPages,
               "must be <= kMaxKvPoolPages = ", kv::kMaxKvPoolPages);
  ES_CHECK_ARG(p.maxPagesPerSeq > 0, kWhere, "maxPagesPerSeq", p.maxPagesPerSeq, "must be > 0");
  // One token's K row (Hkv·D elements) is indexed with int32 inside a CTA.
  ES_CHECK_ARG(int64_t{p.numKVHeads} * p.headDim <= INT32_MAX, kWhere, "numKVHeads", p.numKVHeads,
               "times headDim = ", p.headDim, " must be <= ", INT32_MAX);
  if (p.numDeltaTokens == 0 || p.batchSize == 0) return false;
  ES_CHECK_ARG(p.kDelta != nullptr, kWhere, "kDelta", "null", "must not be null");
  ES_CHECK_ARG(p.vDelta != nullptr, kWhere, "vDelta", "null", "must not be null");
  ES_CHECK_ARG(p.kvCache != nullptr, kWhere, "kvCache", "null", "must not be null");
  ES_CHECK_ARG(p.tokenAlignedCosSin != nullptr, kWhere, "tokenAlignedCosSin", "null",
               "must not be null");
  ES_CHECK_ARG(p.deltaPositions != nullptr, kWhere, "deltaPositions", "null", "must not be null");
  ES_CHECK_ARG(p.deltaTokenToSequence != nullptr, kWhere, "deltaTokenToSequence", "null",
               "must not be null");
  ES_CHECK_ARG(p.pageTable != nullptr, kWhere, "pageTable", "null", "must not be null");
  return true;
}

}  // namespace

bool validate(const DFlashKvUpdateParamsF16& p) { return validateImpl(p); }
bool validate(const DFlashKvUpdateParamsBF16& p) { return validateImpl(p); }
bool validate(const DFlashKvUpdateParamsF32& p) { return validateImpl(p); }

void checkDFlashRopeCapacity(int32_t cosSinSeqLen, int32_t kvCapacity) {
  ES_CHECK_ARG(cosSinSeqLen <= kvCapacity, "checkDFlashRopeCapacity", "cosSinSeqLen", cosSinSeqLen,
               "must be <= kvCapacity = ", kvCapacity,
               " (the RoPE cache must not outgrow the padded KV capacity)");
}

}  // namespace es::kernel
