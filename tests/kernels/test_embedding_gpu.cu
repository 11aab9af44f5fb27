// GPU parity of launchEmbedding with the CPU reference: f32/f16/bf16, hidden sizes that take the
// 16-, 8-, 4- and 2-byte paths, invalid ids, poisoned output; bit-exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/embedding.h"

namespace es {
namespace {

using namespace fwdtest;

template <typename T>
void run(int32_t vocab, int32_t hidden, int32_t tokens, bool offsetOut, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message()
               << "vocab " << vocab << " hidden " << hidden << " tokens " << tokens << " offset "
               << offsetOut << " " << dtype_name(dtype_of<T>));
  std::vector<T> table(size_t(vocab) * hidden);
  fill(table, rng, -3.0f, 3.0f);
  std::vector<int32_t> ids(tokens);
  std::uniform_int_distribution<int32_t> id(-2, vocab + 1);
  for (auto& x : ids) x = id(rng);
  ids[0] = vocab - 1;
  const size_t off = offsetOut ? 1 : 0;  // a misaligned output base
  std::vector<T> want(off + size_t(tokens) * hidden);
  std::memset(want.data(), test::kPoisonByte, want.size() * sizeof(T));
  kernel::EmbeddingParams p{.tokens = ids.data(),
                            .table = table.data(),
                            .out = want.data() + off,
                            .numTokens = tokens,
                            .vocabSize = vocab,
                            .hiddenSize = hidden,
                            .dtype = dtype_of<T>};
  ref::embedding(p);

  test::DeviceArray<int32_t> dIds(ids);
  test::DeviceArray<T> dTable(table), d_out(want.size());
  // The offset element keeps its poison on both sides (host memset and DeviceArray use
  // the same byte).
  p.tokens = dIds.get();
  p.table = dTable.get();
  p.out = d_out.get() + off;
  kernel::launchEmbedding(p, nullptr);
  expect_bits(d_out.download(), want, "out");
}

TEST(EmbeddingGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(5);
  for (int32_t hidden : {576, 64, 1, 3, 577, 1024}) {
    for (bool off : {false, true}) {
      run<float>(100, hidden, 37, off, rng);
      run<bf16>(100, hidden, 37, off, rng);
      run<fp16>(100, hidden, 5, off, rng);
    }
  }
  run<bf16>(151936 / 16, 896, 300, false, rng);
}

TEST(EmbeddingGpu, ZeroTokensIsANoOp) {
  ES_SKIP_IF_NO_GPU();
  kernel::EmbeddingParams p;
  p.vocabSize = 4;
  p.hiddenSize = 8;
  kernel::launchEmbedding(p, nullptr);  // null pointers, numTokens 0: nothing happens
  ES_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace es
