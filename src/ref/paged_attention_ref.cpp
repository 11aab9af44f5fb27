// CPU reference of paged attention (kernels/paged_attention.h): per (query row, query head) the
// visible keys are gathered through the page table, scores and softmax in double, the output
// rounded once to dtype.
#include <cmath>
#include <limits>
#include <vector>

#include "common/kv_page.h"
#include "kernels/paged_attention.h"
#include "ref/forward_ref_util.h"

namespace es::ref {

void pagedAttention(const kernel::PagedAttentionParams& p) {
  if (!kernel::validate(p)) return;
  constexpr int32_t kPage = kv::kTokensPerPage;
  const auto& q = p.query;
  const auto& kv = p.kv;
  const int32_t dim = p.headDim, hq = q.numQHeads, hkv = kv.numKVHeads;
  const int32_t group = hq / hkv;
  const int32_t words = (q.maxQSeqLen + 31) / 32;

  // Owner of each row (-1: not inside any sequence, treated as padding).
  std::vector<int32_t> owner(static_cast<size_t>(q.totalQ), -1);
  for (int32_t b = 0; b < p.batchSize; ++b) {
    for (int32_t r = std::max(q.cuQSeqLens[b], 0); r < q.cuQSeqLens[b + 1] && r < q.totalQ; ++r) {
      owner[static_cast<size_t>(r)] = b;
    }
  }

  const int64_t workPerRow = int64_t{hq} * dim * 4 * std::max(1, kv.maxPagesPerSeq * kPage / 4);
  detail::parallelFor(q.totalQ, workPerRow, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(static_cast<size_t>(dim)), kf(static_cast<size_t>(dim));
    std::vector<double> acc(static_cast<size_t>(dim));
    std::vector<int32_t> keys;
    std::vector<double> scores;
    for (int64_t r = begin; r < end; ++r) {
      const int32_t b = owner[static_cast<size_t>(r)];
      const int32_t pos = q.qPositions[r];
      const int64_t outRow = r * hq * dim;
      if (b < 0 || pos < 0) {
        for (int64_t i = 0; i < int64_t{hq} * dim; ++i)
          storeFromFloat(q.out, p.dtype, outRow + i, 0.0f);
        continue;
      }
      const int32_t qLen = q.cuQSeqLens[b + 1] - q.cuQSeqLens[b];
      const int32_t kvLen = p.kvLengths[b];
      const int32_t past = kvLen - qLen;
      const int32_t* tableRow = kv.pageTable + int64_t{b} * 2 * kv.maxPagesPerSeq;
      // Visible keys (shared by all heads of the row).
      keys.clear();
      for (int32_t j = 0; j < kvLen; ++j) {
        bool visible = true;
        switch (p.mask) {
          case kernel::AttentionMask::kCausal:
            visible = j <= pos;
            break;
          case kernel::AttentionMask::kPackedTree:
            if (j >= past) {
              const int32_t c = j - past;
              visible =
                  c < words * 32 &&
                  ((static_cast<uint32_t>(p.packedMask[r * words + c / 32]) >> (c % 32)) & 1u);
            }
            break;
          case kernel::AttentionMask::kBidirectional:
            break;
        }
        if (p.slidingWindow > 0 && !(int64_t{j} > int64_t{pos} - p.slidingWindow)) visible = false;
        if (!visible) continue;
        const int32_t lp = j / kPage;
        if (lp >= kv.maxPagesPerSeq) continue;
        const int32_t kp = tableRow[lp], vp = tableRow[kv.maxPagesPerSeq + lp];
        if (kp < 0 || kp >= kv.numPages) continue;
        if (vp < kv.numPages || int64_t{vp} >= 2 * int64_t{kv.numPages}) continue;
        keys.push_back(j);
      }
      for (int32_t h = 0; h < hq; ++h) {
        const int32_t hk = h / group;
        loadFloats(q.q, p.dtype, outRow + int64_t{h} * dim, dim, qf.data());
        scores.assign(keys.size(), 0.0);
        double maxScore = -std::numeric_limits<double>::infinity();
        for (size_t n = 0; n < keys.size(); ++n) {
          const int32_t j = keys[n];
          const int32_t kp = tableRow[j / kPage];
          loadFloats(kv.pool, p.dtype, ((int64_t{kp} * kPage + j % kPage) * hkv + hk) * dim, dim,
                     kf.data());
          double s = 0.0;
          for (int32_t d = 0; d < dim; ++d) s += double{qf[d]} * kf[d];
          scores[n] = s * p.scale;
          maxScore = std::max(maxScore, scores[n]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double denom = 0.0;
        for (size_t n = 0; n < keys.size(); ++n) {
          const int32_t j = keys[n];
          const int32_t vp = tableRow[kv.maxPagesPerSeq + j / kPage];
          const double w = std::exp(scores[n] - maxScore);
          denom += w;
          loadFloats(kv.pool, p.dtype, ((int64_t{vp} * kPage + j % kPage) * hkv + hk) * dim, dim,
                     kf.data());
          for (int32_t d = 0; d < dim; ++d) acc[d] += w * kf[d];
        }
        for (int32_t d = 0; d < dim; ++d) {
          const float o = denom > 0.0 ? static_cast<float>(acc[d] / denom) : 0.0f;
          storeFromFloat(q.out, p.dtype, outRow + int64_t{h} * dim + d, o);
        }
      }
    }
  });
}

}  // namespace es::ref
