// CPU references of the DFlash draft-side metadata kernels (spec §2.3–§2.6), plain loops.
#include <algorithm>
#include <cstdint>

#include "kernels/dflash_metadata.h"

namespace es::ref {

void dflashPrepareProposalInputs(const kernel::DFlashProposalInputsParams& p) {
  if (!kernel::validate(p)) return;
  const int32_t bs = p.blockSize;
  const int32_t words = kernel::dflashMaskWords(bs);
  for (int32_t b = 0; b < p.batchSize; ++b) {
    const int32_t t_b = p.oldDraftCacheLengths[b] + p.deltaLengths[b];
    p.contextLengths[b] = t_b + bs;
    p.attentionSequenceLengths[b] = t_b + bs;
    p.queryStartOffsets[b] = b * bs;
    p.queryLengths[b] = bs;
    p.pastLengths[b] = t_b;
    for (int32_t i = 0; i < bs; ++i) {
      const int64_t row = int64_t{b} * bs + i;
      p.attentionPosId[row] = t_b + i;
      p.positions[row] = t_b + i;
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

void dflashGatherDeltaRope(const kernel::DFlashGatherDeltaRopeParams& p) {
  if (!kernel::validate(p)) return;
  for (int64_t r = 0; r < p.numDeltaTokens; ++r) {
    const int32_t pos = p.deltaPositions[r];
    const int32_t owner = p.deltaTokenToSequence[r];
    int32_t row = -1;
    if (owner >= 0 && owner < p.batchSize) row = p.sourceRows == 1 ? 0 : p.stateIndices[owner];
    const bool valid = row >= 0 && row < p.sourceRows && pos >= 0 && pos < p.cacheCapacity;
    for (int32_t c = 0; c < p.rotaryDim; ++c) {
      p.output[r * p.rotaryDim + c] =
          valid ? p.source[(int64_t{row} * p.cacheCapacity + pos) * p.rotaryDim + c] : 0.0f;
    }
  }
}

void prepareSpecRaggedMetadata(const kernel::SpecRaggedMetadataParams& p) {
  if (!kernel::validate(p)) return;
  const int32_t width = p.queryWidth;
  for (int32_t b = 0; b < p.batchSize; ++b) {
    // Out-of-range counts are clamped to the physical width (documented deviation: the spec
    // leaves them undefined, and a length above W would send attention past the row block).
    const int32_t valid = p.validCounts ? std::clamp(p.validCounts[b], 0, width) : width;
    const int32_t past = p.committedPastLengths[b];
    p.queryStartOffsets[b] = b * width;
    p.queryLengths[b] = valid;
    p.pastLengths[b] = past;
    p.attentionSequenceLengths[b] = past + width;
    for (int32_t t = 0; t < width; ++t) {
      const int64_t r = int64_t{b} * width + t;
      const bool padding = t >= valid;
      p.positions[r] = padding ? -1 : p.attentionPositions[r];
      if (padding || p.synthesizeLinearTree) {
        if (p.treeParentIds) p.treeParentIds[r] = padding ? -1 : t - 1;
        if (p.treeDepths) p.treeDepths[r] = padding ? -1 : t;
      }
    }
  }
  p.queryStartOffsets[p.batchSize] = p.batchSize * width;
}

}  // namespace es::ref
