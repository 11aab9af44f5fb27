// GPU parity of the replay-proposal kernel against its CPU reference, outputs poisoned.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/replay_proposal.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

TEST(ReplayProposalGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(9);
  for (int trial = 0; trial < 12; ++trial) {
    const int32_t batch = 1 + trial * 5, bs = 2 + trial % 15, stride = 700, vocab = 151936;
    I32 recorded = test::randomInts(rng, size_t(batch) * stride, 0, vocab - 1);
    I32 lengths = test::randomInts(rng, batch, 0, stride);
    I32 anchors = test::randomInts(rng, batch, 0, vocab - 1);
    I32 positions(size_t(batch) * bs);
    for (int32_t b = 0; b < batch; ++b) {
      const int32_t start = std::uniform_int_distribution<int32_t>(-1, stride)(rng);
      for (int32_t i = 0; i < bs; ++i) positions[size_t(b) * bs + i] = start + i;
    }
    I32 out = test::poisoned<int32_t>(positions.size());
    kernel::ReplayProposalParams p{.recorded = recorded.data(),
                                   .recordedLengths = lengths.data(),
                                   .stride = stride,
                                   .anchors = anchors.data(),
                                   .positions = positions.data(),
                                   .out = out.data(),
                                   .batchSize = batch,
                                   .blockSize = bs,
                                   .vocab = vocab,
                                   .corruptRate = trial % 3 == 0 ? 0.0f : 0.3f,
                                   .seed = static_cast<uint64_t>(100 + trial)};
    ref::replayProposal(p);
    test::DeviceArray<int32_t> dRec(recorded), dLen(lengths), dAnchor(anchors), dPos(positions),
        d_out(positions.size());
    kernel::ReplayProposalParams q = p;
    q.recorded = dRec.get();
    q.recordedLengths = dLen.get();
    q.anchors = dAnchor.get();
    q.positions = dPos.get();
    q.out = d_out.get();
    kernel::launchReplayProposal(q, nullptr);
    EXPECT_EQ(d_out.download(), out) << "trial " << trial;
  }
}

}  // namespace
}  // namespace es
