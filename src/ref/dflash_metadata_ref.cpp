// CPU references of the DFlash draft-side metadata kernels (spec §2.3, §2.4), plain loops.
#include <cstdint>

#include "kernels/dflash_metadata.h"

namespace es::ref {

void dflashPrepareProposalInputs(const kernel::DFlashProposalInputsParams& p) {
  if (!kernel::validate(p)) return;
  const int32_t bs = p.blockSize;
  const int32_t words = kernel::dflashMaskWords(bs);
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int32_t tB = p.oldDraftCacheLengths[b] + p.deltaLengths[b];
    p.contextLengths[b] = tB + bs;
    p.attentionSequenceLengths[b] = tB + bs;
    p.queryStartOffsets[b] = b * bs;
    p.queryLengths[b] = bs;
    p.pastLengths[b] = tB;
    for (int32_t i = 0; i < bs; ++i) {
      const int64_t row = int64_t{b} * bs + i;
      p.attentionPosId[row] = tB + i;
      p.positions[row] = tB + i;
      // Columns [0, limit) are attended: the whole block, or [0, i] for a causal proposal.
      const int32_t limit = p.causalProposalMask ? i + 1 : bs;
      for (int32_t w = 0; w < words; ++w) {
        uint32_t bits = 0;
        for (int32_t j = 0; j < 32; ++j) {
          if (32 * w + j < limit) bits |= 1u << j;
        }
        p.packedAttentionMask[row * words + w] = static_cast<int32_t>(bits);
      }
    }
  }
  p.queryStartOffsets[p.batchSize] = p.batchSize * bs;
}

void dflashPrepareDeltaMetadata(const kernel::DFlashDeltaMetadataParams& p) {
  if (!kernel::validate(p)) return;
  for (int32_t b = 0; b < p.batchSize; ++b) {
    for (int32_t t = 0; t < p.deltaWidth; ++t) {
      const int64_t r = int64_t{b} * p.deltaWidth + t;
      const bool live = t < p.deltaLengths[b];
      p.deltaPositions[r] = live ? p.oldDraftCacheLengths[b] + t : -1;
      p.deltaTokenToSequence[r] = live ? b : -1;
    }
  }
}

}  // namespace es::ref
