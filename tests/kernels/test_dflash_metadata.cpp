// CPU checks of the DFlash draft-side metadata references (spec §2.3, §2.4) against the spec's
// examples and hand-computed cases (block sizes 1, 5, 16, 33), plus argument validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/errors.h"
#include "kernels/dflash_metadata.h"
#include "support/test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

using test::poisoned;

// ---------------------------------------------------------------- §2.3 proposal inputs

struct ProposalOut {
  I32 mask, posId, context, positions, qstart, qlen, past, seqlen, state;
  kernel::DFlashProposalInputsParams params(const I32& oldLens, const I32& deltaLens, int32_t bs,
                                            bool causal) {
    const size_t b = oldLens.size();
    mask = poisoned(b * bs * kernel::dflashMaskWords(bs));
    posId = poisoned(b * bs);
    positions = poisoned(b * bs);
    context = poisoned(b);
    qstart = poisoned(b + 1);
    qlen = poisoned(b);
    past = poisoned(b);
    seqlen = poisoned(b);
    state = I32(b, 42);
    kernel::DFlashProposalInputsParams p{.oldDraftCacheLengths = oldLens.data(),
                                         .deltaLengths = deltaLens.data(),
                                         .blockSize = bs,
                                         .packedAttentionMask = mask.data(),
                                         .attentionPosId = posId.data(),
                                         .contextLengths = context.data(),
                                         .positions = positions.data(),
                                         .queryStartOffsets = qstart.data(),
                                         .queryLengths = qlen.data(),
                                         .pastLengths = past.data(),
                                         .attentionSequenceLengths = seqlen.data(),
                                         .stateIndices = state.data(),
                                         .causalProposalMask = causal,
                                         .batchSize = static_cast<int32_t>(b)};
    return p;
  }
};

TEST(DFlashProposalInputsRef, SpecExampleBlockSize5) {
  const I32 oldLens = {10, 0}, deltaLens = {3, 7};  // T_b = {13, 7}
  for (const bool causal : {false, true}) {
    ProposalOut out;
    ref::dflashPrepareProposalInputs(out.params(oldLens, deltaLens, 5, causal));
    const I32 want_mask = causal ? I32{1, 3, 7, 15, 31, 1, 3, 7, 15, 31}
                                 : I32{31, 31, 31, 31, 31, 31, 31, 31, 31, 31};
    EXPECT_EQ(out.mask, want_mask) << "causal " << causal;
    EXPECT_EQ(out.posId, (I32{13, 14, 15, 16, 17, 7, 8, 9, 10, 11}));
    EXPECT_EQ(out.positions, (I32{13, 14, 15, 16, 17, 7, 8, 9, 10, 11}));
    EXPECT_EQ(out.context, (I32{18, 12}));
    EXPECT_EQ(out.seqlen, (I32{18, 12}));
    EXPECT_EQ(out.qstart, (I32{0, 5, 10}));
    EXPECT_EQ(out.qlen, (I32{5, 5}));
    EXPECT_EQ(out.past, (I32{13, 7}));
    EXPECT_EQ(out.state, (I32{42, 42}));  // accepted, left unchanged
  }
}

TEST(DFlashProposalInputsRef, BlockSizes1And16And33) {
  const I32 oldLens = {100}, deltaLens = {1};
  {
    ProposalOut out;
    ref::dflashPrepareProposalInputs(out.params(oldLens, deltaLens, 1, false));
    EXPECT_EQ(out.mask, I32{1});
    EXPECT_EQ(out.posId, I32{101});
    EXPECT_EQ(out.context, I32{102});
    EXPECT_EQ(out.qstart, (I32{0, 1}));
  }
  {
    ProposalOut bidi, causal;
    ref::dflashPrepareProposalInputs(bidi.params(oldLens, deltaLens, 16, false));
    ref::dflashPrepareProposalInputs(causal.params(oldLens, deltaLens, 16, true));
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(bidi.mask[i], 0xffff) << i;
      EXPECT_EQ(causal.mask[i], (1 << (i + 1)) - 1) << i;
      EXPECT_EQ(bidi.posId[i], 101 + i);
    }
    EXPECT_EQ(bidi.context, I32{117});
  }
  {
    // 33 columns: two words per row; word 1 holds column 32 in bit 0.
    ProposalOut bidi, causal;
    ref::dflashPrepareProposalInputs(bidi.params(oldLens, deltaLens, 33, false));
    ref::dflashPrepareProposalInputs(causal.params(oldLens, deltaLens, 33, true));
    ASSERT_EQ(bidi.mask.size(), 66u);
    for (int i = 0; i < 33; ++i) {
      EXPECT_EQ(bidi.mask[2 * i], -1) << i;
      EXPECT_EQ(bidi.mask[2 * i + 1], 1) << i;
    }
    EXPECT_EQ(causal.mask[0], 1);
    EXPECT_EQ(causal.mask[1], 0);
    EXPECT_EQ(causal.mask[2 * 30], 0x7fffffff);
    EXPECT_EQ(causal.mask[2 * 31], -1);
    EXPECT_EQ(causal.mask[2 * 31 + 1], 0);
    EXPECT_EQ(causal.mask[2 * 32], -1);
    EXPECT_EQ(causal.mask[2 * 32 + 1], 1);
    EXPECT_EQ(causal.qstart, (I32{0, 33}));
    EXPECT_EQ(causal.context, I32{134});
  }
}

TEST(DFlashProposalInputsRef, Validation) {
  const I32 oldLens = {1, 2}, deltaLens = {1, 1};
  using P = kernel::DFlashProposalInputsParams;
  auto expect = [&](auto mutate, const char* name) {
    ProposalOut out;
    P p = out.params(oldLens, deltaLens, 4, false);
    mutate(p);
    test::expectInvalidArgument([&] { ref::dflashPrepareProposalInputs(p); }, name);
  };
  expect([](P& p) { p.blockSize = 0; }, "blockSize");
  expect([](P& p) { p.blockSize = kernel::kDFlashMaxBlockSize + 1; }, "blockSize");
  expect([](P& p) { p.batchSize = -1; }, "batchSize");
  expect([](P& p) { p.oldDraftCacheLengths = nullptr; }, "oldDraftCacheLengths");
  expect([](P& p) { p.deltaLengths = nullptr; }, "deltaLengths");
  expect([](P& p) { p.packedAttentionMask = nullptr; }, "packedAttentionMask");
  expect([](P& p) { p.attentionPosId = nullptr; }, "attentionPosId");
  expect([](P& p) { p.contextLengths = nullptr; }, "contextLengths");
  expect([](P& p) { p.positions = nullptr; }, "positions");
  expect([](P& p) { p.queryStartOffsets = nullptr; }, "queryStartOffsets");
  expect([](P& p) { p.queryLengths = nullptr; }, "queryLengths");
  expect([](P& p) { p.pastLengths = nullptr; }, "pastLengths");
  expect([](P& p) { p.attentionSequenceLengths = nullptr; }, "attentionSequenceLengths");
  // stateIndices is unused: null is fine. B = 0 is a no-op (outputs stay poisoned).
  ProposalOut out;
  P p = out.params(oldLens, deltaLens, 4, false);
  p.stateIndices = nullptr;
  EXPECT_NO_THROW(ref::dflashPrepareProposalInputs(p));
  ProposalOut idle;
  p = idle.params(oldLens, deltaLens, 4, false);
  p.batchSize = 0;
  EXPECT_NO_THROW(ref::dflashPrepareProposalInputs(p));
  EXPECT_EQ(idle.qstart, poisoned(3));
}

// ---------------------------------------------------------------- §2.4 delta metadata

TEST(DFlashDeltaMetadataRef, PaddedTokenMajorRows) {
  const I32 oldLens = {5, 12, 0}, deltaLens = {2, 0, 3};
  I32 positions = poisoned(9), owners = poisoned(9);
  kernel::DFlashDeltaMetadataParams p{.oldDraftCacheLengths = oldLens.data(),
                                      .deltaLengths = deltaLens.data(),
                                      .deltaWidth = 3,
                                      .deltaPositions = positions.data(),
                                      .deltaTokenToSequence = owners.data(),
                                      .batchSize = 3};
  ref::dflashPrepareDeltaMetadata(p);
  EXPECT_EQ(positions, (I32{5, 6, -1, -1, -1, -1, 0, 1, 2}));
  EXPECT_EQ(owners, (I32{0, 0, -1, -1, -1, -1, 2, 2, 2}));

  using P = kernel::DFlashDeltaMetadataParams;
  auto expect = [&](auto mutate, const char* name) {
    P q = p;
    mutate(q);
    test::expectInvalidArgument([&] { ref::dflashPrepareDeltaMetadata(q); }, name);
  };
  expect([](P& q) { q.deltaWidth = -1; }, "deltaWidth");
  expect([](P& q) { q.batchSize = -1; }, "batchSize");
  expect([](P& q) { q.deltaWidth = 1 << 30; }, "deltaWidth");  // 3 * 2^30 rows overflow int32
  expect([](P& q) { q.oldDraftCacheLengths = nullptr; }, "oldDraftCacheLengths");
  expect([](P& q) { q.deltaLengths = nullptr; }, "deltaLengths");
  expect([](P& q) { q.deltaPositions = nullptr; }, "deltaPositions");
  expect([](P& q) { q.deltaTokenToSequence = nullptr; }, "deltaTokenToSequence");
  P q = p;
  q.deltaWidth = 0;
  q.deltaPositions = nullptr;
  EXPECT_NO_THROW(ref::dflashPrepareDeltaMetadata(q));
}

}  // namespace
}  // namespace es
