// The adaptive verify-width rule (runtime/speculation_policy.h) on synthetic step costs and
// acceptance: it picks the width of the most tokens per second, turns speculation off when the
// drafts are rejected or the verify is compute-bound, comes back when acceptance rises, and
// explores on a fixed schedule.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "runtime/speculation_policy.h"

namespace es::runtime {
namespace {

// A synthetic server: a step of B sequences at width W takes cost(B, W) seconds and each
// sequence accepts accepted(W) drafts (in [0, W − 1]).
struct Server {
  std::function<double(int32_t, int32_t)> cost;
  std::function<int32_t(int32_t)> accepted;
};

// `steps` choose/observe rounds at batch B; returns the widths chosen.
std::vector<int32_t> drive(SpeculationPolicy& policy, const Server& server, int32_t B,
                           int32_t steps) {
  std::vector<int32_t> chosen;
  for (int32_t i = 0; i < steps; ++i) {
    const int32_t W = policy.choose(B);
    const std::vector<int32_t> counts(static_cast<size_t>(B), 1 + server.accepted(W));
    policy.observe(B, W, server.cost(B, W), counts.data());
    chosen.push_back(W);
  }
  return chosen;
}

// The width the policy settled on for batch B: its choice outside the explorations.
int32_t settled(const SpeculationPolicy& policy, int32_t B) { return policy.bestWidth(B); }

TEST(SpeculationPolicy, WidthsArePowersOfTwoAndTheLargest) {
  EXPECT_EQ(SpeculationPolicy({.maxWidth = 16}).widths(), (std::vector<int32_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(SpeculationPolicy({.maxWidth = 6}).widths(), (std::vector<int32_t>{1, 2, 4, 6}));
  EXPECT_EQ(SpeculationPolicy({.maxWidth = 2}).widths(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(SpeculationPolicy({.maxWidth = 1}).widths(), (std::vector<int32_t>{1}));
}

TEST(SpeculationPolicy, BadOptionsNameTheOption) {
  auto expectNamed = [](SpeculationPolicyOptions o, const std::string& name) {
    try {
      SpeculationPolicy p(o);
      ADD_FAILURE() << "accepted a bad " << name;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expectNamed({.maxWidth = 0}, "maxWidth");
  expectNamed({.maxBatch = 0}, "maxBatch");
  expectNamed({.computeBoundRows = 0}, "computeBoundRows");
  expectNamed({.explorePeriod = -1}, "explorePeriod");
  expectNamed({.costSmoothing = 0.0}, "costSmoothing");
  expectNamed({.acceptDecay = 1.5}, "acceptDecay");
  SpeculationPolicy p({.maxWidth = 4, .maxBatch = 8});
  EXPECT_THROW(p.choose(9), InvalidArgument);
  EXPECT_THROW(p.choose(0), InvalidArgument);
  EXPECT_THROW(p.stepCost(1, 3), InvalidArgument);  // not one of the widths
}

// Acceptance counts of width 4 with accepted drafts uniform on {0, 1, 2, 3}: the conditional
// estimates give P(accepted >= k) = 3/4, 1/2, 1/4, and E_4 = 2.5; depths no step observed stay at
// the prior.
TEST(SpeculationPolicy, AcceptanceFromCensoredCounts) {
  SpeculationPolicy p({.maxWidth = 8, .maxBatch = 4});
  EXPECT_DOUBLE_EQ(p.acceptAtLeast(0), 1.0);
  EXPECT_DOUBLE_EQ(p.acceptAtLeast(1), SpeculationPolicy::kPriorAccept);
  const std::vector<int32_t> counts = {1, 2, 3, 4};
  for (int32_t i = 0; i < 200; ++i) p.observe(4, 4, 1e-3, counts.data());
  EXPECT_NEAR(p.acceptAtLeast(1), 0.75, 0.01);
  EXPECT_NEAR(p.acceptAtLeast(2), 0.50, 0.01);
  EXPECT_NEAR(p.acceptAtLeast(3), 0.25, 0.01);
  EXPECT_NEAR(p.acceptAtLeast(4), 0.25 * SpeculationPolicy::kPriorAccept, 0.01);  // unobserved
  EXPECT_DOUBLE_EQ(p.acceptAtLeast(8), 0.0);  // beyond the widest verify
  EXPECT_DOUBLE_EQ(p.expectedTokens(1), 1.0);
  EXPECT_NEAR(p.expectedTokens(4), 2.5, 0.03);
  // A plain step observes no acceptance.
  const std::vector<int32_t> ones = {1, 1, 1, 1};
  for (int32_t i = 0; i < 50; ++i) p.observe(4, 1, 1e-3, ones.data());
  EXPECT_NEAR(p.acceptAtLeast(1), 0.75, 0.01);
}

TEST(SpeculationPolicy, StepCostsAreMeasuredPerBucketElseScaledByRows) {
  SpeculationPolicy p({.maxWidth = 16, .maxBatch = 64, .computeBoundRows = 32});
  EXPECT_FALSE(p.measured(1, 4));
  EXPECT_DOUBLE_EQ(p.stepCost(1, 4), 32.0);  // nothing measured: the row model, max(B·W, 32)
  EXPECT_DOUBLE_EQ(p.stepCost(1, 16), 32.0);
  EXPECT_DOUBLE_EQ(p.stepCost(16, 16), 256.0);
  const std::vector<int32_t> counts(64, 1);
  p.observe(16, 4, 2.0, counts.data());  // bucket 9–16
  EXPECT_TRUE(p.measured(9, 4));
  EXPECT_FALSE(p.measured(8, 4));  // another bucket
  EXPECT_DOUBLE_EQ(p.stepCost(16, 4), 2.0);
  EXPECT_DOUBLE_EQ(p.stepCost(16, 16), 2.0 * 256.0 / 64.0);  // scaled from the nearest, W = 4
  EXPECT_DOUBLE_EQ(p.stepCost(16, 1), 2.0 * 32.0 / 64.0);
  p.observe(16, 4, 4.0, counts.data());  // EWMA, weight costSmoothing = 0.25
  EXPECT_DOUBLE_EQ(p.stepCost(16, 4), 2.5);
  p.observe(16, 4, 100.0, counts.data());  // clamped to twice the estimate
  EXPECT_DOUBLE_EQ(p.stepCost(16, 4), 2.5 + 0.25 * (5.0 - 2.5));
  p.observe(16, 8, -1.0, counts.data());  // an unrepresentative time is not a sample
  EXPECT_FALSE(p.measured(16, 8));
}

// The same drafts (every one accepted) on a server whose step costs one decode until 64 rows,
// then grows with the rows: batch 1 verifies the widest block, batch 8 the 8 rows that still
// cost one decode, batch 64 (compute-bound: a row costs a row) does not speculate.
TEST(SpeculationPolicy, TheBatchSizeDecidesUnderTheSameAcceptance) {
  const Server server{.cost = [](int32_t B, int32_t W) { return 1e-3 * std::max(B * W, 64) / 64; },
                      .accepted = [](int32_t W) { return W - 1; }};
  for (const auto& [B, want] : std::vector<std::pair<int32_t, int32_t>>{{1, 16}, {8, 8}, {64, 1}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B);
    // A prior that believes every row costs (knee 1): the measurements must overrule it.
    SpeculationPolicy p(
        {.maxWidth = 16, .maxBatch = 64, .computeBoundRows = 1, .explorePeriod = 4});
    drive(p, server, B, 200);
    EXPECT_EQ(settled(p, B), want);
    // Steady state: every choice but the explorations is the best width.
    const std::vector<int32_t> tail = drive(p, server, B, 40);
    int32_t best = 0;
    for (int32_t w : tail) best += w == want;
    EXPECT_EQ(best, 30);  // 40 choices, every 4th explores
  }
}

// Drafts that are always rejected: speculation turns off (W = 1) although it started on; when
// the drafts become good again, the explorations at W = 2 see it and the width climbs back to
// the block.
TEST(SpeculationPolicy, OffWithoutAcceptanceAndBackWhenItRises) {
  bool good = false;
  // A verify of W rows costs about one decode step (plus 1 % a row for the proposal and the
  // wider accept), as on a GPU at a small batch.
  const Server server{.cost = [](int32_t, int32_t W) { return 1e-3 * (1.0 + 0.01 * W); },
                      .accepted = [&](int32_t W) { return good ? W - 1 : 0; }};
  SpeculationPolicy p({.maxWidth = 16, .maxBatch = 4, .computeBoundRows = 64, .explorePeriod = 8});
  // The prior: a draft of unknown quality and verifies for free: it speculates (W = 8; 16
  // adds less than the margin at a prior acceptance of 1/2).
  EXPECT_EQ(p.choose(2), 8);
  drive(p, server, 2, 100);
  EXPECT_EQ(settled(p, 2), 1);
  EXPECT_LT(p.expectedTokens(16), 1.1);
  // Off: plain steps but for an exploration at W = 2 every 8th step.
  const std::vector<int32_t> off = drive(p, server, 2, 16);
  std::vector<size_t> explored;
  for (size_t i = 0; i < off.size(); ++i) {
    if (off[i] == 1) continue;
    explored.push_back(i);
    EXPECT_EQ(off[i], 2);
  }
  ASSERT_EQ(explored.size(), 2u);
  EXPECT_EQ(explored[1] - explored[0], 8u);
  good = true;
  drive(p, server, 2, 200);
  EXPECT_EQ(settled(p, 2), 16);
  EXPECT_GT(p.expectedTokens(16), 14.0);
}

// Every explorePeriod-th choice of a bucket runs a neighbour of the best width: the next wider
// one, then the next narrower one, alternately (the other one at either end of widths()); every
// 4th while a neighbour has fewer than 3 step times.
TEST(SpeculationPolicy, ExplorationSchedule) {
  SpeculationPolicy p({.maxWidth = 16, .maxBatch = 8, .explorePeriod = 4});
  // Costs: widths up to 4 cost 1 ms, wider ones 10 ms; every draft accepted: best W = 4.
  for (int32_t w : {1, 2, 4, 8, 16}) {
    const std::vector<int32_t> counts = {w};
    p.observe(1, w, w <= 4 ? 1e-3 : 1e-2, counts.data());
  }
  ASSERT_EQ(p.bestWidth(1), 4);
  std::vector<int32_t> chosen;
  for (int32_t i = 0; i < 12; ++i) chosen.push_back(p.choose(1));
  EXPECT_EQ(chosen, (std::vector<int32_t>{4, 4, 4, 8, 4, 4, 4, 2, 4, 4, 4, 8}));
  // Another bucket counts its own choices.
  EXPECT_EQ(p.choose(8), p.bestWidth(8));
  // Never exploring: always the best.
  SpeculationPolicy never({.maxWidth = 16, .maxBatch = 8, .explorePeriod = 0});
  for (int32_t i = 0; i < 20; ++i) EXPECT_EQ(never.choose(1), never.bestWidth(1));
  // Warm-up: a fresh policy with explorePeriod 32 explores every 4th choice until the best
  // width's neighbours have 3 step times each, then every 32nd.
  SpeculationPolicy fresh({.maxWidth = 4, .maxBatch = 1, .explorePeriod = 32});
  const std::vector<int32_t> rejected = {1};
  for (int32_t w : {1, 2, 4}) fresh.observe(1, w, w == 1 ? 1e-3 : 2e-3, rejected.data());
  ASSERT_EQ(fresh.bestWidth(1), 1);  // every draft rejected: plain
  std::vector<int32_t> warm;
  for (int32_t i = 0; i < 12; ++i) {
    const int32_t w = fresh.choose(1);
    warm.push_back(w);
    if (w != 1) fresh.observe(1, w, 2e-3, rejected.data());
  }
  EXPECT_EQ(warm, (std::vector<int32_t>{1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1}));
  for (int32_t i = 12; i < 64; ++i) {
    const int32_t w = fresh.choose(1);
    EXPECT_EQ(w, (i + 1) % 32 == 0 ? 2 : 1) << "choice " << i + 1;
  }
  // A single width has nothing to explore.
  SpeculationPolicy one({.maxWidth = 1, .maxBatch = 8, .explorePeriod = 1});
  for (int32_t i = 0; i < 5; ++i) EXPECT_EQ(one.choose(3), 1);
}

}  // namespace
}  // namespace es::runtime
