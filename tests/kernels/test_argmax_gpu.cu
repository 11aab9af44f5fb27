// GPU row argmax against the reference: ties, NaN, strides, misaligned rows, all dtypes, the
// cluster-split (small batch) and one-CTA-per-row (large batch) launches.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/argmax.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

template <typename T>
void check(int32_t rows, int32_t vocab, int64_t stride, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "rows " << rows << " vocab " << vocab << " stride " << stride
                                  << " dtype " << dtype_name(dtype_of<T>));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<T> x(static_cast<size_t>(rows) * stride);
  for (int32_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < stride; ++i) {
      float v = i < vocab ? std::round(nd(rng)) : 1e4f;  // padding beyond vocab is huge: ignored
      if (r % 4 == 1 && i < vocab && i % 997 == 5) v = 30.0f;  // several tied maxima
      if (r % 4 == 2 && i == vocab / 2) v = std::nanf("");
      if (r % 4 == 3 && i == vocab - 1) v = 40.0f;  // maximum in the last element
      if constexpr (std::is_same_v<T, float>)
        x[r * stride + i] = v;
      else if constexpr (std::is_same_v<T, fp16>)
        x[r * stride + i] = to_fp16(v);
      else
        x[r * stride + i] = to_bf16(v);
    }
  }
  std::vector<int32_t> want(rows, -3);
  ArgmaxParams p;
  p.logits = x.data();
  p.dtype = dtype_of<T>;
  p.rows = rows;
  p.vocab = vocab;
  p.rowStride = stride;
  p.out = want.data();
  ref::argmaxRows(p);
  test::DeviceArray<T> d_x(x);
  test::DeviceArray<int32_t> d_out(rows);
  p.logits = d_x.get();
  p.out = d_out.get();
  kernel::argmaxRows(p, nullptr);
  EXPECT_EQ(d_out.download(), want);
}

TEST(ArgmaxGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  for (int32_t rows : {1, 7, 64}) {
    check<float>(rows, 151936, 151936, 1);
    check<fp16>(rows, 151936, 151936, 2);
    check<bf16>(rows, 128256, 128256, 3);
  }
  check<float>(3, 1000003, 1000005, 4);  // odd vocab and stride: misaligned rows
  check<fp16>(5, 4097, 4099, 5);
  check<float>(2, 1, 1, 6);
  check<bf16>(40, 257, 300, 7);
}

}  // namespace
}  // namespace es
