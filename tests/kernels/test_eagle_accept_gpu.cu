// GPU parity of the greedy EAGLE accept kernel against its CPU reference: random trees (parents
// drawn among earlier nodes) and linear chains, S up to 70 (more than one 32-lane scan per step),
// small vocabularies so that long accepted paths occur, random and absent budgets, B up to 64.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/eagle_accept.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

using test::poisoned;

TEST(EagleAcceptGpu, MatchesReferenceOnRandomTreesAndChains) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(31);
  int64_t totalAccepted = 0, sequences = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t batch = trial == 0 ? 64 : std::uniform_int_distribution<int32_t>(1, 64)(rng);
    const int32_t sizes[] = {1, 5, 16, 33, std::uniform_int_distribution<int32_t>(2, 70)(rng)};
    const int32_t s = sizes[trial % 5];
    const bool tree = trial % 2 == 1, withBudget = trial % 3 != 0;
    const int32_t vocab = 1 + trial % 3;  // 1..3 token values: matches are common
    SCOPED_TRACE(::testing::Message()
                 << "B " << batch << " S " << s << " tree " << tree << " budget " << withBudget);
    const size_t n = size_t(batch) * s;
    std::uniform_int_distribution<int32_t> token(0, vocab - 1);
    I32 top(n), verify(n), parents(n), budget(batch);
    for (size_t i = 0; i < n; ++i) {
      top[i] = token(rng);
      verify[i] = token(rng);
      const int32_t node = static_cast<int32_t>(i % s);
      parents[i] = node == 0 ? -1 : std::uniform_int_distribution<int32_t>(0, node - 1)(rng);
    }
    for (auto& b : budget) b = std::uniform_int_distribution<int32_t>(-1, s + 1)(rng);

    I32 tokens = poisoned(n), nodes = poisoned(n), lengths = poisoned(batch);
    kernel::EagleAcceptParams p{.targetTopIds = top.data(),
                                .verifyTokenIds = verify.data(),
                                .treeParentIds = tree ? parents.data() : nullptr,
                                .remainingBudget = withBudget ? budget.data() : nullptr,
                                .acceptedTokens = tokens.data(),
                                .acceptedNodeIds = nodes.data(),
                                .acceptLengths = lengths.data(),
                                .batchSize = batch,
                                .verifySize = s};
    ref::eagleAccept(p);

    test::DeviceArray<int32_t> dTop(top), dVerify(verify), dParents(parents), dBudget(budget),
        d_tokens(n), dNodes(n), dLengths(batch);
    kernel::EagleAcceptParams q = p;
    q.targetTopIds = dTop.get();
    q.verifyTokenIds = dVerify.get();
    q.treeParentIds = tree ? dParents.get() : nullptr;
    q.remainingBudget = withBudget ? dBudget.get() : nullptr;
    q.acceptedTokens = d_tokens.get();
    q.acceptedNodeIds = dNodes.get();
    q.acceptLengths = dLengths.get();
    kernel::launchEagleAccept(q, nullptr);
    EXPECT_EQ(dLengths.download(), lengths);
    EXPECT_EQ(d_tokens.download(), tokens);
    EXPECT_EQ(dNodes.download(), nodes);
    for (int32_t l : lengths) totalAccepted += l;
    sequences += batch;
  }
  // The random cases must exercise multi-token paths, or they would not test the walk.
  EXPECT_GT(double(totalAccepted) / double(sequences), 1.5);
}

TEST(EagleAcceptGpu, ValidatesBeforeLaunching) {
  ES_SKIP_IF_NO_GPU();
  test::DeviceArray<int32_t> buf(16);
  kernel::EagleAcceptParams p{.targetTopIds = buf.get(),
                              .verifyTokenIds = buf.get(),
                              .acceptedTokens = buf.get(),
                              .acceptedNodeIds = buf.get(),
                              .acceptLengths = nullptr,
                              .batchSize = 1,
                              .verifySize = 4};
  EXPECT_THROW(kernel::launchEagleAccept(p, nullptr), InvalidArgument);
  p.batchSize = 0;
  kernel::launchEagleAccept(p, nullptr);
  EXPECT_EQ(buf.download(), poisoned(16));
}

}  // namespace
}  // namespace es
