// Step-commit kernel: one thread per sequence (B is at most a few hundred; this is latency, not
// bandwidth).
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/spec_commit.h"

namespace es::kernel {
namespace {

__global__ void specCommitKernel(SpecCommitParams p) {
  const int32_t b = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= p.batchSize) return;
  int32_t count = p.counts ? p.counts[b] + p.countOffset : 1;
  count = min(max(count, 1), p.width);
  const int32_t length = p.lengths[b] + count;
  p.emitCounts[b] = count;
  p.newLengths[b] = length;
  if (p.anchorPositions) p.anchorPositions[b] = length;
  p.lastTokens[b] = p.tokens[int64_t{b} * p.width + count - 1];
}

}  // namespace

void launchSpecCommit(const SpecCommitParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  constexpr int kThreads = 128;
  const int ctas = (p.batchSize + kThreads - 1) / kThreads;
  specCommitKernel<<<ctas, kThreads, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
