// Greedy EAGLE accept kernel: one warp per sequence. Each step the warp scans the candidate
// children of the current node 32 at a time and takes the lowest-numbered match (ballot), so a
// tree of S nodes costs at most (S - 1) · ceil(S / 32) warp steps; a linear chain of 16 is one
// ballot per accepted token.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/eagle_accept.h"

namespace es::kernel {
namespace {

constexpr int kWarpsPerCta = 4;

__global__ void __launch_bounds__(kWarpsPerCta * 32) eagleAcceptKernel(EagleAcceptParams p) {
  const int32_t lane = threadIdx.x & 31;
  const int64_t b = int64_t{blockIdx.x} * kWarpsPerCta + (threadIdx.x >> 5);
  if (b >= p.batchSize) return;  // whole warps exit together
  const int32_t s = p.verifySize;
  const int64_t base = b * s;
  const int32_t budget = p.remainingBudget ? max(__ldg(p.remainingBudget + b), 0) : s;

  int32_t cur = 0;
  int32_t length = 0;  // path nodes emitted so far (node 0 first)
  for (int32_t step = 0; step < s; ++step) {
    const int32_t want = __ldg(p.targetTopIds + base + cur);
    if (lane == 0 && step < budget) {
      p.acceptedNodeIds[base + step] = cur;
      p.acceptedTokens[base + step] = want;
    }
    length = step + 1;
    if (step == s - 1) break;  // at most S - 1 moves
    int32_t next = -1;
    for (int32_t first = 1; first < s && next < 0; first += 32) {
      const int32_t c = first + lane;
      bool match = false;
      if (c < s) {
        const int32_t parent = p.treeParentIds ? __ldg(p.treeParentIds + base + c) : c - 1;
        match = parent == cur && __ldg(p.verifyTokenIds + base + c) == want;
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, match);
      if (ballot != 0) next = first + __ffs(ballot) - 1;
    }
    if (next < 0) break;
    cur = next;
  }
  const int32_t accepted = min(length, budget);
  if (lane == 0) p.acceptLengths[b] = accepted;
  for (int32_t k = accepted + lane; k < s; k += 32) {
    p.acceptedNodeIds[base + k] = -1;
    p.acceptedTokens[base + k] = -1;
  }
}

}  // namespace

void launchEagleAccept(const EagleAcceptParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  const int64_t ctas = (int64_t{p.batchSize} + kWarpsPerCta - 1) / kWarpsPerCta;
  eagleAcceptKernel<<<static_cast<uint32_t>(ctas), kWarpsPerCta * 32, 0, stream>>>(p);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
