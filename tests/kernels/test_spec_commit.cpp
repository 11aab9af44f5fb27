// CPU reference of the step commit: hand-made cases for both count conventions, the plain
// (counts == null) case, the clamp of corrupt counts, aliasing, and argument errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/errors.h"
#include "kernels/spec_commit.h"
#include "support/test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

struct Outputs {
  I32 emit = test::poisoned<int32_t>(3), lengths = test::poisoned<int32_t>(3),
      last = test::poisoned<int32_t>(3);
  std::vector<int64_t> anchors = test::poisoned<int64_t>(3);
};

kernel::SpecCommitParams params(const I32& counts, int32_t offset, const I32& tokens,
                                const I32& lengths, Outputs& o, int32_t width) {
  kernel::SpecCommitParams p;
  p.counts = counts.empty() ? nullptr : counts.data();
  p.countOffset = offset;
  p.tokens = tokens.data();
  p.lengths = lengths.data();
  p.emitCounts = o.emit.data();
  p.newLengths = o.lengths.data();
  p.anchorPositions = o.anchors.data();
  p.lastTokens = o.last.data();
  p.batchSize = static_cast<int32_t>(lengths.size());
  p.width = width;
  return p;
}

TEST(SpecCommit, AcceptLengthsAdvanceLengthsAndPickTheLastEmittedToken) {
  const I32 tokens = {10, 11, 12, 13, 20, 21, -1, -1, 30, -1, -1, -1};
  const I32 lengths = {5, 128, 0};
  Outputs o;
  ref::specCommit(params({4, 2, 1}, 0, tokens, lengths, o, 4));
  EXPECT_EQ(o.emit, (I32{4, 2, 1}));
  EXPECT_EQ(o.lengths, (I32{9, 130, 1}));
  EXPECT_EQ(o.anchors, (std::vector<int64_t>{9, 130, 1}));
  EXPECT_EQ(o.last, (I32{13, 21, 30}));
}

TEST(SpecCommit, NumAcceptedTakesTheResidualOrBonusTokenToo) {
  // specVerify: numAccepted drafts, then one residual/bonus token.
  const I32 tokens = {7, 8, 9, 4, 5, -1, 6, -1, -1};
  Outputs o;
  ref::specCommit(params({2, 1, 0}, 1, tokens, {3, 4, 5}, o, 3));
  EXPECT_EQ(o.emit, (I32{3, 2, 1}));
  EXPECT_EQ(o.lengths, (I32{6, 6, 6}));
  EXPECT_EQ(o.last, (I32{9, 5, 6}));
}

TEST(SpecCommit, PlainDecodingEmitsOneTokenPerSequence) {
  Outputs o;
  ref::specCommit(params({}, 0, {42, 43, 44}, {1, 2, 3}, o, 1));
  EXPECT_EQ(o.emit, (I32{1, 1, 1}));
  EXPECT_EQ(o.lengths, (I32{2, 3, 4}));
  EXPECT_EQ(o.last, (I32{42, 43, 44}));
}

TEST(SpecCommit, CorruptCountsAreClampedIntoTheRow) {
  const I32 tokens = {1, 2, 3, 4, 5, 6};
  Outputs o;
  ref::specCommit(params({0, 9, -4}, 0, tokens, {0, 0, 0}, o, 2));
  EXPECT_EQ(o.emit, (I32{1, 2, 1}));
  EXPECT_EQ(o.last, (I32{1, 4, 5}));
}

TEST(SpecCommit, EmitCountsMayOverwriteAcceptLengthsInPlace) {
  I32 counts = {3, 1};
  const I32 tokens = {1, 2, 3, 4, 5, 6}, lengths = {0, 10};
  Outputs o;
  kernel::SpecCommitParams p = params(counts, 0, tokens, lengths, o, 3);
  p.emitCounts = counts.data();
  ref::specCommit(p);
  EXPECT_EQ(counts, (I32{3, 1}));
  EXPECT_EQ(o.last[0], 3);
  EXPECT_EQ(o.last[1], 4);
}

TEST(SpecCommit, BadArgumentsAreClearErrors) {
  Outputs o;
  const I32 tokens = {1, 2}, lengths = {0, 0};
  kernel::SpecCommitParams p = params({1, 1}, 0, tokens, lengths, o, 1);
  p.width = 0;
  EXPECT_THROW(ref::specCommit(p), InvalidArgument);
  p = params({1, 1}, 2, tokens, lengths, o, 1);
  EXPECT_THROW(ref::specCommit(p), InvalidArgument);
  p = params({1, 1}, 0, tokens, lengths, o, 1);
  p.newLengths = const_cast<int32_t*>(lengths.data());
  EXPECT_THROW(ref::specCommit(p), InvalidArgument);
  p = params({1, 1}, 0, tokens, lengths, o, 1);
  p.lastTokens = nullptr;
  EXPECT_THROW(ref::specCommit(p), InvalidArgument);
  p = params({1, 1}, 0, tokens, lengths, o, 1);
  p.batchSize = -1;
  EXPECT_THROW(ref::specCommit(p), InvalidArgument);
  p.batchSize = 0;  // no-op: nothing read or written
  p.tokens = nullptr;
  EXPECT_NO_THROW(ref::specCommit(p));
}

}  // namespace
}  // namespace es
