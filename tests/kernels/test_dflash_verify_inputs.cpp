// CPU checks of the DFlash verify-input references (spec §2.7, §2.9): hand-computed base verify
// inputs (verify sizes 1, 5, 16, 33), the §2.9 draft-row mapping example
// ([10, 101, 102, 103]) and argument validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kernels/dflash_verify_inputs.h"
#include "support/test_util.h"

namespace es {
namespace {

using I32 = std::vector<int32_t>;
using I64 = std::vector<int64_t>;
using I8 = std::vector<int8_t>;

using test::poisoned;

struct BaseVerifyOut {
  I32 mask, posId, context;
  I64 select;
  kernel::DFlashBaseVerifyInputsParams params(const I32& baseLens, int32_t s) {
    const size_t b = baseLens.size();
    mask = poisoned(b * s * kernel::dflashMaskWords(s));
    posId = poisoned(b * s);
    context = poisoned(b);
    select.assign(b * s, -777);
    kernel::DFlashBaseVerifyInputsParams p{.baseKVCacheLengths = baseLens.data(),
                                           .verifySize = s,
                                           .packedAttentionMask = mask.data(),
                                           .attentionPosId = posId.data(),
                                           .selectTokenIndices = select.data(),
                                           .contextLengths = context.data(),
                                           .batchSize = static_cast<int32_t>(b)};
    return p;
  }
};

TEST(DFlashBaseVerifyInputsRef, CausalBlockOfFive) {
  const I32 base = {100, 0};
  BaseVerifyOut out;
  ref::dflashPrepareBaseVerifyInputs(out.params(base, 5));
  EXPECT_EQ(out.mask, (I32{1, 3, 7, 15, 31, 1, 3, 7, 15, 31}));
  EXPECT_EQ(out.posId, (I32{100, 101, 102, 103, 104, 0, 1, 2, 3, 4}));
  EXPECT_EQ(out.select, (I64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(out.context, (I32{105, 5}));
}

TEST(DFlashBaseVerifyInputsRef, VerifySizes1And16And33) {
  const I32 base = {7};
  BaseVerifyOut one, sixteen, wide;
  ref::dflashPrepareBaseVerifyInputs(one.params(base, 1));
  EXPECT_EQ(one.mask, I32{1});
  EXPECT_EQ(one.context, I32{8});
  ref::dflashPrepareBaseVerifyInputs(sixteen.params(base, 16));
  EXPECT_EQ(sixteen.mask[0], 1);
  EXPECT_EQ(sixteen.mask[15], 0xffff);
  EXPECT_EQ(sixteen.posId[15], 22);
  ref::dflashPrepareBaseVerifyInputs(wide.params(base, 33));
  ASSERT_EQ(wide.mask.size(), 66u);
  EXPECT_EQ(wide.mask[0], 1);
  EXPECT_EQ(wide.mask[1], 0);
  EXPECT_EQ(wide.mask[2 * 31], -1);
  EXPECT_EQ(wide.mask[2 * 31 + 1], 0);
  EXPECT_EQ(wide.mask[2 * 32], -1);
  EXPECT_EQ(wide.mask[2 * 32 + 1], 1);
  EXPECT_EQ(wide.select[32], 32);
  EXPECT_EQ(wide.context, I32{40});
}

TEST(DFlashBaseVerifyInputsRef, Validation) {
  const I32 base = {1, 2};
  using P = kernel::DFlashBaseVerifyInputsParams;
  auto expect = [&](auto mutate, const char* name) {
    BaseVerifyOut out;
    P p = out.params(base, 4);
    mutate(p);
    test::expectInvalidArgument([&] { ref::dflashPrepareBaseVerifyInputs(p); }, name);
  };
  expect([](P& p) { p.verifySize = 0; }, "verifySize");
  expect([](P& p) { p.verifySize = kernel::kDFlashMaxBlockSize + 1; }, "verifySize");
  expect([](P& p) { p.batchSize = -1; }, "batchSize");
  expect([](P& p) { p.baseKVCacheLengths = nullptr; }, "baseKVCacheLengths");
  expect([](P& p) { p.packedAttentionMask = nullptr; }, "packedAttentionMask");
  expect([](P& p) { p.attentionPosId = nullptr; }, "attentionPosId");
  expect([](P& p) { p.selectTokenIndices = nullptr; }, "selectTokenIndices");
  expect([](P& p) { p.contextLengths = nullptr; }, "contextLengths");
  BaseVerifyOut idle;
  P p = idle.params(base, 4);
  p.batchSize = 0;
  EXPECT_NO_THROW(ref::dflashPrepareBaseVerifyInputs(p));
  EXPECT_EQ(idle.context, poisoned(2));
}

struct LinearVerifyCase {
  I32 anchors, draft, tokens;
  I8 mask;
  kernel::DFlashLinearVerifyInputsParams params(int32_t proposalLen, int32_t stride) {
    const size_t b = anchors.size();
    const int32_t s = proposalLen + 1;
    tokens = poisoned(b * s);
    mask.assign(b * s * s, static_cast<int8_t>(test::kPoisonByte));
    kernel::DFlashLinearVerifyInputsParams p{.lastAcceptedTokens = anchors.data(),
                                             .draftTokenIds = draft.data(),
                                             .verifyTokenIds = tokens.data(),
                                             .verifyTreeMask = mask.data(),
                                             .batchSize = static_cast<int32_t>(b),
                                             .proposalLen = proposalLen,
                                             .draftTokenStride = stride,
                                             .verifySize = s};
    return p;
  }
};

// Spec §2.9: draft row i predicts block slot i; row 0 (999) re-predicts the anchor and is skipped.
TEST(DFlashLinearVerifyInputsRef, DraftRowIMapsToVerifySlotI) {
  LinearVerifyCase c{{10}, {999, 101, 102, 103}, {}, {}};
  ref::dflashBuildLinearVerifyInputs(c.params(3, 4));
  EXPECT_EQ(c.tokens, (I32{10, 101, 102, 103}));
  EXPECT_EQ(c.mask, (I8{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1}));

  // Two sequences, stride wider than the verify size.
  LinearVerifyCase d{{10, 20}, {999, 101, 102, 103, 5, 5, 888, 201, 202, 203, 6, 6}, {}, {}};
  ref::dflashBuildLinearVerifyInputs(d.params(3, 6));
  EXPECT_EQ(d.tokens, (I32{10, 101, 102, 103, 20, 201, 202, 203}));

  // proposalLen 0: the anchor alone.
  LinearVerifyCase e{{10, 20}, {1, 2}, {}, {}};
  ref::dflashBuildLinearVerifyInputs(e.params(0, 1));
  EXPECT_EQ(e.tokens, (I32{10, 20}));
  EXPECT_EQ(e.mask, (I8{1, 1}));
}

TEST(DFlashLinearVerifyInputsRef, Validation) {
  using P = kernel::DFlashLinearVerifyInputsParams;
  auto expect = [](auto mutate, const char* name) {
    LinearVerifyCase c{{10}, {999, 101, 102, 103}, {}, {}};
    P p = c.params(3, 4);
    mutate(p);
    test::expectInvalidArgument([&] { ref::dflashBuildLinearVerifyInputs(p); }, name);
  };
  expect([](P& p) { p.verifySize = 3; }, "verifySize");  // != proposalLen + 1
  expect([](P& p) { p.verifySize = 5; }, "verifySize");
  expect([](P& p) { p.draftTokenStride = 3; }, "draftTokenStride");  // = proposalLen: one short
  expect([](P& p) { p.proposalLen = -1; }, "proposalLen");
  expect([](P& p) { p.batchSize = -1; }, "batchSize");
  expect(
      [](P& p) {
        p.proposalLen = kernel::kDFlashMaxBlockSize;
        p.verifySize = kernel::kDFlashMaxBlockSize + 1;
        p.draftTokenStride = p.verifySize;
      },
      "verifySize");
  expect([](P& p) { p.lastAcceptedTokens = nullptr; }, "lastAcceptedTokens");
  expect([](P& p) { p.draftTokenIds = nullptr; }, "draftTokenIds");
  expect([](P& p) { p.verifyTokenIds = nullptr; }, "verifyTokenIds");
  expect([](P& p) { p.verifyTreeMask = nullptr; }, "verifyTreeMask");
  LinearVerifyCase c{{10}, {999, 101, 102, 103}, {}, {}};
  P p = c.params(3, 4);
  p.batchSize = 0;
  EXPECT_NO_THROW(ref::dflashBuildLinearVerifyInputs(p));
  EXPECT_EQ(c.tokens, poisoned(4));
}

}  // namespace
}  // namespace es
