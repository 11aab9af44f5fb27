// GPU parity of launchLinear (cuBLASLt) with the CPU reference: f32 (true fp32, no TF32),
// f16 and bf16 inputs, same-dtype and f32 (logits) outputs, with and without bias (epilogue and
// the separate f32 bias kernel), odd K/N, misaligned x, repeated calls reusing the cached plan.
// Tolerance: the table's rel term, plus fp32 accumulation-order slack 2^-20 * sum|x*w|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/linear.h"
#include "forward_ops_gpu_test_util.h"

namespace es {
namespace {

using namespace fwdtest;

template <typename T, typename O>
void run(kernel::LinearContext& ctx, int32_t m, int32_t n, int32_t k, bool with_bias,
         bool offset_x, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " bias "
                                    << with_bias << " offset " << offset_x << " "
                                    << dtype_name(dtype_of<T>) << " -> " << dtype_name(dtype_of<O>));
  const size_t off = offset_x ? 1 : 0;
  std::vector<T> x(off + size_t(m) * k), w(size_t(n) * k), bias(n);
  fill(x, rng, -1.0f, 1.0f);
  fill(w, rng, -1.0f, 1.0f);
  fill(bias, rng, -1.0f, 1.0f);
  std::vector<O> want(size_t(m) * n);
  kernel::LinearParams p;
  p.x = x.data() + off;
  p.w = w.data();
  p.bias = with_bias ? bias.data() : nullptr;
  p.y = want.data();
  p.m = m;
  p.n = n;
  p.k = k;
  p.dtype = dtype_of<T>;
  p.outDtype = dtype_of<O>;
  ref::linear(p);

  test::DeviceArray<T> d_x(x), d_w(w), d_b(bias);
  test::DeviceArray<O> d_y(want.size());
  p.x = d_x.get() + off;
  p.w = d_w.get();
  p.bias = with_bias ? d_b.get() : nullptr;
  p.y = d_y.get();
  for (int rep = 0; rep < 2; ++rep) {
    d_y.poison();
    kernel::launchLinear(p, ctx, nullptr);
    const std::vector<O> got = d_y.download();
    const Tol tol = tol_for<O>();
    size_t bad = 0;
    for (int32_t i = 0; i < m; ++i) {
      for (int32_t j = 0; j < n; ++j) {
        double mag = 0;
        for (int32_t kk = 0; kk < k; ++kk) {
          mag += std::abs(to_d(x[off + size_t(i) * k + kk]) * to_d(w[size_t(j) * k + kk]));
        }
        const double g = to_d(got[size_t(i) * n + j]), r = to_d(want[size_t(i) * n + j]);
        const double allowed = tol.rel * std::abs(r) + std::ldexp(mag, -20) + 1e-6;
        if (!(std::abs(g - r) <= allowed) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << i << "," << j << "] got " << g << " want " << r;
        }
      }
    }
    EXPECT_EQ(bad, 0u) << "rep " << rep;
  }
}

TEST(LinearGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(21);
  for (bool bias : {false, true}) {
    run<float, float>(ctx, 3, 64, 45, bias, false, rng);
    run<float, float>(ctx, 17, 576, 576, bias, true, rng);
    run<bf16, bf16>(ctx, 1, 576, 576, bias, false, rng);
    run<bf16, bf16>(ctx, 7, 1536, 576, bias, false, rng);
    run<bf16, bf16>(ctx, 130, 192, 64, bias, true, rng);
    run<bf16, float>(ctx, 4, 4096, 1024, bias, false, rng);  // logits
    run<fp16, fp16>(ctx, 9, 320, 896, bias, false, rng);
    run<fp16, float>(ctx, 2, 100, 64, bias, false, rng);
  }
  run<bf16, bf16>(ctx, 256, 896, 896, true, false, rng);
}

TEST(LinearGpu, ZeroRowsIsANoOp) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  kernel::LinearParams p;
  p.n = 4;
  p.k = 4;
  kernel::launchLinear(p, ctx, nullptr);
  ES_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace es
