// DFlash verify-input kernels (spec §2.7, §2.9): one CTA per sequence, thread i = verify row i.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dflash_verify_inputs.h"

namespace es::kernel {
namespace {

int32_t rowThreads(int32_t rows) { return (rows + 31) / 32 * 32; }

__global__ void baseVerifyInputsKernel(DFlashBaseVerifyInputsParams p) {
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

__global__ void linearVerifyInputsKernel(DFlashLinearVerifyInputsParams p) {
  const int32_t b = blockIdx.x;
  const int32_t r = threadIdx.x;
  const int32_t s = p.verifySize;
  if (r >= s) return;
  const int64_t out = int64_t{b} * s;
  // Slot 0 is the anchor; slot r >= 1 takes draft row r (spec §2.9).
  p.verifyTokenIds[out + r] = r == 0 ? __ldg(p.lastAcceptedTokens + b)
                                     : __ldg(p.draftTokenIds + int64_t{b} * p.draftTokenStride + r);
  int8_t* maskRow = p.verifyTreeMask + (out + r) * s;
  for (int32_t c = 0; c < s; ++c) maskRow[c] = static_cast<int8_t>(c <= r ? 1 : 0);
}

}  // namespace

void launchDFlashPrepareBaseVerifyInputs(const DFlashBaseVerifyInputsParams& p,
                                         cudaStream_t stream) {
  if (!validate(p)) return;
  baseVerifyInputsKernel<<<p.batchSize, rowThreads(p.verifySize), 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

void launchDFlashBuildLinearVerifyInputs(const DFlashLinearVerifyInputsParams& p,
                                         cudaStream_t stream) {
  if (!validate(p)) return;
  linearVerifyInputsKernel<<<p.batchSize, rowThreads(p.verifySize), 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
