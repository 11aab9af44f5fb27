// Host validation of launchQkvRopeKvWrite / ref::qkvRopeKvWrite (every build).
#include <cmath>

#include "common/errors.h"
#include "common/kv_page.h"
#include "kernels/qkv_rope_kv_write.h"

namespace es::kernel {

bool validate(const QkvRopeKvWriteParams& p) {
  constexpr const char* kWhere = "launchQkvRopeKvWrite";
  ES_CHECK_ARG(p.numTokens >= 0, kWhere, "numTokens", p.numTokens, "must be >= 0");
  ES_CHECK_ARG(p.numQHeads > 0, kWhere, "numQHeads", p.numQHeads, "must be > 0");
  ES_CHECK_ARG(p.numKVHeads > 0, kWhere, "numKVHeads", p.numKVHeads, "must be > 0");
  ES_CHECK_ARG(p.numQHeads % p.numKVHeads == 0, kWhere, "numQHeads", p.numQHeads,
               "must be a multiple of numKVHeads = ", p.numKVHeads);
  ES_CHECK_ARG(p.headDim == 64 || p.headDim == 128 || p.headDim == 256, kWhere, "headDim",
               p.headDim, "must be 64, 128 or 256");
  ES_CHECK_ARG(p.rotaryDim > 0, kWhere, "rotaryDim", p.rotaryDim, "must be > 0");
  ES_CHECK_ARG(p.rotaryDim % 2 == 0, kWhere, "rotaryDim", p.rotaryDim,
               "must be even (NeoX RoPE rotates halves)");
  ES_CHECK_ARG(p.rotaryDim <= p.headDim, kWhere, "rotaryDim", p.rotaryDim,
               "must be <= headDim = ", p.headDim);
  ES_CHECK_ARG(p.maxPositions > 0, kWhere, "maxPositions", p.maxPositions, "must be > 0");
  ES_CHECK_ARG(p.numPages > 0, kWhere, "numPages", p.numPages, "must be > 0");
  ES_CHECK_ARG(p.numPages <= kv::kMaxKvPoolPages, kWhere, "numPages", p.numPages,
               "must be <= kMaxKvPoolPages = ", kv::kMaxKvPoolPages);
  ES_CHECK_ARG(p.maxPagesPerSeq > 0, kWhere, "maxPagesPerSeq", p.maxPagesPerSeq, "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, kWhere,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  if (p.qNormWeight != nullptr || p.kNormWeight != nullptr) {
    ES_CHECK_ARG(p.normEps > 0.0f && std::isfinite(p.normEps), kWhere, "normEps", p.normEps,
                 "must be finite and > 0");
  }
  if (p.numTokens == 0) return false;
  ES_CHECK_ARG(p.batchSize > 0, kWhere, "batchSize", p.batchSize, "must be > 0 when numTokens > 0");
  ES_CHECK_ARG(p.qkv != nullptr, kWhere, "qkv", "null", "must not be null");
  ES_CHECK_ARG(p.cosSin != nullptr, kWhere, "cosSin", "null", "must not be null");
  ES_CHECK_ARG(p.positions != nullptr, kWhere, "positions", "null", "must not be null");
  ES_CHECK_ARG(p.tokenToSequence != nullptr, kWhere, "tokenToSequence", "null", "must not be null");
  ES_CHECK_ARG(p.pageTable != nullptr, kWhere, "pageTable", "null", "must not be null");
  ES_CHECK_ARG(p.kvPool != nullptr, kWhere, "kvPool", "null", "must not be null");
  ES_CHECK_ARG(p.qOut != nullptr, kWhere, "qOut", "null", "must not be null");
  ES_CHECK_ARG(p.qOut != p.qkv, kWhere, "qOut", p.qOut, "must not alias qkv");
  return true;
}

}  // namespace es::kernel
