// DFlash draft-side metadata kernels (spec §2.3–§2.6). Each is one tiny launch: the whole
// per-iteration metadata prep runs in a CUDA graph, so launch count, not bandwidth, is the cost.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dflash_metadata.h"

namespace es::kernel {
namespace {

constexpr int kThreads = 256;
// Grid-stride kernels never need more CTAs than this to cover the decode/prefill metadata sizes.
constexpr int64_t kMaxGrid = 4096;

int32_t flat_grid(int64_t items) {
  const int64_t ctas = (items + kThreads - 1) / kThreads;
  return static_cast<int32_t>(ctas < kMaxGrid ? ctas : kMaxGrid);
}

__device__ __forceinline__ int32_t mask_word(int32_t limit, int32_t word) {
  // Bits of columns [32·word, 32·word + 32) that lie below `limit`.
  const int32_t n = min(max(limit - 32 * word, 0), 32);
  return static_cast<int32_t>(n == 32 ? 0xffffffffu : (1u << n) - 1u);
}

// One CTA per sequence, thread i = block row i (blockDim >= BS).
__global__ void proposal_inputs_kernel(DFlashProposalInputsParams p) {
  const int32_t b = blockIdx.x;
  const int32_t i = threadIdx.x;
  const int32_t bs = p.blockSize;
  const int32_t t_b = __ldg(p.oldDraftCacheLengths + b) + __ldg(p.deltaLengths + b);
  if (i < bs) {
    const int64_t row = int64_t{b} * bs + i;
    p.attentionPosId[row] = t_b + i;
    p.positions[row] = t_b + i;
    const int32_t words = dflashMaskWords(bs);
    const int32_t limit = p.causalProposalMask ? i + 1 : bs;
    for (int32_t w = 0; w < words; ++w) p.packedAttentionMask[row * words + w] = mask_word(limit, w);
  }
  if (i == 0) {
    p.contextLengths[b] = t_b + bs;
    p.attentionSequenceLengths[b] = t_b + bs;
    p.queryStartOffsets[b] = b * bs;
    p.queryLengths[b] = bs;
    p.pastLengths[b] = t_b;
    if (b == 0) p.queryStartOffsets[p.batchSize] = p.batchSize * bs;
  }
}

__global__ void delta_metadata_kernel(DFlashDeltaMetadataParams p) {
  const int64_t rows = int64_t{p.batchSize} * p.deltaWidth;
  for (int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const int32_t b = static_cast<int32_t>(r / p.deltaWidth);
    const int32_t t = static_cast<int32_t>(r - int64_t{b} * p.deltaWidth);
    const bool live = t < __ldg(p.deltaLengths + b);
    p.deltaPositions[r] = live ? __ldg(p.oldDraftCacheLengths + b) + t : -1;
    p.deltaTokenToSequence[r] = live ? b : -1;
  }
}

__global__ void gather_delta_rope_kernel(DFlashGatherDeltaRopeParams p) {
  const int64_t total = int64_t{p.numDeltaTokens} * p.rotaryDim;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / p.rotaryDim;
    const int32_t c = static_cast<int32_t>(e - r * p.rotaryDim);
    const int32_t pos = __ldg(p.deltaPositions + r);
    const int32_t owner = __ldg(p.deltaTokenToSequence + r);
    int32_t row = -1;
    if (owner >= 0 && owner < p.batchSize) row = p.sourceRows == 1 ? 0 : __ldg(p.stateIndices + owner);
    const bool valid = row >= 0 && row < p.sourceRows && pos >= 0 && pos < p.cacheCapacity;
    p.output[e] =
        valid ? __ldg(p.source + (int64_t{row} * p.cacheCapacity + pos) * p.rotaryDim + c) : 0.0f;
  }
}

__global__ void spec_ragged_metadata_kernel(SpecRaggedMetadataParams p) {
  const int32_t width = p.queryWidth;
  const int64_t rows = int64_t{p.batchSize} * width;
  for (int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const int32_t b = static_cast<int32_t>(r / width);
    const int32_t t = static_cast<int32_t>(r - int64_t{b} * width);
    const int32_t valid = p.validCounts ? min(max(__ldg(p.validCounts + b), 0), width) : width;
    const bool padding = t >= valid;
    p.positions[r] = padding ? -1 : __ldg(p.attentionPositions + r);
    if (padding || p.synthesizeLinearTree) {
      if (p.treeParentIds) p.treeParentIds[r] = padding ? -1 : t - 1;
      if (p.treeDepths) p.treeDepths[r] = padding ? -1 : t;
    }
    if (t == 0) {
      const int32_t past = __ldg(p.committedPastLengths + b);
      p.queryStartOffsets[b] = b * width;
      p.queryLengths[b] = valid;
      p.pastLengths[b] = past;
      p.attentionSequenceLengths[b] = past + width;
      if (b == 0) p.queryStartOffsets[p.batchSize] = p.batchSize * width;
    }
  }
}

}  // namespace

void launchDFlashPrepareProposalInputs(const DFlashProposalInputsParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  const int32_t threads = (p.blockSize + 31) / 32 * 32;
  proposal_inputs_kernel<<<p.batchSize, threads, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashPrepareDeltaMetadata(const DFlashDeltaMetadataParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  delta_metadata_kernel<<<flat_grid(int64_t{p.batchSize} * p.deltaWidth), kThreads, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashGatherDeltaRope(const DFlashGatherDeltaRopeParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  gather_delta_rope_kernel<<<flat_grid(int64_t{p.numDeltaTokens} * p.rotaryDim), kThreads, 0,
                             stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchPrepareSpecRaggedMetadata(const SpecRaggedMetadataParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  spec_ragged_metadata_kernel<<<flat_grid(int64_t{p.batchSize} * p.queryWidth), kThreads, 0,
                                stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashPrepareProposalInputs(
    const int32_t* oldDraftCacheLengths, const int32_t* deltaLengths, int32_t blockSize,
    int32_t* packedAttentionMask, int32_t* attentionPosId, int32_t* contextLengths,
    int32_t* positions, int32_t* queryStartOffsets, int32_t* queryLengths, int32_t* pastLengths,
    int32_t* attentionSequenceLengths, const int32_t* stateIndices, bool causalProposalMask,
    int32_t batchSize, cudaStream_t stream) {
  DFlashProposalInputsParams p;
  p.oldDraftCacheLengths = oldDraftCacheLengths;
  p.deltaLengths = deltaLengths;
  p.blockSize = blockSize;
  p.packedAttentionMask = packedAttentionMask;
  p.attentionPosId = attentionPosId;
  p.contextLengths = contextLengths;
  p.positions = positions;
  p.queryStartOffsets = queryStartOffsets;
  p.queryLengths = queryLengths;
  p.pastLengths = pastLengths;
  p.attentionSequenceLengths = attentionSequenceLengths;
  p.stateIndices = stateIndices;
  p.causalProposalMask = causalProposalMask;
  p.batchSize = batchSize;
  launchDFlashPrepareProposalInputs(p, stream);
}

void launchDFlashPrepareDeltaMetadata(const int32_t* oldDraftCacheLengths,
                                      const int32_t* deltaLengths, int32_t deltaWidth,
                                      int32_t* deltaPositions, int32_t* deltaTokenToSequence,
                                      int32_t batchSize, cudaStream_t stream) {
  DFlashDeltaMetadataParams p;
  p.oldDraftCacheLengths = oldDraftCacheLengths;
  p.deltaLengths = deltaLengths;
  p.deltaWidth = deltaWidth;
  p.deltaPositions = deltaPositions;
  p.deltaTokenToSequence = deltaTokenToSequence;
  p.batchSize = batchSize;
  launchDFlashPrepareDeltaMetadata(p, stream);
}

void launchDFlashGatherDeltaRope(const float* source, float* output, const int32_t* deltaPositions,
                                 const int32_t* deltaTokenToSequence, const int32_t* stateIndices,
                                 int32_t numDeltaTokens, int32_t batchSize, int32_t sourceRows,
                                 int32_t cacheCapacity, int32_t rotaryDim, cudaStream_t stream) {
  DFlashGatherDeltaRopeParams p;
  p.source = source;
  p.output = output;
  p.deltaPositions = deltaPositions;
  p.deltaTokenToSequence = deltaTokenToSequence;
  p.stateIndices = stateIndices;
  p.numDeltaTokens = numDeltaTokens;
  p.batchSize = batchSize;
  p.sourceRows = sourceRows;
  p.cacheCapacity = cacheCapacity;
  p.rotaryDim = rotaryDim;
  launchDFlashGatherDeltaRope(p, stream);
}

void launchPrepareSpecRaggedMetadata(const int32_t* attentionPositions,
                                     const int32_t* committedPastLengths,
                                     const int32_t* validCounts, int32_t queryWidth,
                                     int32_t* positions, int32_t* queryStartOffsets,
                                     int32_t* queryLengths, int32_t* pastLengths,
                                     int32_t* attentionSequenceLengths, int32_t* treeParentIds,
                                     int32_t* treeDepths, bool synthesizeLinearTree,
                                     int32_t batchSize, cudaStream_t stream) {
  SpecRaggedMetadataParams p;
  p.attentionPositions = attentionPositions;
  p.committedPastLengths = committedPastLengths;
  p.validCounts = validCounts;
  p.queryWidth = queryWidth;
  p.positions = positions;
  p.queryStartOffsets = queryStartOffsets;
  p.queryLengths = queryLengths;
  p.pastLengths = pastLengths;
  p.attentionSequenceLengths = attentionSequenceLengths;
  p.treeParentIds = treeParentIds;
  p.treeDepths = treeDepths;
  p.synthesizeLinearTree = synthesizeLinearTree;
  p.batchSize = batchSize;
  launchPrepareSpecRaggedMetadata(p, stream);
}

}  // namespace es::kernel
