// GPU parity of the step-commit kernel against its CPU reference on random batches (both count
// conventions, the plain case, corrupt counts), outputs poisoned before the launch.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/spec_commit.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

TEST(SpecCommitGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(5);
  for (int trial = 0; trial < 24; ++trial) {
    const int32_t batch = trial == 0 ? 300 : std::uniform_int_distribution<int32_t>(1, 70)(rng);
    const int32_t width = 1 + trial % 16;
    const int32_t offset = trial % 2;
    const bool plain = trial % 5 == 4;
    SCOPED_TRACE(::testing::Message()
                 << "B " << batch << " width " << width << " offset " << offset);
    I32 tokens(size_t(batch) * width), lengths(batch), counts(batch);
    for (auto& t : tokens) t = std::uniform_int_distribution<int32_t>(0, 151935)(rng);
    for (auto& l : lengths) l = std::uniform_int_distribution<int32_t>(0, 40000)(rng);
    for (auto& c : counts) c = std::uniform_int_distribution<int32_t>(-2, width + 2)(rng);

    I32 emit = test::poisoned<int32_t>(batch), next = test::poisoned<int32_t>(batch),
        last = test::poisoned<int32_t>(batch);
    std::vector<int64_t> anchors = test::poisoned<int64_t>(batch);
    kernel::SpecCommitParams p{.counts = plain ? nullptr : counts.data(),
                               .countOffset = offset,
                               .tokens = tokens.data(),
                               .lengths = lengths.data(),
                               .emitCounts = emit.data(),
                               .newLengths = next.data(),
                               .anchorPositions = anchors.data(),
                               .lastTokens = last.data(),
                               .batchSize = batch,
                               .width = width};
    ref::specCommit(p);

    test::DeviceArray<int32_t> d_tokens(tokens), dLengths(lengths), dCounts(counts), dEmit(batch),
        dNext(batch), dLast(batch);
    test::DeviceArray<int64_t> dAnchors(batch);
    kernel::SpecCommitParams q = p;
    q.counts = plain ? nullptr : dCounts.get();
    q.tokens = d_tokens.get();
    q.lengths = dLengths.get();
    q.emitCounts = dEmit.get();
    q.newLengths = dNext.get();
    q.anchorPositions = dAnchors.get();
    q.lastTokens = dLast.get();
    kernel::launchSpecCommit(q, nullptr);
    EXPECT_EQ(dEmit.download(), emit);
    EXPECT_EQ(dNext.download(), next);
    EXPECT_EQ(dAnchors.download(), anchors);
    EXPECT_EQ(dLast.download(), last);
  }
}

}  // namespace
}  // namespace es
