// GPU parity of the DFlash draft-side metadata kernels (spec §2.3, §2.4) against their CPU
// references over random shapes (B up to 64, block sizes 1/5/16/33 and random), bit-exact.
// Device outputs start poisoned and the reference outputs start with the same poison bytes, so an
// element one side writes and the other does not is a mismatch.
#include <gtest/gtest.h>

#include <cstdint>
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
    const int32_t blockSizes[] = {1, 5, 16, 33, pick(rng, 1, 70)};
    const int32_t bs = blockSizes[trial % 5];
    const bool causal = (trial / 5) % 2 == 1;
    SCOPED_TRACE(::testing::Message() << "B " << batch << " BS " << bs << " causal " << causal);
    const size_t words = size_t(kernel::dflashMaskWords(bs));
    const I32 oldLens = test::randomInts(rng, batch, 0, 5000),
              delta = test::randomInts(rng, batch, 0, 16);
    const I32 state = test::randomInts(rng, batch, 0, 100);

    I32 mask = poisoned<int32_t>(batch * bs * words), posId = poisoned<int32_t>(batch * bs),
        positions = posId, context = poisoned<int32_t>(batch),
        qstart = poisoned<int32_t>(batch + 1), qlen = context, past = context, seqlen = context;
    const kernel::DFlashProposalInputsParams p{.oldDraftCacheLengths = oldLens.data(),
                                               .deltaLengths = delta.data(),
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
                                               .batchSize = batch};
    ref::dflashPrepareProposalInputs(p);

    test::DeviceArray<int32_t> dOld(oldLens), dDelta(delta), dState(state);
    test::DeviceArray<int32_t> dMask(mask.size()), dPosId(posId.size()), dPositions(posId.size()),
        dContext(batch), dQstart(batch + 1), dQlen(batch), dPast(batch), dSeqlen(batch);
    kernel::launchDFlashPrepareProposalInputs({.oldDraftCacheLengths = dOld.get(),
                                               .deltaLengths = dDelta.get(),
                                               .blockSize = bs,
                                               .packedAttentionMask = dMask.get(),
                                               .attentionPosId = dPosId.get(),
                                               .contextLengths = dContext.get(),
                                               .positions = dPositions.get(),
                                               .queryStartOffsets = dQstart.get(),
                                               .queryLengths = dQlen.get(),
                                               .pastLengths = dPast.get(),
                                               .attentionSequenceLengths = dSeqlen.get(),
                                               .stateIndices = dState.get(),
                                               .causalProposalMask = causal,
                                               .batchSize = batch},
                                              nullptr);
    EXPECT_EQ(dMask.download(), mask);
    EXPECT_EQ(dPosId.download(), posId);
    EXPECT_EQ(dPositions.download(), positions);
    EXPECT_EQ(dContext.download(), context);
    EXPECT_EQ(dQstart.download(), qstart);
    EXPECT_EQ(dQlen.download(), qlen);
    EXPECT_EQ(dPast.download(), past);
    EXPECT_EQ(dSeqlen.download(), seqlen);
    EXPECT_EQ(dState.download(), state);
  }
}

TEST(DFlashMetadataGpu, DeltaMetadataMatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(12);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t batch = trial == 0 ? 64 : pick(rng, 1, 64);
    const int32_t width = pick(rng, 1, 300);
    SCOPED_TRACE(::testing::Message() << "B " << batch << " W " << width);
    const I32 oldLens = test::randomInts(rng, batch, 0, 100000);
    const I32 delta = test::randomInts(rng, batch, 0, width + 3);  // may exceed the width
    I32 positions = poisoned<int32_t>(size_t(batch) * width), owners = positions;
    ref::dflashPrepareDeltaMetadata({.oldDraftCacheLengths = oldLens.data(),
                                     .deltaLengths = delta.data(),
                                     .deltaWidth = width,
                                     .deltaPositions = positions.data(),
                                     .deltaTokenToSequence = owners.data(),
                                     .batchSize = batch});

    test::DeviceArray<int32_t> dOld(oldLens), dDelta(delta), dPos(positions.size()),
        dOwn(owners.size());
    kernel::launchDFlashPrepareDeltaMetadata({.oldDraftCacheLengths = dOld.get(),
                                              .deltaLengths = dDelta.get(),
                                              .deltaWidth = width,
                                              .deltaPositions = dPos.get(),
                                              .deltaTokenToSequence = dOwn.get(),
                                              .batchSize = batch},
                                             nullptr);
    EXPECT_EQ(dPos.download(), positions);
    EXPECT_EQ(dOwn.download(), owners);
  }
}

TEST(DFlashMetadataGpu, LaunchersValidateBeforeLaunching) {
  ES_SKIP_IF_NO_GPU();
  test::DeviceArray<int32_t> buf(64);
  int32_t* const d = buf.get();
  EXPECT_THROW(kernel::launchDFlashPrepareProposalInputs({.oldDraftCacheLengths = d,
                                                          .deltaLengths = d,
                                                          .blockSize = 0,
                                                          .packedAttentionMask = d,
                                                          .attentionPosId = d,
                                                          .contextLengths = d,
                                                          .positions = d,
                                                          .queryStartOffsets = d,
                                                          .queryLengths = d,
                                                          .pastLengths = d,
                                                          .attentionSequenceLengths = d,
                                                          .batchSize = 1},
                                                         nullptr),
               InvalidArgument);
  const kernel::DFlashDeltaMetadataParams delta{.oldDraftCacheLengths = d,
                                                .deltaLengths = nullptr,
                                                .deltaWidth = 4,
                                                .deltaPositions = d,
                                                .deltaTokenToSequence = d,
                                                .batchSize = 1};
  EXPECT_THROW(kernel::launchDFlashPrepareDeltaMetadata(delta, nullptr), InvalidArgument);
  // Zero counts are no-ops: the buffer keeps its poison.
  kernel::launchDFlashPrepareDeltaMetadata({.oldDraftCacheLengths = d,
                                            .deltaLengths = d,
                                            .deltaWidth = 0,
                                            .deltaPositions = d,
                                            .deltaTokenToSequence = d,
                                            .batchSize = 4},
                                           nullptr);
  EXPECT_EQ(buf.download(), poisoned<int32_t>(64));
}

}  // namespace
}  // namespace es
