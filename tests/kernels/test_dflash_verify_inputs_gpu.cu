// GPU parity of the DFlash verify-input kernels (spec §2.7, §2.9) against their CPU references
// over random shapes (B up to 64, verify sizes 1/5/16/33 and random, strides >= S), bit-exact,
// with device and reference outputs starting from the same poison bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/dflash_verify_inputs.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;

using test::poisoned;

int32_t verifySize(std::mt19937& rng, int trial) {
  const int32_t fixed[] = {1, 5, 16, 33};
  return trial % 5 < 4 ? fixed[trial % 5] : std::uniform_int_distribution<int32_t>(1, 70)(rng);
}

TEST(DFlashVerifyInputsGpu, BaseVerifyInputsMatchReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(21);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t batch = trial == 0 ? 64 : std::uniform_int_distribution<int32_t>(1, 64)(rng);
    const int32_t s = verifySize(rng, trial);
    SCOPED_TRACE(::testing::Message() << "B " << batch << " S " << s);
    const size_t rows = size_t(batch) * s;
    const I32 base = test::randomInts(rng, batch, 0, 50000);
    I32 mask = poisoned<int32_t>(rows * kernel::dflashMaskWords(s)),
        posId = poisoned<int32_t>(rows), context = poisoned<int32_t>(batch);
    std::vector<int64_t> select = poisoned<int64_t>(rows);
    ref::dflashPrepareBaseVerifyInputs({.baseKVCacheLengths = base.data(),
                                        .verifySize = s,
                                        .packedAttentionMask = mask.data(),
                                        .attentionPosId = posId.data(),
                                        .selectTokenIndices = select.data(),
                                        .contextLengths = context.data(),
                                        .batchSize = batch});

    test::DeviceArray<int32_t> dBase(base), dMask(mask.size()), dPos(rows), dContext(batch);
    test::DeviceArray<int64_t> dSelect(rows);
    kernel::launchDFlashPrepareBaseVerifyInputs({.baseKVCacheLengths = dBase.get(),
                                                 .verifySize = s,
                                                 .packedAttentionMask = dMask.get(),
                                                 .attentionPosId = dPos.get(),
                                                 .selectTokenIndices = dSelect.get(),
                                                 .contextLengths = dContext.get(),
                                                 .batchSize = batch},
                                                nullptr);
    EXPECT_EQ(dMask.download(), mask);
    EXPECT_EQ(dPos.download(), posId);
    EXPECT_EQ(dSelect.download(), select);
    EXPECT_EQ(dContext.download(), context);
  }
}

TEST(DFlashVerifyInputsGpu, LinearVerifyInputsMatchReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(23);
  for (int trial = 0; trial < 30; ++trial) {
    const int32_t batch = trial == 0 ? 64 : std::uniform_int_distribution<int32_t>(1, 64)(rng);
    const int32_t s = verifySize(rng, trial);
    const int32_t stride =
        s + (trial % 3 == 0 ? 0 : std::uniform_int_distribution<int32_t>(1, 9)(rng));
    SCOPED_TRACE(::testing::Message() << "B " << batch << " S " << s << " stride " << stride);
    const I32 anchors = test::randomInts(rng, batch, 0, 150000);
    const I32 draft = test::randomInts(rng, size_t(batch) * stride, 0, 150000);
    I32 tokens = poisoned<int32_t>(size_t(batch) * s);
    std::vector<int8_t> mask = poisoned<int8_t>(size_t(batch) * s * s);
    ref::dflashBuildLinearVerifyInputs({.lastAcceptedTokens = anchors.data(),
                                        .draftTokenIds = draft.data(),
                                        .verifyTokenIds = tokens.data(),
                                        .verifyTreeMask = mask.data(),
                                        .batchSize = batch,
                                        .proposalLen = s - 1,
                                        .draftTokenStride = stride,
                                        .verifySize = s});

    test::DeviceArray<int32_t> dAnchors(anchors), dDraft(draft), d_tokens(tokens.size());
    test::DeviceArray<int8_t> dMask(mask.size());
    kernel::launchDFlashBuildLinearVerifyInputs({.lastAcceptedTokens = dAnchors.get(),
                                                 .draftTokenIds = dDraft.get(),
                                                 .verifyTokenIds = d_tokens.get(),
                                                 .verifyTreeMask = dMask.get(),
                                                 .batchSize = batch,
                                                 .proposalLen = s - 1,
                                                 .draftTokenStride = stride,
                                                 .verifySize = s},
                                                nullptr);
    EXPECT_EQ(d_tokens.download(), tokens);
    EXPECT_EQ(dMask.download(), mask);
  }
}

TEST(DFlashVerifyInputsGpu, LaunchersValidateBeforeLaunching) {
  ES_SKIP_IF_NO_GPU();
  test::DeviceArray<int32_t> buf(64);
  test::DeviceArray<int8_t> mask(64);
  auto verify = [&](int32_t batch, int32_t proposalLen, int32_t stride, int32_t verifySize) {
    return kernel::DFlashLinearVerifyInputsParams{.lastAcceptedTokens = buf.get(),
                                                  .draftTokenIds = buf.get(),
                                                  .verifyTokenIds = buf.get(),
                                                  .verifyTreeMask = mask.get(),
                                                  .batchSize = batch,
                                                  .proposalLen = proposalLen,
                                                  .draftTokenStride = stride,
                                                  .verifySize = verifySize};
  };
  // draftTokenStride = proposalLen is one short.
  EXPECT_THROW(kernel::launchDFlashBuildLinearVerifyInputs(verify(1, 3, 3, 4), nullptr),
               InvalidArgument);
  EXPECT_THROW(kernel::launchDFlashBuildLinearVerifyInputs(verify(1, 3, 4, 5), nullptr),
               InvalidArgument);
  EXPECT_THROW(kernel::launchDFlashBuildLinearVerifyInputs(
                   verify(1, kernel::kDFlashMaxBlockSize, kernel::kDFlashMaxBlockSize + 1,
                          kernel::kDFlashMaxBlockSize + 1),
                   nullptr),
               InvalidArgument);
  EXPECT_THROW(kernel::launchDFlashPrepareBaseVerifyInputs({.baseKVCacheLengths = buf.get(),
                                                            .verifySize = 0,
                                                            .packedAttentionMask = buf.get(),
                                                            .attentionPosId = buf.get(),
                                                            .selectTokenIndices = nullptr,
                                                            .contextLengths = buf.get(),
                                                            .batchSize = 1},
                                                           nullptr),
               InvalidArgument);
  // A zero batch is a no-op: the buffer keeps its poison.
  kernel::launchDFlashBuildLinearVerifyInputs(verify(0, 3, 4, 4), nullptr);
  EXPECT_EQ(buf.download(), poisoned<int32_t>(64));
}

}  // namespace
}  // namespace es
