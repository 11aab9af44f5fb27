// CPU reference of the replay proposal: rows copy the recorded run at the block's positions,
// row 0 is the anchor, positions outside the record give 0, corruption follows the rate.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/errors.h"
#include "kernels/replay_proposal.h"
#include "support/test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

TEST(ReplayProposal, CopiesTheRecordAtTheBlockPositions) {
  const I32 recorded = {100, 101, 102, 103, 104, 105, 200, 201, 202, 203, -7, -7};
  const I32 lengths = {6, 4};
  const I32 anchors = {9, 8};
  const I32 positions = {3, 4, 5, 6, 1, 2, 3, 4};  // T_0 = 3, T_1 = 1
  I32 out = test::poisoned<int32_t>(8);
  kernel::ReplayProposalParams p{.recorded = recorded.data(),
                                 .recordedLengths = lengths.data(),
                                 .stride = 6,
                                 .anchors = anchors.data(),
                                 .positions = positions.data(),
                                 .out = out.data(),
                                 .batchSize = 2,
                                 .blockSize = 4,
                                 .vocab = 1000};
  ref::replayProposal(p);
  // Row 0 is the anchor; position 6 of row 0 and 4 of row 1 are past the record.
  EXPECT_EQ(out, (I32{9, 104, 105, 0, 8, 202, 203, 0}));
}

TEST(ReplayProposal, CorruptionRateIsHonouredAndDeterministic) {
  const int32_t n = 4000;
  I32 recorded(n), positions(n), anchors = {0};
  for (int32_t i = 0; i < n; ++i) recorded[i] = i % 50;
  for (int32_t i = 0; i < n; ++i) positions[i] = i;
  const I32 lengths = {n};
  kernel::ReplayProposalParams p{.recorded = recorded.data(),
                                 .recordedLengths = lengths.data(),
                                 .stride = n,
                                 .anchors = anchors.data(),
                                 .positions = positions.data(),
                                 .batchSize = 1,
                                 .blockSize = n,
                                 .vocab = 50,
                                 .corruptRate = 0.25f,
                                 .seed = 3};
  I32 a(n), b(n);
  p.out = a.data();
  ref::replayProposal(p);
  p.out = b.data();
  ref::replayProposal(p);
  EXPECT_EQ(a, b);
  int32_t corrupted = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (a[i] != recorded[i]) {
      ++corrupted;
      EXPECT_EQ(a[i], (recorded[i] + 1) % 50) << i;
    }
  }
  EXPECT_GT(corrupted, n / 4 - 150);  // binomial(3999, 0.25): sd ≈ 27
  EXPECT_LT(corrupted, n / 4 + 150);
  p.corruptRate = 0.0f;
  ref::replayProposal(p);
  for (int32_t i = 1; i < n; ++i) EXPECT_EQ(b[i], recorded[i]);
}

TEST(ReplayProposal, BadArgumentsAreClearErrors) {
  kernel::ReplayProposalParams p{.stride = 4, .batchSize = 1, .blockSize = 4, .vocab = 10};
  EXPECT_THROW(ref::replayProposal(p), InvalidArgument);  // null pointers
  p.corruptRate = 1.5f;
  EXPECT_THROW(ref::replayProposal(p), InvalidArgument);
  p.corruptRate = 0.0f;
  p.blockSize = 0;
  EXPECT_THROW(ref::replayProposal(p), InvalidArgument);
}

}  // namespace
}  // namespace es
