// DFlash draft-side metadata kernels (spec §2.3, §2.4). Each is one tiny launch: the whole
// per-iteration metadata prep runs in a CUDA graph, so launch count, not bandwidth, is the cost.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dflash_metadata.h"

namespace es::kernel {
namespace {

constexpr int kThreads = 256;
// Grid-stride kernels never need more CTAs than this to cover the decode/prefill metadata sizes.
constexpr int64_t kMaxGrid = 4096;

int32_t flatGrid(int64_t items) {
  const int64_t ctas = (items + kThreads - 1) / kThreads;
  return static_cast<int32_t>(ctas < kMaxGrid ? ctas : kMaxGrid);
}

__device__ __forceinline__ int32_t maskWord(int32_t limit, int32_t word) {
  // Bits of columns [32·word, 32·word + 32) that lie below `limit`.
  const int32_t n = min(max(limit - 32 * word, 0), 32);
  return static_cast<int32_t>(n == 32 ? 0xffffffffu : (1u << n) - 1u);
}

// One CTA per sequence, thread i = block row i (blockDim >= BS).
__global__ void proposalInputsKernel(DFlashProposalInputsParams p) {
  const int32_t b = blockIdx.x;
  const int32_t i = threadIdx.x;
  const int32_t bs = p.blockSize;
  const int32_t tB = __ldg(p.oldDraftCacheLengths + b) + __ldg(p.deltaLengths + b);
  if (i < bs) {
    const int64_t row = int64_t{b} * bs + i;
    p.attentionPosId[row] = tB + i;
    p.positions[row] = tB + i;
    const int32_t words = dflashMaskWords(bs);
    const int32_t limit = p.causalProposalMask ? i + 1 : bs;
    for (int32_t w = 0; w < words; ++w) p.packedAttentionMask[row * words + w] = maskWord(limit, w);
  }
  if (i == 0) {
    p.contextLengths[b] = tB + bs;
    p.attentionSequenceLengths[b] = tB + bs;
    p.queryStartOffsets[b] = b * bs;
    p.queryLengths[b] = bs;
    p.pastLengths[b] = tB;
    if (b == 0) p.queryStartOffsets[p.batchSize] = p.batchSize * bs;
  }
}

__global__ void deltaMetadataKernel(DFlashDeltaMetadataParams p) {
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

}  // namespace

void launchDFlashPrepareProposalInputs(const DFlashProposalInputsParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  const int32_t threads = (p.blockSize + 31) / 32 * 32;
  proposalInputsKernel<<<p.batchSize, threads, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashPrepareDeltaMetadata(const DFlashDeltaMetadataParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  deltaMetadataKernel<<<flatGrid(int64_t{p.batchSize} * p.deltaWidth), kThreads, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
