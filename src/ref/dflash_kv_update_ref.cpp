// CPU reference of the DFlash target KV update (spec §2.1), plain loops on host pointers.
#include <cstdint>

#include "kernels/dflash_kv_update.h"

namespace es::ref {
namespace {

inline float load(fp16 v) { return to_float(v); }
inline float load(bf16 v) { return to_float(v); }
inline float load(float v) { return v; }
inline void store(fp16& dst, float v) { dst = to_fp16(v); }
inline void store(bf16& dst, float v) { dst = to_bf16(v); }
inline void store(float& dst, float v) { dst = v; }

template <typename T>
void update(const kernel::DFlashTargetKVCacheUpdateParams<T>& p) {
  if (!kernel::validate(p)) return;
  const int64_t hkv = p.numKVHeads;
  const int64_t dim = p.headDim;
  const int32_t half = p.rotaryDim / 2;
  for (int64_t r = 0; r < p.numDeltaTokens; ++r) {
    const int32_t pos = p.deltaPositions[r];
    const int32_t b = p.deltaTokenToSequence[r];
    if (b < 0 || b >= p.batchSize || pos < 0) continue;
    const int32_t logicalPage = pos / kv::kTokensPerPage;
    if (logicalPage >= p.maxPagesPerSeq) continue;
    const int32_t slot = pos % kv::kTokensPerPage;
    const int32_t* row = p.pageTable + int64_t{b} * 2 * p.maxPagesPerSeq;
    const int32_t kPageId = row[logicalPage];
    const int32_t vPageId = row[p.maxPagesPerSeq + logicalPage];
    const bool writeK = kPageId >= 0 && kPageId < p.numPages;
    const bool writeV = vPageId >= p.numPages && int64_t{vPageId} < 2 * int64_t{p.numPages};
    const float* cs = p.tokenAlignedCosSin + r * p.rotaryDim;
    for (int64_t h = 0; h < hkv; ++h) {
      const T* k = p.kDelta + (r * hkv + h) * dim;
      const T* v = p.vDelta + (r * hkv + h) * dim;
      if (writeK) {
        T* dst = p.kvCache + ((int64_t{kPageId} * kv::kTokensPerPage + slot) * hkv + h) * dim;
        for (int32_t i = 0; i < p.headDim; ++i) {
          if (i >= p.rotaryDim) {
            dst[i] = k[i];
          } else if (i < half) {
            const float x = load(k[i]) * cs[i];
            const float y = load(k[i + half]) * cs[half + i];
            store(dst[i], x - y);
          } else {
            const float x = load(k[i]) * cs[i - half];
            const float y = load(k[i - half]) * cs[i];  // sin[i - half] = cs[half + i - half]
            store(dst[i], x + y);
          }
        }
      }
      if (writeV) {
        T* dst = p.kvCache + ((int64_t{vPageId} * kv::kTokensPerPage + slot) * hkv + h) * dim;
        for (int32_t i = 0; i < p.headDim; ++i) dst[i] = v[i];
      }
    }
  }
}

}  // namespace

void dflashTargetKVCacheUpdate(const kernel::DFlashKvUpdateParamsF16& p) { update(p); }
void dflashTargetKVCacheUpdate(const kernel::DFlashKvUpdateParamsBF16& p) { update(p); }
void dflashTargetKVCacheUpdate(const kernel::DFlashKvUpdateParamsF32& p) { update(p); }

}  // namespace es::ref
