// CPU tests of the row-argmax reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/errors.h"
#include "kernels/argmax.h"

namespace es {
namespace {

TEST(ArgmaxRef, TiesNanStrideAndDtypes) {
  const float nan = std::nanf("");
  // rows of 5 with stride 6 (last element of each row is padding that must be ignored)
  std::vector<float> x = {1,  3,     3,    2,   0,  99,  // tie -> 1
                          -1, -0.0f, 0.0f, -2,  -5, 99,  // -0 and +0 tie -> 1
                          1,  nan,   7,    nan, 0,  99,  // first NaN wins
                          -9, -8,    -7,   -6,  -5, 99};
  std::vector<int32_t> out(4, -7);
  ArgmaxParams p;
  p.logits = x.data();
  p.rows = 4;
  p.vocab = 5;
  p.rowStride = 6;
  p.out = out.data();
  ref::argmaxRows(p);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 1, 1, 4}));
  std::vector<fp16> h;
  std::vector<bf16> b;
  for (float v : x) {
    h.push_back(to_fp16(v));
    b.push_back(to_bf16(v));
  }
  p.dtype = DType::kF16;
  p.logits = h.data();
  out.assign(4, -7);
  ref::argmaxRows(p);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 1, 1, 4}));
  p.dtype = DType::kBF16;
  p.logits = b.data();
  out.assign(4, -7);
  ref::argmaxRows(p);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 1, 1, 4}));
}

TEST(ArgmaxRef, BadParameters) {
  std::vector<float> x(4);
  std::vector<int32_t> out(1);
  ArgmaxParams p;
  p.logits = x.data();
  p.rows = 1;
  p.vocab = 4;
  p.out = out.data();
  p.vocab = 0;
  EXPECT_THROW(ref::argmaxRows(p), InvalidArgument);
  p.vocab = 4;
  p.rowStride = 2;
  try {
    ref::argmaxRows(p);
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'row_stride'"), std::string::npos);
  }
  p.rowStride = 0;
  p.out = nullptr;
  EXPECT_THROW(ref::argmaxRows(p), InvalidArgument);
  p.out = out.data();
  p.rows = -1;
  EXPECT_THROW(ref::argmaxRows(p), InvalidArgument);
}

}  // namespace
}  // namespace es
