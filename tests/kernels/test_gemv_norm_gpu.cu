// The gemv fused with a decode layer's norms (LinearParams::normWeight / accumulate, linear.h),
// for every (rowTiles, kSplit) configuration, m = 1, 7, 9, 16, k = 144, 1008, 1024, 4096 (rows
// of very different scale), bf16 and f16, bit for bit:
//  * with normWeight (and the rows' group sums of squares from ref::rmsGroupSquares) it equals
//    launchRmsNorm followed by the plain gemv, with the plain and the SwiGLU epilogues (so
//    launchRmsNorm adds its squares in rms_groups.cuh's order too);
//  * with accumulate it equals the plain gemv followed by launchRmsNorm's residual add, also
//    with normWeight, and squaresOut holds ref::rmsGroupSquares of the updated rows;
//  * launchLinear takes both through the gemv up to 16 rows (equal to the CPU reference within
//    rounding) and rejects them, naming the parameter, where the gemv does not take the call.
// Outputs are poisoned before every launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/env_switch.h"
#include "common/errors.h"
#include "forward_ops_gpu_test_util.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"
#include "kernels/rmsnorm.h"

namespace es {
namespace {

using namespace fwdtest;
using kernel::detail::GemvConfig;
using kernel::detail::GemvEpilogue;

constexpr float kEps = 1e-6f;

// x [m, k] with row r scaled by 4^(r % 5 - 2) (so the rows' RMS differ by up to 256x) and its
// group sums of squares [m, k / 16], the norm weight [k], W [n, k], bias [n], a residual y0 [m, n].
template <typename T>
struct Problem {
  int32_t m, n, k;
  std::vector<T> x, norm_w, w, bias, y0;
  std::vector<float> x_squares;
  test::DeviceArray<T> d_x, d_norm_w, d_w, d_bias;
  test::DeviceArray<float> d_x_squares;

  Problem(int32_t m_, int32_t n_, int32_t k_, std::mt19937& rng)
      : m(m_), n(n_), k(k_), x(size_t(m_) * k_), norm_w(size_t(k_)), w(size_t(n_) * k_),
        bias(size_t(n_)), y0(size_t(m_) * n_), x_squares(size_t(m_) * k_ / 16), d_x(0),
        d_norm_w(0), d_w(0), d_bias(0), d_x_squares(0) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int32_t r = 0; r < m; ++r) {
      const float scale = std::ldexp(1.0f, 2 * (r % 5 - 2));
      for (int32_t c = 0; c < k; ++c) x[size_t(r) * k + c] = cast<T>(scale * u(rng));
    }
    fill(norm_w, rng, 0.5f, 1.5f);
    fill(w, rng, -0.5f, 0.5f);
    fill(bias, rng, -1.0f, 1.0f);
    fill(y0, rng, -4.0f, 4.0f);
    ref::rmsGroupSquares(x.data(), dtype_of<T>, m, k, x_squares.data());
    d_x = test::DeviceArray<T>(x);
    d_norm_w = test::DeviceArray<T>(norm_w);
    d_w = test::DeviceArray<T>(w);
    d_bias = test::DeviceArray<T>(bias);
    d_x_squares = test::DeviceArray<float>(x_squares);
  }
  kernel::LinearParams linear(const void* xp, void* y, bool with_bias) const {
    kernel::LinearParams p;
    p.x = xp; p.w = d_w.get(); p.bias = with_bias ? d_bias.get() : nullptr; p.y = y;
    p.m = m; p.n = n; p.k = k; p.dtype = dtype_of<T>; p.outDtype = dtype_of<T>;
    return p;
  }
  // The product of the normalized x, fused.
  kernel::LinearParams fused(void* y, bool with_bias) const {
    kernel::LinearParams p = linear(d_x.get(), y, with_bias);
    p.normWeight = d_norm_w.get();
    p.normSquares = d_x_squares.get();
    p.normEps = kEps;
    return p;
  }
  // launchRmsNorm of x without a residual, into out [m, k].
  void norm_into(void* out) const {
    kernel::RmsNormParams r;
    r.x = d_x.get(); r.weight = d_norm_w.get(); r.out = out;
    r.rows = m; r.hiddenSize = k; r.eps = kEps; r.dtype = dtype_of<T>;
    kernel::launchRmsNorm(r, nullptr);
  }
};

// The residual launchRmsNorm leaves after adding `product` [m, n] to a copy of y0.
template <typename T>
std::vector<T> residual_after_norm(const Problem<T>& pr, const test::DeviceArray<T>& product) {
  test::DeviceArray<T> residual(pr.y0), normed(pr.y0.size()),
      ones(std::vector<T>(size_t(pr.n), cast<T>(1.0f)));
  kernel::RmsNormParams r;
  r.x = product.get(); r.residual = residual.get(); r.weight = ones.get(); r.out = normed.get();
  r.rows = pr.m; r.hiddenSize = pr.n; r.eps = kEps; r.dtype = dtype_of<T>;
  kernel::launchRmsNorm(r, nullptr);
  return residual.download();
}

template <typename T>
void every_configuration(int32_t m, int32_t k, std::mt19937& rng) {
  constexpr int32_t kN = 96;  // 6 16-row tiles (interleaved gate/up: 48 features)
  Problem<T> pr(m, kN, k, rng);
  test::DeviceArray<T> normed(size_t(m) * k), want(size_t(m) * kN), got(size_t(m) * kN),
      want_swiglu(size_t(m) * kN / 2), got_swiglu(size_t(m) * kN / 2);
  for (int32_t tiles : {1, 2}) {
    for (int32_t split : {1, 2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " k " << k << " "
                                        << dtype_name(dtype_of<T>) << " rowTiles " << tiles
                                        << " kSplit " << split);
      const GemvConfig cfg{tiles, split};
      normed.poison();
      pr.norm_into(normed.get());

      want.poison();
      kernel::detail::launchLinearGemv(pr.linear(normed.get(), want.get(), true), cfg, nullptr);
      got.poison();
      kernel::detail::launchLinearGemv(pr.fused(got.get(), true), cfg, nullptr);
      expect_bits(got.download(), want.download(), "fused norm vs rmsnorm + gemv");

      want_swiglu.poison();
      kernel::detail::launchLinearGemv(pr.linear(normed.get(), want_swiglu.get(), true), cfg,
                                       nullptr, GemvEpilogue::kSwiglu);
      got_swiglu.poison();
      kernel::detail::launchLinearGemv(pr.fused(got_swiglu.get(), true), cfg, nullptr,
                                       GemvEpilogue::kSwiglu);
      expect_bits(got_swiglu.download(), want_swiglu.download(),
                  "fused norm + SwiGLU vs rmsnorm + gemv + SwiGLU");

      // The residual add, without and with the input norm, and its sums of squares.
      for (bool with_norm : {false, true}) {
        SCOPED_TRACE(with_norm ? "accumulate with the input norm" : "accumulate");
        test::DeviceArray<T> product(size_t(m) * kN), residual(pr.y0);
        test::DeviceArray<float> squares(size_t(m) * kN / 16);
        product.poison();
        kernel::detail::launchLinearGemv(pr.linear(with_norm ? normed.get() : pr.d_x.get(),
                                                   product.get(), true),
                                         cfg, nullptr);
        kernel::LinearParams a = with_norm ? pr.fused(residual.get(), true)
                                           : pr.linear(pr.d_x.get(), residual.get(), true);
        a.accumulate = true;
        a.squaresOut = squares.get();
        squares.poison();
        kernel::detail::launchLinearGemv(a, cfg, nullptr);
        const std::vector<T> updated = residual.download();
        expect_bits(updated, residual_after_norm(pr, product),
                    "accumulate vs gemv + rmsnorm's residual add");
        std::vector<float> want_squares(squares.size());
        ref::rmsGroupSquares(updated.data(), dtype_of<T>, m, kN, want_squares.data());
        expect_bits(squares.download(), want_squares, "squaresOut vs ref::rmsGroupSquares");
      }
    }
  }
}

TEST(GemvNormGpu, EqualsTheUnfusedKernelsInEveryConfiguration) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(91);
  for (int32_t m : {1, 7, 9, 16}) {
    for (int32_t k : {144, 1008, 1024, 4096}) {
      every_configuration<bf16>(m, k, rng);
      every_configuration<fp16>(m, k, rng);
    }
  }
}

TEST(GemvNormGpu, LauncherFusesUpTo16RowsAndMatchesTheCpuReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(5);
  kernel::LinearContext ctx;
  for (int32_t m : {1, 16}) {
    SCOPED_TRACE(::testing::Message() << "m " << m);
    EXPECT_EQ(kernel::linearFusesRowNorm(m), env_switch_on("ES_GEMV_NORM"));
    Problem<bf16> pr(m, 1024, 1024, rng);
    test::DeviceArray<bf16> y(pr.y0);
    kernel::LinearParams p = pr.fused(y.get(), true);
    p.accumulate = true;
    kernel::launchLinear(p, ctx, nullptr);
    // The CPU reference composes ref::rmsNorm (its sums in double) and the plain product: within
    // one bf16 rounding of the normalized x (2^-8 of sum |W * xn|) and two of the output.
    std::vector<bf16> cpu = pr.y0;
    kernel::LinearParams h = p;
    h.x = pr.x.data(); h.w = pr.w.data(); h.bias = pr.bias.data(); h.y = cpu.data();
    h.normWeight = pr.norm_w.data(); h.normSquares = pr.x_squares.data();
    ref::linear(h);
    const std::vector<bf16> got = y.download();
    size_t bad = 0;
    for (int32_t r = 0; r < m; ++r) {
      double ss = 0.0;
      for (int32_t c = 0; c < pr.k; ++c) ss += to_d(pr.x[size_t(r) * pr.k + c]) * to_d(pr.x[size_t(r) * pr.k + c]);
      const double scale = 1.0 / std::sqrt(ss / pr.k + kEps);
      for (int32_t j = 0; j < pr.n; ++j) {
        double mag = std::abs(to_d(pr.bias[size_t(j)]));
        for (int32_t c = 0; c < pr.k; ++c) {
          mag += std::abs(to_d(pr.w[size_t(j) * pr.k + c]) * to_d(pr.x[size_t(r) * pr.k + c]) * scale *
                          to_d(pr.norm_w[size_t(c)]));
        }
        const size_t i = size_t(r) * pr.n + size_t(j);
        const double g = to_d(got[i]), want = to_d(cpu[i]);
        const double bound = std::ldexp(1.0, -7) * mag + std::ldexp(1.0, -7) * (std::abs(want) + std::abs(to_d(pr.y0[i])));
        if (!(std::abs(g - want) <= bound) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << r << ", " << j << "]: GPU " << g << " CPU " << want << " bound " << bound;
        }
      }
    }
    EXPECT_EQ(bad, 0u);
  }
}

TEST(GemvNormGpu, LauncherRejectsThemWhereTheGemvDoesNotRun) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(6);
  kernel::LinearContext ctx;
  EXPECT_FALSE(kernel::linearFusesRowNorm(17));
  EXPECT_FALSE(kernel::linearFusesRowNorm(0));
  Problem<bf16> pr(17, 64, 128, rng);
  test::DeviceArray<bf16> y(pr.y0);
  kernel::LinearParams p = pr.fused(y.get(), false);
  try {
    kernel::launchLinear(p, ctx, nullptr);
    ADD_FAILURE() << "normWeight at m = 17 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("normWeight"), std::string::npos) << e.what();
  }
  p = pr.linear(pr.d_x.get(), y.get(), false);
  p.accumulate = true;
  p.m = 16;
  p.algo = kernel::LinearAlgo::kCublasLt;
  try {
    kernel::launchLinear(p, ctx, nullptr);
    ADD_FAILURE() << "accumulate through cuBLASLt was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accumulate"), std::string::npos) << e.what();
  }
  expect_bits(y.download(), pr.y0, "y after the rejected calls");
}

}  // namespace
}  // namespace es
