// CPU references of the DFlash verify-input kernels (spec §2.7, §2.9), plain loops.
#include <cstdint>

#include "kernels/dflash_verify_inputs.h"

namespace es::ref {

void dflashPrepareBaseVerifyInputs(const kernel::DFlashBaseVerifyInputsParams& p) {
  if (!kernel::validate(p)) return;
  const int32_t s = p.verifySize;
  const int32_t words = kernel::dflashMaskWords(s);
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int32_t base = p.baseKVCacheLengths[b];
    p.contextLengths[b] = base + s;
    for (int32_t i = 0; i < s; ++i) {
      const int64_t row = int64_t{b} * s + i;
      p.attentionPosId[row] = base + i;
      p.selectTokenIndices[row] = int64_t{b} * s + i;
      // Causal: row i attends to columns [0, i].
      for (int32_t w = 0; w < words; ++w) {
        uint32_t bits = 0;
        for (int32_t j = 0; j < 32; ++j) {
          if (32 * w + j <= i) bits |= 1u << j;
        }
        p.packedAttentionMask[row * words + w] = static_cast<int32_t>(bits);
      }
    }
  }
}

void dflashBuildLinearVerifyInputs(const kernel::DFlashLinearVerifyInputsParams& p) {
  if (!kernel::validate(p)) return;
  const int32_t s = p.verifySize;
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int64_t out = int64_t{b} * s;
    p.verifyTokenIds[out] = p.lastAcceptedTokens[b];
    // Verify slot i >= 1 takes draft row i (spec §2.9): row 0 re-predicts the anchor.
    for (int32_t i = 1; i < s; ++i) {
      p.verifyTokenIds[out + i] = p.draftTokenIds[int64_t{b} * p.draftTokenStride + i];
    }
    for (int32_t r = 0; r < s; ++r) {
      for (int32_t c = 0; c < s; ++c) {
        p.verifyTreeMask[(out + r) * s + c] = static_cast<int8_t>(c <= r ? 1 : 0);
      }
    }
  }
}

}  // namespace es::ref
