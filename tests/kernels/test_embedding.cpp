// CPU checks of the embedding lookup reference: exact row copies in every dtype, zero rows for
// negative / out-of-vocabulary ids, validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/embedding.h"
#include "support/test_util.h"

namespace es {
namespace {

template <typename T>
void checkLookup(DType dtype) {
  const int32_t vocab = 4, hidden = 5;
  std::vector<T> table(size_t(vocab) * hidden);
  for (size_t i = 0; i < table.size(); ++i) {
    const float v = 0.25f * float(i) - 2.0f;
    if constexpr (std::is_same_v<T, float>)
      table[i] = v;
    else if constexpr (std::is_same_v<T, bf16>)
      table[i] = to_bf16(v);
    else
      table[i] = to_fp16(v);
  }
  const std::vector<int32_t> tokens = {2, 0, -1, 4, 3, 2};
  std::vector<T> out(tokens.size() * hidden);
  std::memset(out.data(), test::kPoisonByte, out.size() * sizeof(T));
  kernel::EmbeddingParams p;
  p.tokens = tokens.data();
  p.table = table.data();
  p.out = out.data();
  p.numTokens = int32_t(tokens.size());
  p.vocabSize = vocab;
  p.hiddenSize = hidden;
  p.dtype = dtype;
  ref::embedding(p);
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int32_t i = 0; i < hidden; ++i) {
      const T got = out[t * hidden + i];
      const bool zeroRow = tokens[t] < 0 || tokens[t] >= vocab;
      const T want = zeroRow ? T{} : table[size_t(tokens[t]) * hidden + i];
      EXPECT_EQ(std::memcmp(&got, &want, sizeof(T)), 0) << "token row " << t << " dim " << i;
    }
  }
}

TEST(EmbeddingRef, CopiesRowsAndZeroesInvalidIds) {
  checkLookup<float>(DType::kF32);
  checkLookup<bf16>(DType::kBF16);
  checkLookup<fp16>(DType::kF16);
}

TEST(EmbeddingRef, Validation) {
  std::vector<int32_t> tokens = {0};
  std::vector<float> table(8), out(8);
  auto make = [&] {
    kernel::EmbeddingParams p{.tokens = tokens.data(),
                              .table = table.data(),
                              .out = out.data(),
                              .numTokens = 1,
                              .vocabSize = 2,
                              .hiddenSize = 4,
                              .dtype = DType::kF32};
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.numTokens = 0;
  p.tokens = nullptr;
  EXPECT_FALSE(kernel::validate(p));
  p = make();
  p.numTokens = -1;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "numTokens");
  p = make();
  p.vocabSize = 0;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "vocabSize");
  p = make();
  p.hiddenSize = 0;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "hiddenSize");
  p = make();
  p.dtype = DType::kI32;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "dtype");
  p = make();
  p.tokens = nullptr;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "tokens");
  p = make();
  p.table = nullptr;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "table");
  p = make();
  p.out = nullptr;
  test::expectInvalidArgument([&] { ref::embedding(p); }, "out");
}

}  // namespace
}  // namespace es
