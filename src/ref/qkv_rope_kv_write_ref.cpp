// CPU reference of the fused attention prologue (kernels/qkv_rope_kv_write.h): split the fused
// QKV row, optional per-head q/k RMSNorm (sum of squares in double, scale and products in fp32),
// NeoX RoPE (two fp32 products and one add), one rounding to dtype; q to qOut, k/v into the pool
// through the page table with per-plane skipping.
#include <cmath>
#include <cstring>
#include <vector>

#include "common/kv_page.h"
#include "kernels/qkv_rope_kv_write.h"
#include "ref/forward_ref_util.h"

namespace es::ref {
namespace {

// Norm (if weight) and rotation of one head in place.
void normRope(float* v, const float* weight, float eps, const float* cs, int32_t dim,
              int32_t rotary, std::vector<float>& tmp) {
  if (weight != nullptr) {
    double sumSq = 0.0;
    for (int32_t i = 0; i < dim; ++i) sumSq += double{v[i]} * v[i];
    const float mean = static_cast<float>(sumSq / dim);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int32_t i = 0; i < dim; ++i) v[i] = (v[i] * scale) * weight[i];
  }
  const int32_t half = rotary / 2;
  tmp.assign(v, v + rotary);
  for (int32_t i = 0; i < half; ++i) {
    const float c = cs[i], s = cs[half + i];
    const float a = tmp[i] * c;
    const float b = tmp[i + half] * s;
    v[i] = a - b;
    const float e = tmp[i + half] * c;
    const float f = tmp[i] * s;
    v[i + half] = e + f;
  }
}

}  // namespace

void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p) {
  if (!kernel::validate(p)) return;
  constexpr int32_t kPage = kv::kTokensPerPage;
  const int32_t dim = p.headDim;
  const int32_t hq = p.numQHeads, hkv = p.numKVHeads;
  const int64_t rowElems = int64_t{hq + 2 * hkv} * dim;
  std::vector<float> qW, kW;
  if (p.qNormWeight != nullptr) {
    qW.resize(static_cast<size_t>(dim));
    loadFloats(p.qNormWeight, p.dtype, 0, dim, qW.data());
  }
  if (p.kNormWeight != nullptr) {
    kW.resize(static_cast<size_t>(dim));
    loadFloats(p.kNormWeight, p.dtype, 0, dim, kW.data());
  }
  const int64_t elem = dtype_size(p.dtype);
  auto* pool = static_cast<uint8_t*>(p.kvPool);
  const auto* qkv = static_cast<const uint8_t*>(p.qkv);
  detail::parallelFor(p.numTokens, 16 * rowElems, [&](int64_t begin, int64_t end) {
    std::vector<float> v(static_cast<size_t>(dim)), tmp;
    for (int64_t t = begin; t < end; ++t) {
      const int32_t pos = p.positions[t];
      const int32_t b = p.tokenToSequence[t];
      const bool live = pos >= 0 && pos < p.maxPositions && b >= 0 && b < p.batchSize;
      if (!live) {
        for (int64_t i = 0; i < int64_t{hq} * dim; ++i) {
          storeFromFloat(p.qOut, p.dtype, t * hq * dim + i, 0.0f);
        }
        continue;
      }
      const float* cs = p.cosSin + int64_t{pos} * p.rotaryDim;
      const int64_t row = t * rowElems;
      for (int32_t h = 0; h < hq; ++h) {
        loadFloats(p.qkv, p.dtype, row + int64_t{h} * dim, dim, v.data());
        normRope(v.data(), qW.empty() ? nullptr : qW.data(), p.normEps, cs, dim, p.rotaryDim, tmp);
        for (int32_t i = 0; i < dim; ++i) {
          storeFromFloat(p.qOut, p.dtype, (t * hq + h) * dim + i, v[i]);
        }
      }
      // Cache destinations, per plane.
      const int32_t lp = pos / kPage;
      if (lp >= p.maxPagesPerSeq) continue;
      const int32_t slot = pos % kPage;
      const int32_t* tableRow = p.pageTable + int64_t{b} * 2 * p.maxPagesPerSeq;
      const int32_t kPageId = tableRow[lp];
      const int32_t vPageId = tableRow[p.maxPagesPerSeq + lp];
      const bool writeK = kPageId >= 0 && kPageId < p.numPages;
      const bool writeV = vPageId >= p.numPages && int64_t{vPageId} < 2 * int64_t{p.numPages};
      for (int32_t h = 0; h < hkv; ++h) {
        if (writeK) {
          loadFloats(p.qkv, p.dtype, row + int64_t{hq + h} * dim, dim, v.data());
          normRope(v.data(), kW.empty() ? nullptr : kW.data(), p.normEps, cs, dim, p.rotaryDim,
                   tmp);
          const int64_t dst = ((int64_t{kPageId} * kPage + slot) * hkv + h) * dim;
          for (int32_t i = 0; i < dim; ++i) storeFromFloat(p.kvPool, p.dtype, dst + i, v[i]);
        }
        if (writeV) {
          const int64_t src = row + int64_t{hq + hkv + h} * dim;
          const int64_t dst = ((int64_t{vPageId} * kPage + slot) * hkv + h) * dim;
          std::memcpy(pool + dst * elem, qkv + src * elem, static_cast<size_t>(dim * elem));
        }
      }
    }
  });
}

}  // namespace es::ref
