// CPU checks of the greedy EAGLE accept reference (spec §2 "Accept") on hand-built linear chains
// and trees: partial, full (bonus) and no acceptance, budget clamping, sibling choice, ties, and
// argument validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "kernels/eagle_accept.h"
#include "support/test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

// One accept problem: per-node target top-1 and verify tokens [B * S], optional parents [B * S]
// and budgets [B]; run() poisons the outputs and calls the reference.
struct AcceptCase {
  AcceptCase(I32 topIds, I32 verifyIds, I32 parentIds, I32 budgets, int32_t batchSize = 1)
      : top(std::move(topIds)),
        verify(std::move(verifyIds)),
        parents(std::move(parentIds)),
        budget(std::move(budgets)),
        batch(batchSize) {}
  I32 top, verify, parents, budget;
  I32 tokens, nodes, lengths;
  int32_t batch;
  void run() {
    const int32_t s = static_cast<int32_t>(top.size()) / batch;
    tokens.assign(top.size(), test::poison_i32());
    nodes.assign(top.size(), test::poison_i32());
    lengths.assign(batch, test::poison_i32());
    ref::eagleAccept(params(batch, s));
  }
  kernel::EagleAcceptParams params(int32_t b, int32_t s) {
    kernel::EagleAcceptParams p;
    p.targetTopIds = top.data();
    p.verifyTokenIds = verify.data();
    p.treeParentIds = parents.empty() ? nullptr : parents.data();
    p.remainingBudget = budget.empty() ? nullptr : budget.data();
    p.acceptedTokens = tokens.data();
    p.acceptedNodeIds = nodes.data();
    p.acceptLengths = lengths.data();
    p.batchSize = b;
    p.verifySize = s;
    return p;
  }
};

TEST(EagleAcceptRef, LinearChainPartialFullAndNone) {
  // verify [anchor 10, 101, 102, 103]; top-1 at node 0 = 101 (match), node 1 = 102 (match),
  // node 2 = 555 != 103: two drafted tokens accepted plus the correction 555.
  AcceptCase partial{{101, 102, 555, 777}, {10, 101, 102, 103}, {}, {}};
  partial.run();
  EXPECT_EQ(partial.lengths, I32{3});
  EXPECT_EQ(partial.tokens, (I32{101, 102, 555, -1}));
  EXPECT_EQ(partial.nodes, (I32{0, 1, 2, -1}));

  AcceptCase full{{101, 102, 103, 104}, {10, 101, 102, 103}, {}, {}};
  full.run();
  EXPECT_EQ(full.lengths, I32{4});
  EXPECT_EQ(full.tokens, (I32{101, 102, 103, 104}));  // 104 = bonus
  EXPECT_EQ(full.nodes, (I32{0, 1, 2, 3}));

  AcceptCase none{{7, 102, 103, 104}, {10, 101, 102, 103}, {}, {}};
  none.run();
  EXPECT_EQ(none.lengths, I32{1});
  EXPECT_EQ(none.tokens, (I32{7, -1, -1, -1}));
  EXPECT_EQ(none.nodes, (I32{0, -1, -1, -1}));

  // Explicit linear parents give the same answer as the implicit chain.
  AcceptCase explicitChain{{101, 102, 555, 777}, {10, 101, 102, 103}, {-1, 0, 1, 2}, {}};
  explicitChain.run();
  EXPECT_EQ(explicitChain.tokens, (I32{101, 102, 555, -1}));
}

TEST(EagleAcceptRef, BudgetClampsTheLength) {
  AcceptCase two{{101, 102, 103, 104}, {10, 101, 102, 103}, {}, {2}};
  two.run();
  EXPECT_EQ(two.lengths, I32{2});
  EXPECT_EQ(two.tokens, (I32{101, 102, -1, -1}));
  EXPECT_EQ(two.nodes, (I32{0, 1, -1, -1}));
  AcceptCase zero{{101, 102, 103, 104}, {10, 101, 102, 103}, {}, {0}};
  zero.run();
  EXPECT_EQ(zero.lengths, I32{0});
  EXPECT_EQ(zero.tokens, (I32{-1, -1, -1, -1}));
  AcceptCase big{{101, 102, 555, 104}, {10, 101, 102, 103}, {}, {100}};
  big.run();
  EXPECT_EQ(big.lengths, I32{3});
}

TEST(EagleAcceptRef, TreeFollowsTheMatchingChild) {
  // Tree (node(token)): 0 -> {1(5), 2(6)}, 1 -> {3(7)}, 2 -> {4(8), 5(9)}.
  AcceptCase tree{{6, 0, 9, 0, 0, 42}, {1, 5, 6, 7, 8, 9}, {-1, 0, 0, 1, 2, 2}, {}};
  tree.run();
  EXPECT_EQ(tree.lengths, I32{3});
  EXPECT_EQ(tree.nodes, (I32{0, 2, 5, -1, -1, -1}));
  EXPECT_EQ(tree.tokens, (I32{6, 9, 42, -1, -1, -1}));

  // Equal-token siblings: the lower node id wins.
  AcceptCase tie{{5, 11, 12}, {1, 5, 5}, {-1, 0, 0}, {}};
  tie.run();
  EXPECT_EQ(tie.nodes, (I32{0, 1, -1}));
  EXPECT_EQ(tie.tokens, (I32{5, 11, -1}));

  // A matching token under the wrong parent is not a child: node 2 (token 6) hangs off node 1.
  AcceptCase trap{{6, 9, 0, 8}, {1, 5, 6, 6}, {-1, 0, 1, 0}, {}};
  trap.run();
  EXPECT_EQ(trap.nodes, (I32{0, 3, -1, -1}));
  EXPECT_EQ(trap.tokens, (I32{6, 8, -1, -1}));
}

TEST(EagleAcceptRef, BatchOfTwoAndCyclicParentsTerminate) {
  AcceptCase batch{{101, 102, 555, 7, 8, 9}, {10, 101, 102, 20, 8, 1}, {}, {5, 1}, 2};
  batch.run();
  EXPECT_EQ(batch.lengths, (I32{3, 1}));
  EXPECT_EQ(batch.tokens, (I32{101, 102, 555, 7, -1, -1}));
  EXPECT_EQ(batch.nodes, (I32{0, 1, 2, 0, -1, -1}));

  // Malformed parents (1 <-> 2 cycle): at most S - 1 moves, no hang.
  AcceptCase cyc{{5, 5, 5}, {0, 5, 5}, {-1, 2, 1}, {}};
  cyc.run();
  EXPECT_EQ(cyc.lengths, I32{1});
}

TEST(EagleAcceptRef, Validation) {
  AcceptCase c{{1, 2}, {1, 2}, {}, {}};
  c.tokens.assign(2, 0);
  c.nodes.assign(2, 0);
  c.lengths.assign(1, 0);
  using P = kernel::EagleAcceptParams;
  auto expect = [&](auto mutate, const char* name) {
    P p = c.params(1, 2);
    mutate(p);
    try {
      ref::eagleAccept(p);
      ADD_FAILURE() << "expected es::InvalidArgument for " << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos)
          << e.what();
    }
  };
  expect([](P& p) { p.verifySize = 0; }, "verifySize");
  expect([](P& p) { p.batchSize = -1; }, "batchSize");
  expect([](P& p) { p.targetTopIds = nullptr; }, "targetTopIds");
  expect([](P& p) { p.verifyTokenIds = nullptr; }, "verifyTokenIds");
  expect([](P& p) { p.acceptedTokens = nullptr; }, "acceptedTokens");
  expect([](P& p) { p.acceptedNodeIds = nullptr; }, "acceptedNodeIds");
  expect([](P& p) { p.acceptLengths = nullptr; }, "acceptLengths");
  P p = c.params(0, 2);
  p.targetTopIds = nullptr;
  EXPECT_NO_THROW(ref::eagleAccept(p));
}

}  // namespace
}  // namespace es
