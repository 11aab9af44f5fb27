// GPU parity of launchRmsNorm with the CPU reference: f32/f16/bf16, hidden sizes on the vector
// and scalar paths, with and without the fused residual (the updated residual bit-exact), out
// aliasing x, poisoned output; tolerance table in forward_ops_gpu_test_util.h.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/rmsnorm.h"

namespace es {
namespace {

using namespace fwdtest;

template <typename T>
void run(int32_t rows, int32_t hidden, bool withResidual, bool in_place, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message()
               << "rows " << rows << " hidden " << hidden << " residual " << withResidual
               << " in-place " << in_place << " " << dtype_name(dtype_of<T>));
  const size_t n = size_t(rows) * hidden;
  std::vector<T> x(n), res(n), w(hidden);
  fill(x, rng, -4.0f, 4.0f);
  fill(res, rng, -4.0f, 4.0f);
  fill(w, rng, -2.0f, 2.0f);
  std::vector<T> wantX = x, wantRes = res, wantOut(n);
  kernel::RmsNormParams p{.x = wantX.data(),
                          .residual = withResidual ? wantRes.data() : nullptr,
                          .weight = w.data(),
                          .out = in_place ? wantX.data() : wantOut.data(),
                          .rows = rows,
                          .hiddenSize = hidden,
                          .eps = 1e-6f,
                          .dtype = dtype_of<T>};
  ref::rmsNorm(p);
  if (in_place) wantOut = wantX;

  test::DeviceArray<T> dX(x), dRes(res), dW(w), d_out(n);
  p.x = dX.get();
  p.residual = withResidual ? dRes.get() : nullptr;
  p.weight = dW.get();
  p.out = in_place ? dX.get() : d_out.get();
  kernel::launchRmsNorm(p, nullptr);
  expect_close(in_place ? dX.download() : d_out.download(), wantOut, tol_for<T>(), "out");
  if (withResidual) expect_bits(dRes.download(), wantRes, "residual");
}

TEST(RmsNormGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(3);
  for (int32_t hidden : {64, 576, 896, 4096, 75, 8}) {
    for (int32_t rows : {1, 7, 130}) {
      for (int mode = 0; mode < 3; ++mode) {
        const bool residual = mode >= 1, in_place = mode == 2;
        run<float>(rows, hidden, residual, in_place, rng);
        run<bf16>(rows, hidden, residual, in_place, rng);
        run<fp16>(rows, hidden, residual, in_place, rng);
      }
    }
  }
}

}  // namespace
}  // namespace es
