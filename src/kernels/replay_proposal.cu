// Replay-proposal kernel: one thread per block row.
#include <cstdint>

#include "common/cuda_check.h"
#include "common/rng.h"
#include "kernels/replay_proposal.h"

namespace es::kernel {
namespace {

__global__ void replayProposalKernel(ReplayProposalParams p) {
  const int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (r >= int64_t{p.batchSize} * p.blockSize) return;
  const int64_t b = r / p.blockSize;
  if (r % p.blockSize == 0) {
    p.out[r] = p.anchors[b];
    return;
  }
  const int32_t pos = p.positions[r];
  int32_t token = pos >= 0 && pos < p.recordedLengths[b] ? p.recorded[b * p.stride + pos] : 0;
  if (p.corruptRate > 0.0f &&
      request_uniform(p.seed, pos, RngPurpose::kProposal, 0) < p.corruptRate) {
    token = static_cast<int32_t>((int64_t{token} + 1) % p.vocab);
  }
  p.out[r] = token;
}

}  // namespace

void launchReplayProposal(const ReplayProposalParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  constexpr int kThreads = 128;
  const int64_t rows = int64_t{p.batchSize} * p.blockSize;
  const auto blocks = static_cast<uint32_t>((rows + kThreads - 1) / kThreads);
  replayProposalKernel<<<blocks, kThreads, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
