// DFlash verify-input kernels (spec §2.7–§2.9): one CTA per sequence, thread i = verify row i.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dflash_verify_inputs.h"

namespace es::kernel {
namespace {

int32_t row_threads(int32_t rows) { return (rows + 31) / 32 * 32; }

__global__ void base_verify_inputs_kernel(DFlashBaseVerifyInputsParams p) {
  const int32_t b = blockIdx.x;
  const int32_t i = threadIdx.x;
  const int32_t s = p.verifySize;
  const int32_t base = __ldg(p.baseKVCacheLengths + b);
  if (i < s) {
    const int64_t row = int64_t{b} * s + i;
    p.attentionPosId[row] = base + i;
    p.selectTokenIndices[row] = row;
    const int32_t words = dflashMaskWords(s);
    for (int32_t w = 0; w < words; ++w) {
      // Columns [0, i] of words w: n = number of set low bits.
      const int32_t n = min(max(i + 1 - 32 * w, 0), 32);
      p.packedAttentionMask[row * words + w] =
          static_cast<int32_t>(n == 32 ? 0xffffffffu : (1u << n) - 1u);
    }
  }
  if (i == 0) p.contextLengths[b] = base + s;
}

__global__ void linear_tree_metadata_kernel(DFlashLinearTreeMetadataParams p) {
  const int32_t node = threadIdx.x;
  if (node >= p.verifySize) return;
  const int64_t r = int64_t{blockIdx.x} * p.verifySize + node;
  p.treeParentIds[r] = node - 1;
  p.treeDepths[r] = node;
}

__global__ void linear_verify_inputs_kernel(DFlashLinearVerifyInputsParams p) {
  const int32_t b = blockIdx.x;
  const int32_t r = threadIdx.x;
  const int32_t s = p.verifySize;
  if (r >= s) return;
  const int64_t out = int64_t{b} * s;
  // Slot 0 is the anchor; slot r >= 1 takes draft row r (spec §2.9).
  p.verifyTokenIds[out + r] =
      r == 0 ? __ldg(p.lastAcceptedTokens + b) : __ldg(p.draftTokenIds + int64_t{b} * p.draftTokenStride + r);
  int8_t* mask_row = p.verifyTreeMask + (out + r) * s;
  for (int32_t c = 0; c < s; ++c) mask_row[c] = static_cast<int8_t>(c <= r ? 1 : 0);
}

}  // namespace

void launchDFlashPrepareBaseVerifyInputs(const DFlashBaseVerifyInputsParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  base_verify_inputs_kernel<<<p.batchSize, row_threads(p.verifySize), 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashBuildLinearTreeMetadata(const DFlashLinearTreeMetadataParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  linear_tree_metadata_kernel<<<p.batchSize, row_threads(p.verifySize), 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashBuildLinearVerifyInputs(const DFlashLinearVerifyInputsParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  linear_verify_inputs_kernel<<<p.batchSize, row_threads(p.verifySize), 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashPrepareBaseVerifyInputs(const int32_t* baseKVCacheLengths, int32_t verifySize,
                                         int32_t* packedAttentionMask, int32_t* attentionPosId,
                                         int64_t* selectTokenIndices, int32_t* contextLengths,
                                         int32_t batchSize, cudaStream_t stream) {
  DFlashBaseVerifyInputsParams p;
  p.baseKVCacheLengths = baseKVCacheLengths;
  p.verifySize = verifySize;
  p.packedAttentionMask = packedAttentionMask;
  p.attentionPosId = attentionPosId;
  p.selectTokenIndices = selectTokenIndices;
  p.contextLengths = contextLengths;
  p.batchSize = batchSize;
  launchDFlashPrepareBaseVerifyInputs(p, stream);
}

void launchDFlashBuildLinearTreeMetadata(int32_t* treeParentIds, int32_t* treeDepths,
                                         int32_t batchSize, int32_t verifySize, cudaStream_t stream) {
  DFlashLinearTreeMetadataParams p;
  p.treeParentIds = treeParentIds;
  p.treeDepths = treeDepths;
  p.batchSize = batchSize;
  p.verifySize = verifySize;
  launchDFlashBuildLinearTreeMetadata(p, stream);
}

void launchDFlashBuildLinearVerifyInputs(const int32_t* lastAcceptedTokens,
                                         const int32_t* draftTokenIds, int32_t* verifyTokenIds,
                                         int8_t* verifyTreeMask, int32_t batchSize,
                                         int32_t proposalLen, int32_t draftTokenStride,
                                         int32_t verifySize, cudaStream_t stream) {
  DFlashLinearVerifyInputsParams p;
  p.lastAcceptedTokens = lastAcceptedTokens;
  p.draftTokenIds = draftTokenIds;
  p.verifyTokenIds = verifyTokenIds;
  p.verifyTreeMask = verifyTreeMask;
  p.batchSize = batchSize;
  p.proposalLen = proposalLen;
  p.draftTokenStride = draftTokenStride;
  p.verifySize = verifySize;
  launchDFlashBuildLinearVerifyInputs(p, stream);
}

}  // namespace es::kernel
