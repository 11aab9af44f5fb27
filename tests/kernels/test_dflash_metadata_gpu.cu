// GPU parity of the DFlash draft-side metadata kernels (spec §2.3–§2.6) against their CPU
// references over random shapes (B up to 64, block sizes 1/5/16/33 and random), bit-exact.
// Device outputs start poisoned and the reference outputs start with the same poison bytes, so an
// element one side writes and the other does not is a mismatch.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dflash_metadata.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

using test::poisoned;


int32_t pick(std::mt19937& rng, int32_t lo, int32_t hi) {
  return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
}

TEST(DFlashMetadataGpu, ProposalInputsMatchReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t batch = trial == 0 ? 64 : pick(rng, 1, 64);
    const int32_t block_sizes[] = {1, 5, 16, 33, pick(rng, 1, 70)};
    const int32_t bs = block_sizes[trial % 5];
    const bool causal = (trial / 5) % 2 == 1;
    SCOPED_TRACE(::testing::Message() << "B " << batch << " BS " << bs << " causal " << causal);
    const size_t words = size_t(kernel::dflashMaskWords(bs));
    const I32 old_lens = test::randomInts(rng, batch, 0, 5000), delta = test::randomInts(rng, batch, 0, 16);
    const I32 state = test::randomInts(rng, batch, 0, 100);

    I32 mask = poisoned<int32_t>(batch * bs * words), pos_id = poisoned<int32_t>(batch * bs),
        positions = pos_id, context = poisoned<int32_t>(batch), qstart = poisoned<int32_t>(batch + 1),
        qlen = context, past = context, seqlen = context;
    kernel::DFlashProposalInputsParams p;
    p.oldDraftCacheLengths = old_lens.data();
    p.deltaLengths = delta.data();
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
    p.batchSize = batch;
    ref::dflashPrepareProposalInputs(p);

    test::DeviceArray<int32_t> d_old(old_lens), d_delta(delta), d_state(state);
    test::DeviceArray<int32_t> d_mask(mask.size()), d_pos_id(pos_id.size()), d_positions(pos_id.size()),
        d_context(batch), d_qstart(batch + 1), d_qlen(batch), d_past(batch), d_seqlen(batch);
    kernel::launchDFlashPrepareProposalInputs(
        d_old.get(), d_delta.get(), bs, d_mask.get(), d_pos_id.get(), d_context.get(),
        d_positions.get(), d_qstart.get(), d_qlen.get(), d_past.get(), d_seqlen.get(),
        d_state.get(), causal, batch, nullptr);
    EXPECT_EQ(d_mask.download(), mask);
    EXPECT_EQ(d_pos_id.download(), pos_id);
    EXPECT_EQ(d_positions.download(), positions);
    EXPECT_EQ(d_context.download(), context);
    EXPECT_EQ(d_qstart.download(), qstart);
    EXPECT_EQ(d_qlen.download(), qlen);
    EXPECT_EQ(d_past.download(), past);
    EXPECT_EQ(d_seqlen.download(), seqlen);
    EXPECT_EQ(d_state.download(), state);
  }
}

TEST(DFlashMetadataGpu, DeltaMetadataMatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(12);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t batch = trial == 0 ? 64 : pick(rng, 1, 64);
    const int32_t width = pick(rng, 1, 300);
    SCOPED_TRACE(::testing::Message() << "B " << batch << " W " << width);
    const I32 old_lens = test::randomInts(rng, batch, 0, 100000);
    const I32 delta = test::randomInts(rng, batch, 0, width + 3);  // may exceed the width
    I32 positions = poisoned<int32_t>(size_t(batch) * width), owners = positions;
    kernel::DFlashDeltaMetadataParams p;
    p.oldDraftCacheLengths = old_lens.data();
    p.deltaLengths = delta.data();
    p.deltaWidth = width;
    p.deltaPositions = positions.data();
    p.deltaTokenToSequence = owners.data();
    p.batchSize = batch;
    ref::dflashPrepareDeltaMetadata(p);

    test::DeviceArray<int32_t> d_old(old_lens), d_delta(delta), d_pos(positions.size()),
        d_own(owners.size());
    kernel::launchDFlashPrepareDeltaMetadata(d_old.get(), d_delta.get(), width, d_pos.get(),
                                             d_own.get(), batch, nullptr);
    EXPECT_EQ(d_pos.download(), positions);
    EXPECT_EQ(d_own.download(), owners);
  }
}

TEST(DFlashMetadataGpu, GatherDeltaRopeMatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(13);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t batch = pick(rng, 1, 64);
    const int32_t rows = trial % 3 == 0 ? 1 : pick(rng, 2, 5);
    const int32_t capacity = pick(rng, 1, 300);
    const int32_t rotary_dims[] = {2, 64, 128, 6};
    const int32_t rot = rotary_dims[trial % 4];
    const int32_t tokens = pick(rng, 1, 1200);
    SCOPED_TRACE(::testing::Message() << "B " << batch << " rows " << rows << " cap " << capacity
                                      << " rot " << rot << " T " << tokens);
    std::vector<float> source(size_t(rows) * capacity * rot);
    std::uniform_real_distribution<float> val(-1.0f, 1.0f);
    for (auto& x : source) x = val(rng);
    const I32 positions = test::randomInts(rng, tokens, -2, capacity + 2);
    const I32 owners = test::randomInts(rng, tokens, -1, batch);
    const I32 state = test::randomInts(rng, batch, -1, rows);
    std::vector<float> out = poisoned<float>(size_t(tokens) * rot);
    kernel::DFlashGatherDeltaRopeParams p;
    p.source = source.data();
    p.output = out.data();
    p.deltaPositions = positions.data();
    p.deltaTokenToSequence = owners.data();
    p.stateIndices = rows == 1 ? nullptr : state.data();
    p.numDeltaTokens = tokens;
    p.batchSize = batch;
    p.sourceRows = rows;
    p.cacheCapacity = capacity;
    p.rotaryDim = rot;
    ref::dflashGatherDeltaRope(p);

    test::DeviceArray<float> d_source(source), d_out(out.size());
    test::DeviceArray<int32_t> d_pos(positions), d_own(owners), d_state(state);
    kernel::launchDFlashGatherDeltaRope(d_source.get(), d_out.get(), d_pos.get(), d_own.get(),
                                        rows == 1 ? nullptr : d_state.get(), tokens, batch, rows,
                                        capacity, rot, nullptr);
    const std::vector<float> got = d_out.download();
    ASSERT_EQ(got.size(), out.size());
    EXPECT_EQ(std::memcmp(got.data(), out.data(), out.size() * sizeof(float)), 0);
  }
}

TEST(DFlashMetadataGpu, SpecRaggedMetadataMatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(14);
  for (int trial = 0; trial < 40; ++trial) {
    const int32_t batch = trial == 0 ? 64 : pick(rng, 1, 64);
    const int32_t width = pick(rng, 1, 40);
    const bool synth = trial % 2 == 0, with_valid = trial % 3 != 0, with_tree = trial % 5 != 4;
    SCOPED_TRACE(::testing::Message() << "B " << batch << " W " << width << " synth " << synth
                                      << " valid " << with_valid << " tree " << with_tree);
    const size_t n = size_t(batch) * width;
    const I32 attn = test::randomInts(rng, n, 0, 9000), past = test::randomInts(rng, batch, 0, 9000);
    const I32 valid = test::randomInts(rng, batch, -1, width + 1);  // includes out-of-range counts
    const I32 tree_init = test::randomInts(rng, n, -5, 50);         // caller-produced tree rows
    I32 positions = poisoned<int32_t>(n), qstart = poisoned<int32_t>(batch + 1),
        qlen = poisoned<int32_t>(batch), past_out = qlen, seqlen = qlen, parents = tree_init,
        depths = tree_init;
    kernel::SpecRaggedMetadataParams p;
    p.attentionPositions = attn.data();
    p.committedPastLengths = past.data();
    p.validCounts = with_valid ? valid.data() : nullptr;
    p.queryWidth = width;
    p.positions = positions.data();
    p.queryStartOffsets = qstart.data();
    p.queryLengths = qlen.data();
    p.pastLengths = past_out.data();
    p.attentionSequenceLengths = seqlen.data();
    p.treeParentIds = with_tree ? parents.data() : nullptr;
    p.treeDepths = with_tree ? depths.data() : nullptr;
    p.synthesizeLinearTree = synth;
    p.batchSize = batch;
    ref::prepareSpecRaggedMetadata(p);

    test::DeviceArray<int32_t> d_attn(attn), d_past(past), d_valid(valid), d_pos(n),
        d_qstart(batch + 1), d_qlen(batch), d_past_out(batch), d_seqlen(batch),
        d_parents(tree_init), d_depths(tree_init);
    kernel::launchPrepareSpecRaggedMetadata(
        d_attn.get(), d_past.get(), with_valid ? d_valid.get() : nullptr, width, d_pos.get(),
        d_qstart.get(), d_qlen.get(), d_past_out.get(), d_seqlen.get(),
        with_tree ? d_parents.get() : nullptr, with_tree ? d_depths.get() : nullptr, synth, batch,
        nullptr);
    EXPECT_EQ(d_pos.download(), positions);
    EXPECT_EQ(d_qstart.download(), qstart);
    EXPECT_EQ(d_qlen.download(), qlen);
    EXPECT_EQ(d_past_out.download(), past_out);
    EXPECT_EQ(d_seqlen.download(), seqlen);
    EXPECT_EQ(d_parents.download(), parents);
    EXPECT_EQ(d_depths.download(), depths);
  }
}

TEST(DFlashMetadataGpu, LaunchersValidateBeforeLaunching) {
  ES_SKIP_IF_NO_GPU();
  test::DeviceArray<int32_t> buf(64);
  EXPECT_THROW(kernel::launchDFlashPrepareProposalInputs(buf.get(), buf.get(), 0, buf.get(), buf.get(),
                                                         buf.get(), buf.get(), buf.get(), buf.get(),
                                                         buf.get(), buf.get(), nullptr, false, 1,
                                                         nullptr),
               InvalidArgument);
  EXPECT_THROW(kernel::launchDFlashPrepareDeltaMetadata(buf.get(), nullptr, 4, buf.get(), buf.get(),
                                                        1, nullptr),
               InvalidArgument);
  EXPECT_THROW(kernel::launchDFlashGatherDeltaRope(nullptr, nullptr, buf.get(), buf.get(), nullptr,
                                                   1, 1, 2, 8, 2, nullptr),
               InvalidArgument);
  EXPECT_THROW(kernel::launchPrepareSpecRaggedMetadata(buf.get(), buf.get(), nullptr, -1, buf.get(),
                                                       buf.get(), buf.get(), buf.get(), buf.get(),
                                                       nullptr, nullptr, true, 1, nullptr),
               InvalidArgument);
  // Zero counts are no-ops: the buffer keeps its poison.
  kernel::launchDFlashPrepareDeltaMetadata(buf.get(), buf.get(), 0, buf.get(), buf.get(), 4, nullptr);
  kernel::launchDFlashGatherDeltaRope(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 1, 1, 1, 1,
                                      nullptr);
  EXPECT_EQ(buf.download(), poisoned<int32_t>(64));
}

}  // namespace
}  // namespace es
