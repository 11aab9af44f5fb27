// CPU checks of the DFlash draft-side metadata references (spec §2.3–§2.6) against the spec's
// examples and hand-computed cases (block sizes 1, 5, 16, 33), plus argument validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
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
  I32 mask, pos_id, context, positions, qstart, qlen, past, seqlen, state;
  kernel::DFlashProposalInputsParams params(const I32& old_lens, const I32& delta_lens, int32_t bs,
                                            bool causal) {
    const size_t b = old_lens.size();
    mask = poisoned(b * bs * kernel::dflashMaskWords(bs));
    pos_id = poisoned(b * bs);
    positions = poisoned(b * bs);
    context = poisoned(b);
    qstart = poisoned(b + 1);
    qlen = poisoned(b);
    past = poisoned(b);
    seqlen = poisoned(b);
    state = I32(b, 42);
    kernel::DFlashProposalInputsParams p;
    p.oldDraftCacheLengths = old_lens.data();
    p.deltaLengths = delta_lens.data();
    p.blockSize = bs;
    p.packedAttentionMask = mask.data();
    p.attentionPosId = pos_id.data();
    p.contextLengths = context.data();
    p.positions = positions.data();
    p.queryStartOffsets = qstart.data();
    p.queryLengths = qlen.data();
    p.pastLengths = past.data();
    p.attentionSequenceLengths = seqlen.data();
    p.stateIndices = state.data();
    p.causalProposalMask = causal;
    p.batchSize = static_cast<int32_t>(b);
    return p;
  }
};

TEST(DFlashProposalInputsRef, SpecExampleBlockSize5) {
  const I32 old_lens = {10, 0}, delta_lens = {3, 7};  // T_b = {13, 7}
  for (const bool causal : {false, true}) {
    ProposalOut out;
    ref::dflashPrepareProposalInputs(out.params(old_lens, delta_lens, 5, causal));
    const I32 want_mask = causal ? I32{1, 3, 7, 15, 31, 1, 3, 7, 15, 31}
                                 : I32{31, 31, 31, 31, 31, 31, 31, 31, 31, 31};
    EXPECT_EQ(out.mask, want_mask) << "causal " << causal;
    EXPECT_EQ(out.pos_id, (I32{13, 14, 15, 16, 17, 7, 8, 9, 10, 11}));
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
  const I32 old_lens = {100}, delta_lens = {1};
  {
    ProposalOut out;
    ref::dflashPrepareProposalInputs(out.params(old_lens, delta_lens, 1, false));
    EXPECT_EQ(out.mask, I32{1});
    EXPECT_EQ(out.pos_id, I32{101});
    EXPECT_EQ(out.context, I32{102});
    EXPECT_EQ(out.qstart, (I32{0, 1}));
  }
  {
    ProposalOut bidi, causal;
    ref::dflashPrepareProposalInputs(bidi.params(old_lens, delta_lens, 16, false));
    ref::dflashPrepareProposalInputs(causal.params(old_lens, delta_lens, 16, true));
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(bidi.mask[i], 0xffff) << i;
      EXPECT_EQ(causal.mask[i], (1 << (i + 1)) - 1) << i;
      EXPECT_EQ(bidi.pos_id[i], 101 + i);
    }
    EXPECT_EQ(bidi.context, I32{117});
  }
  {
    // 33 columns: two words per row; word 1 holds column 32 in bit 0.
    ProposalOut bidi, causal;
    ref::dflashPrepareProposalInputs(bidi.params(old_lens, delta_lens, 33, false));
    ref::dflashPrepareProposalInputs(causal.params(old_lens, delta_lens, 33, true));
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
  const I32 old_lens = {1, 2}, delta_lens = {1, 1};
  using P = kernel::DFlashProposalInputsParams;
  auto expect = [&](auto mutate, const char* name) {
    ProposalOut out;
    P p = out.params(old_lens, delta_lens, 4, false);
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
  P p = out.params(old_lens, delta_lens, 4, false);
  p.stateIndices = nullptr;
  EXPECT_NO_THROW(ref::dflashPrepareProposalInputs(p));
  ProposalOut idle;
  p = idle.params(old_lens, delta_lens, 4, false);
  p.batchSize = 0;
  EXPECT_NO_THROW(ref::dflashPrepareProposalInputs(p));
  EXPECT_EQ(idle.qstart, poisoned(3));
}

// ---------------------------------------------------------------- §2.4 delta metadata

TEST(DFlashDeltaMetadataRef, PaddedTokenMajorRows) {
  const I32 old_lens = {5, 12, 0}, delta_lens = {2, 0, 3};
  I32 positions = poisoned(9), owners = poisoned(9);
  kernel::DFlashDeltaMetadataParams p;
  p.oldDraftCacheLengths = old_lens.data();
  p.deltaLengths = delta_lens.data();
  p.deltaWidth = 3;
  p.deltaPositions = positions.data();
  p.deltaTokenToSequence = owners.data();
  p.batchSize = 3;
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

// ---------------------------------------------------------------- §2.5 gather delta rope

struct GatherCase {
  GatherCase(I32 pos, I32 own, I32 st) : positions(std::move(pos)), owners(std::move(own)), state(std::move(st)) {}
  std::vector<float> source, output;
  I32 positions, owners, state;
  kernel::DFlashGatherDeltaRopeParams params(int32_t rows, int32_t capacity, int32_t rot,
                                             int32_t batch = 2) {
    source.resize(size_t(rows) * capacity * rot);
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t pos = 0; pos < capacity; ++pos)
        for (int32_t c = 0; c < rot; ++c)
          source[(size_t(r) * capacity + pos) * rot + c] = float(r * 100 + pos * 10 + c);
    output.assign(positions.size() * rot, -12345.0f);
    kernel::DFlashGatherDeltaRopeParams p;
    p.source = source.data();
    p.output = output.data();
    p.deltaPositions = positions.data();
    p.deltaTokenToSequence = owners.data();
    p.stateIndices = state.empty() ? nullptr : state.data();
    p.numDeltaTokens = static_cast<int32_t>(positions.size());
    p.batchSize = batch;
    p.sourceRows = rows;
    p.cacheCapacity = capacity;
    p.rotaryDim = rot;
    return p;
  }
};

TEST(DFlashGatherDeltaRopeRef, SpecExample) {
  GatherCase g{{1, -1, 2, 3}, {0, -1, 1, 1}, {2, 0}};
  ref::dflashGatherDeltaRope(g.params(3, 4, 2));
  EXPECT_EQ(g.output, (std::vector<float>{210, 211, 0, 0, 20, 21, 30, 31}));
}

TEST(DFlashGatherDeltaRopeRef, SingleSourceRowAndOutOfRangeZeroes) {
  {
    // sourceRows == 1: row 0 for every valid owner, stateIndices not needed.
    GatherCase g{{1, -1, 2, 3}, {0, -1, 1, 1}, {}};
    ref::dflashGatherDeltaRope(g.params(1, 4, 2));
    EXPECT_EQ(g.output, (std::vector<float>{10, 11, 0, 0, 20, 21, 30, 31}));
  }
  {
    // pos == capacity, owner == B, state rows out of range (3 >= sourceRows, and -1).
    GatherCase g{{4, 0, 1, 2, 3, 1}, {0, 3, 1, 0, 0, 2}, {1, 3, -1}};
    ref::dflashGatherDeltaRope(g.params(3, 4, 3, 3));
    EXPECT_EQ(g.output, (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 0, 120, 121, 122, 130, 131, 132,
                                            0, 0, 0}));
  }
}

TEST(DFlashGatherDeltaRopeRef, Validation) {
  using P = kernel::DFlashGatherDeltaRopeParams;
  auto expect = [](auto mutate, const char* name) {
    GatherCase g{{1, 2}, {0, 1}, {0, 1}};
    P p = g.params(2, 4, 2);
    mutate(p);
    test::expectInvalidArgument([&] { ref::dflashGatherDeltaRope(p); }, name);
  };
  expect([](P& p) { p.numDeltaTokens = -1; }, "numDeltaTokens");
  expect([](P& p) { p.batchSize = -1; }, "batchSize");
  expect([](P& p) { p.sourceRows = 0; }, "sourceRows");
  expect([](P& p) { p.cacheCapacity = 0; }, "cacheCapacity");
  expect([](P& p) { p.rotaryDim = -2; }, "rotaryDim");
  expect([](P& p) { p.source = nullptr; }, "source");
  expect([](P& p) { p.output = nullptr; }, "output");
  expect([](P& p) { p.deltaPositions = nullptr; }, "deltaPositions");
  expect([](P& p) { p.deltaTokenToSequence = nullptr; }, "deltaTokenToSequence");
  expect([](P& p) { p.stateIndices = nullptr; }, "stateIndices");  // sourceRows 2 needs them
  GatherCase g{{1, 2}, {0, 1}, {}};
  P p = g.params(2, 4, 2);
  p.numDeltaTokens = 0;
  EXPECT_NO_THROW(ref::dflashGatherDeltaRope(p));
  EXPECT_EQ(g.output, (std::vector<float>(4, -12345.0f)));
}

// ---------------------------------------------------------------- §2.6 spec ragged metadata

struct RaggedCase {
  RaggedCase(I32 past_lens, I32 valid_counts) : past(std::move(past_lens)), valid(std::move(valid_counts)) {}
  I32 attn, past, valid, positions, qstart, qlen, pastOut, seqlen, parents, depths;
  kernel::SpecRaggedMetadataParams params(int32_t width, bool synth, int32_t prefill_tree) {
    const size_t b = past.size();
    attn.resize(b * width);
    for (size_t s = 0; s < b; ++s)
      for (int32_t t = 0; t < width; ++t) attn[s * width + t] = past[s] + t;
    positions = poisoned(b * width);
    qstart = poisoned(b + 1);
    qlen = poisoned(b);
    pastOut = poisoned(b);
    seqlen = poisoned(b);
    parents = I32(b * width, prefill_tree);
    depths = I32(b * width, prefill_tree);
    kernel::SpecRaggedMetadataParams p;
    p.attentionPositions = attn.data();
    p.committedPastLengths = past.data();
    p.validCounts = valid.empty() ? nullptr : valid.data();
    p.queryWidth = width;
    p.positions = positions.data();
    p.queryStartOffsets = qstart.data();
    p.queryLengths = qlen.data();
    p.pastLengths = pastOut.data();
    p.attentionSequenceLengths = seqlen.data();
    p.treeParentIds = parents.data();
    p.treeDepths = depths.data();
    p.synthesizeLinearTree = synth;
    p.batchSize = static_cast<int32_t>(b);
    return p;
  }
};

TEST(SpecRaggedMetadataRef, SpecExampleSynthesizedLinearTree) {
  RaggedCase c{{5, 12}, {7, 3}};
  ref::prepareSpecRaggedMetadata(c.params(8, true, test::poison_i32()));
  const int32_t P = -1;
  EXPECT_EQ(c.qlen, (I32{7, 3}));
  EXPECT_EQ(c.seqlen, (I32{13, 20}));
  EXPECT_EQ(c.qstart, (I32{0, 8, 16}));
  EXPECT_EQ(c.pastOut, (I32{5, 12}));
  EXPECT_EQ(c.positions, (I32{5, 6, 7, 8, 9, 10, 11, P, 12, 13, 14, P, P, P, P, P}));
  EXPECT_EQ(c.parents, (I32{-1, 0, 1, 2, 3, 4, 5, P, -1, 0, 1, P, P, P, P, P}));
  EXPECT_EQ(c.depths, (I32{0, 1, 2, 3, 4, 5, 6, P, 0, 1, 2, P, P, P, P, P}));
}

TEST(SpecRaggedMetadataRef, CallerTreeKeptOnValidRowsAndOptionalOutputs) {
  RaggedCase c{{5, 12}, {7, 3}};
  auto p = c.params(8, false, 77);
  ref::prepareSpecRaggedMetadata(p);
  for (int r = 0; r < 16; ++r) {
    const bool padding = (r < 8 ? r : r - 8) >= (r < 8 ? 7 : 3);
    EXPECT_EQ(c.parents[r], padding ? -1 : 77) << r;
    EXPECT_EQ(c.depths[r], padding ? -1 : 77) << r;
  }
  // Tree outputs may be null; no validCounts means every row is valid.
  RaggedCase d{{0, 3}, {}};
  p = d.params(2, true, 0);
  p.treeParentIds = nullptr;
  p.treeDepths = nullptr;
  ref::prepareSpecRaggedMetadata(p);
  EXPECT_EQ(d.qlen, (I32{2, 2}));
  EXPECT_EQ(d.positions, (I32{0, 1, 3, 4}));
  EXPECT_EQ(d.seqlen, (I32{2, 5}));
}

TEST(SpecRaggedMetadataRef, OutOfRangeValidCountsAreClamped) {
  RaggedCase c{{0, 0}, {9, -2}};
  ref::prepareSpecRaggedMetadata(c.params(4, true, 0));
  EXPECT_EQ(c.qlen, (I32{4, 0}));
  EXPECT_EQ(c.positions, (I32{0, 1, 2, 3, -1, -1, -1, -1}));
}

TEST(SpecRaggedMetadataRef, Validation) {
  using P = kernel::SpecRaggedMetadataParams;
  auto expect = [](auto mutate, const char* name) {
    RaggedCase c{{1, 2}, {1, 1}};
    P p = c.params(4, true, 0);
    mutate(p);
    test::expectInvalidArgument([&] { ref::prepareSpecRaggedMetadata(p); }, name);
  };
  expect([](P& p) { p.queryWidth = 0; }, "queryWidth");
  expect([](P& p) { p.queryWidth = INT32_MAX; }, "queryWidth");
  expect([](P& p) { p.batchSize = -3; }, "batchSize");
  expect([](P& p) { p.attentionPositions = nullptr; }, "attentionPositions");
  expect([](P& p) { p.committedPastLengths = nullptr; }, "committedPastLengths");
  expect([](P& p) { p.positions = nullptr; }, "positions");
  expect([](P& p) { p.queryStartOffsets = nullptr; }, "queryStartOffsets");
  expect([](P& p) { p.queryLengths = nullptr; }, "queryLengths");
  expect([](P& p) { p.pastLengths = nullptr; }, "pastLengths");
  expect([](P& p) { p.attentionSequenceLengths = nullptr; }, "attentionSequenceLengths");
}

}  // namespace
}  // namespace es
