// Host validation of launchPagedAttention / ref::pagedAttention (every build).
#include <cmath>

#include "common/errors.h"
#include "kernels/paged_attention.h"
#include "kv/page_geometry.h"

namespace es::kernel {

bool validate(const PagedAttentionParams& p) {
  constexpr const char* kWhere = "launchPagedAttention";
  const RaggedQueryArgs& q = p.query;
  const PagedKvArgs& kv = p.kv;
  ES_CHECK_ARG(p.batchSize >= 0, kWhere, "batchSize", p.batchSize, "must be >= 0");
  ES_CHECK_ARG(q.totalQ >= 0, kWhere, "query.totalQ", q.totalQ, "must be >= 0");
  ES_CHECK_ARG(q.maxQSeqLen >= 0, kWhere, "query.maxQSeqLen", q.maxQSeqLen, "must be >= 0");
  ES_CHECK_ARG(p.batchSize > 0 || q.totalQ == 0, kWhere, "query.totalQ", q.totalQ,
               "must be 0 when batchSize = 0");
  ES_CHECK_ARG(q.numQHeads > 0, kWhere, "query.numQHeads", q.numQHeads, "must be > 0");
  ES_CHECK_ARG(kv.numKVHeads > 0, kWhere, "kv.numKVHeads", kv.numKVHeads, "must be > 0");
  ES_CHECK_ARG(q.numQHeads % kv.numKVHeads == 0, kWhere, "query.numQHeads", q.numQHeads,
               "must be a multiple of kv.numKVHeads = ", kv.numKVHeads);
  ES_CHECK_ARG(p.headDim == 64 || p.headDim == 128 || p.headDim == 256, kWhere, "headDim",
               p.headDim, "must be 64, 128 or 256");
  ES_CHECK_ARG(kv.numPages > 0, kWhere, "kv.numPages", kv.numPages, "must be > 0");
  ES_CHECK_ARG(kv.numPages <= kv::kMaxKvPoolPages, kWhere, "kv.numPages", kv.numPages,
               "must be <= kMaxKvPoolPages = ", kv::kMaxKvPoolPages);
  ES_CHECK_ARG(kv.maxPagesPerSeq > 0, kWhere, "kv.maxPagesPerSeq", kv.maxPagesPerSeq,
               "must be > 0");
  ES_CHECK_ARG(p.slidingWindow >= 0, kWhere, "slidingWindow", p.slidingWindow,
               "must be >= 0 (0 = none)");
  ES_CHECK_ARG(p.scale > 0.0f && std::isfinite(p.scale), kWhere, "scale", p.scale,
               "must be finite and > 0 (usually headDim^-0.5)");
  ES_CHECK_ARG(p.mask == AttentionMask::kCausal || p.mask == AttentionMask::kPackedTree ||
                   p.mask == AttentionMask::kBidirectional,
               kWhere, "mask", static_cast<int32_t>(p.mask),
               "must be kCausal, kPackedTree or kBidirectional");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16,
               kWhere, "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  if (p.batchSize == 0 || q.totalQ == 0) return false;
  ES_CHECK_ARG(q.q != nullptr, kWhere, "query.q", "null", "must not be null");
  ES_CHECK_ARG(q.out != nullptr, kWhere, "query.out", "null", "must not be null");
  ES_CHECK_ARG(q.out != q.q, kWhere, "query.out", q.out, "must not alias query.q");
  ES_CHECK_ARG(q.cuQSeqLens != nullptr, kWhere, "query.cuQSeqLens", "null", "must not be null");
  ES_CHECK_ARG(q.qPositions != nullptr, kWhere, "query.qPositions", "null", "must not be null");
  ES_CHECK_ARG(kv.pool != nullptr, kWhere, "kv.pool", "null", "must not be null");
  ES_CHECK_ARG(kv.pageTable != nullptr, kWhere, "kv.pageTable", "null", "must not be null");
  ES_CHECK_ARG(p.kvLengths != nullptr, kWhere, "kvLengths", "null", "must not be null");
  if (p.mask == AttentionMask::kPackedTree) {
    ES_CHECK_ARG(q.maxQSeqLen > 0, kWhere, "query.maxQSeqLen", q.maxQSeqLen,
                 "must be > 0 with mask kPackedTree (it sizes the mask rows)");
    ES_CHECK_ARG(p.packedMask != nullptr, kWhere, "packedMask", "null",
                 "must not be null with mask kPackedTree");
  }
  return true;
}

}  // namespace es::kernel
