// The gemv fused with a decode layer's norms (LinearParams::normWeight / accumulate, linear.h),
// for every (rowTiles, kSplit) configuration, m = 1, 7, 9, 16, k = 136, 1000, 1024, 4096 (rows
// of very different scale), bf16 and f16:
//  * with normWeight each output is the product of the exactly normalized rows (double on the
//    host) within the bound of its two roundings (x * w, then the output), as the unfused
//    launchRmsNorm + gemv is;
//  * a row's output does not depend on m: the rows of a 16-row call equal 1-row calls bit for bit
//    (what keeps greedy speculative decoding equal to plain decoding);
//  * the SwiGLU epilogue with the norm equals the normed plain output followed by launchSwiglu,
//    and accumulate equals the plain output followed by launchRmsNorm's residual add, bit for bit;
//  * launchLinear takes both through the gemv up to 16 rows, stays close to the CPU reference,
//    and rejects them, naming the parameter, where the gemv does not take the call.
// Outputs are poisoned before every launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/errors.h"
#include "forward_ops_gpu_test_util.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"

namespace es {
namespace {

using namespace fwdtest;
using kernel::detail::GemvConfig;
using kernel::detail::GemvEpilogue;

constexpr float kEps = 1e-6f;

// x [m, k] with row r scaled by 4^(r % 5 - 2) (so the rows' RMS differ by up to 256x), the norm
// weight [k], W [n, k], bias [n] and a residual y0 [m, n].
template <typename T>
struct Problem {
  int32_t m, n, k;
  std::vector<T> x, normW, w, bias, y0;
  test::DeviceArray<T> dX, dNormW, dW, dBias, dY0;

  Problem(int32_t m_, int32_t n_, int32_t k_, std::mt19937& rng)
      : m(m_),
        n(n_),
        k(k_),
        x(size_t(m_) * k_),
        normW(size_t(k_)),
        w(size_t(n_) * k_),
        bias(size_t(n_)),
        y0(size_t(m_) * n_),
        dX(0),
        dNormW(0),
        dW(0),
        dBias(0),
        dY0(0) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int32_t r = 0; r < m; ++r) {
      const float scale = std::ldexp(1.0f, 2 * (r % 5 - 2));
      for (int32_t c = 0; c < k; ++c) x[size_t(r) * k + c] = cast<T>(scale * u(rng));
    }
    fill(normW, rng, 0.5f, 1.5f);
    fill(w, rng, -0.5f, 0.5f);
    fill(bias, rng, -1.0f, 1.0f);
    fill(y0, rng, -4.0f, 4.0f);
    dX = test::DeviceArray<T>(x);
    dNormW = test::DeviceArray<T>(normW);
    dW = test::DeviceArray<T>(w);
    dBias = test::DeviceArray<T>(bias);
    dY0 = test::DeviceArray<T>(y0);
  }
  kernel::LinearParams linear(const void* xp, void* y, bool withBias) const {
    kernel::LinearParams p{.x = xp,
                           .w = dW.get(),
                           .bias = withBias ? dBias.get() : nullptr,
                           .y = y,
                           .m = m,
                           .n = n,
                           .k = k,
                           .dtype = dtype_of<T>,
                           .outDtype = dtype_of<T>};
    return p;
  }
  // The exact product of the normalized rows (double) and, per output, the sum of |W * xn| +
  // |bias| that bounds its rounding errors.
  void exact(std::vector<double>& want, std::vector<double>& mag) const {
    want.assign(size_t(m) * n, 0.0);
    mag.assign(size_t(m) * n, 0.0);
    for (int32_t r = 0; r < m; ++r) {
      double ss = 0.0;
      for (int32_t c = 0; c < k; ++c) ss += to_d(x[size_t(r) * k + c]) * to_d(x[size_t(r) * k + c]);
      const double scale = 1.0 / std::sqrt(ss / k + double{kEps});
      for (int32_t j = 0; j < n; ++j) {
        double sum = to_d(bias[size_t(j)]), absSum = std::abs(sum);
        for (int32_t c = 0; c < k; ++c) {
          const double term = to_d(w[size_t(j) * k + c]) * to_d(x[size_t(r) * k + c]) * scale *
                              to_d(normW[size_t(c)]);
          sum += term;
          absSum += std::abs(term);
        }
        want[size_t(r) * n + j] = sum;
        mag[size_t(r) * n + j] = absSum;
      }
    }
  }
  // launchRmsNorm of x without a residual, into out [m, k].
  void normInto(void* out) const {
    kernel::RmsNormParams r{.x = dX.get(),
                            .weight = dNormW.get(),
                            .out = out,
                            .rows = m,
                            .hiddenSize = k,
                            .eps = kEps,
                            .dtype = dtype_of<T>};
    kernel::launchRmsNorm(r, nullptr);
  }
};

// The residual launchRmsNorm leaves after adding `product` [m, n] to a copy of y0.
template <typename T>
std::vector<T> residualAfterNorm(const Problem<T>& pr, const test::DeviceArray<T>& product) {
  test::DeviceArray<T> residual(pr.y0), normed(pr.y0.size()),
      ones(std::vector<T>(size_t(pr.n), cast<T>(1.0f)));
  kernel::RmsNormParams r{.x = product.get(),
                          .residual = residual.get(),
                          .weight = ones.get(),
                          .out = normed.get(),
                          .rows = pr.m,
                          .hiddenSize = pr.n,
                          .eps = kEps,
                          .dtype = dtype_of<T>};
  kernel::launchRmsNorm(r, nullptr);
  return residual.download();
}

// |got - want| <= 2u * mag + u * |want| (u: the dtype's unit roundoff): one rounding of each
// normalized x element (relative u, at most u * mag on the sum), one of the output, slack for
// the fp32 sums.
template <typename T>
void expectWithinRounding(const std::vector<T>& got, const std::vector<double>& want,
                          const std::vector<double>& mag, const char* what) {
  const double u = std::is_same_v<T, bf16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_d(got[i]);
    if (!(std::abs(g - want[i]) <= 2 * u * mag[i] + u * std::abs(want[i])) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << " want " << want[i] << " (magnitude "
                    << mag[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " outputs out of bounds";
}

template <typename T>
kernel::LinearParams withNorm(kernel::LinearParams p, const Problem<T>& pr) {
  p.normWeight = pr.dNormW.get();
  p.normEps = kEps;
  return p;
}

template <typename T>
void everyConfiguration(int32_t m, int32_t k, std::mt19937& rng) {
  constexpr int32_t kN = 96;  // 6 16-row tiles (interleaved gate/up: 48 features)
  Problem<T> pr(m, kN, k, rng);
  std::vector<double> want, mag;
  pr.exact(want, mag);
  test::DeviceArray<T> normed(size_t(m) * k), unfused(size_t(m) * kN), fused(size_t(m) * kN),
      oneRow(static_cast<size_t>(kN)), swigluFused(size_t(m) * kN / 2),
      swigluWant(size_t(m) * kN / 2);
  for (int32_t tiles : {1, 2}) {
    for (int32_t split : {1, 2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "m " << m << " k " << k << " " << dtype_name(dtype_of<T>)
                                        << " rowTiles " << tiles << " kSplit " << split);
      const GemvConfig cfg{tiles, split};
      normed.poison();
      pr.normInto(normed.get());
      unfused.poison();
      kernel::detail::launchLinearGemv(pr.linear(normed.get(), unfused.get(), true), cfg, nullptr);
      expectWithinRounding(unfused.download(), want, mag, "rmsnorm + gemv vs exact");
      fused.poison();
      kernel::detail::launchLinearGemv(withNorm(pr.linear(pr.dX.get(), fused.get(), true), pr), cfg,
                                       nullptr);
      const std::vector<T> got = fused.download();
      expectWithinRounding(got, want, mag, "fused norm vs exact");

      // Row r alone gives row r of the m-row call, bit for bit.
      for (int32_t r = 0; r < m; ++r) {
        kernel::LinearParams p =
            withNorm(pr.linear(pr.dX.get() + size_t(r) * k, oneRow.get(), true), pr);
        p.m = 1;
        oneRow.poison();
        kernel::detail::launchLinearGemv(p, cfg, nullptr);
        const std::vector<T> row = oneRow.download();
        expect_bits(row,
                    std::vector<T>(got.begin() + size_t(r) * kN, got.begin() + size_t(r + 1) * kN),
                    "a row alone vs in the m-row call");
      }

      // SwiGLU epilogue with the norm = the normed plain output, then launchSwiglu.
      kernel::SwigluParams sw{.gateUp = fused.get(),
                              .out = swigluWant.get(),
                              .rows = m,
                              .intermediateSize = kN / 2,
                              .dtype = dtype_of<T>,
                              .layout = kernel::GateUpLayout::kInterleaved8};
      swigluWant.poison();
      kernel::launchSwiglu(sw, nullptr);
      swigluFused.poison();
      kernel::detail::launchLinearGemv(
          withNorm(pr.linear(pr.dX.get(), swigluFused.get(), true), pr), cfg, nullptr,
          GemvEpilogue::kSwiglu);
      expect_bits(swigluFused.download(), swigluWant.download(),
                  "fused norm + SwiGLU vs + launchSwiglu");

      // accumulate, without and with the norm = the same product, then launchRmsNorm's add.
      for (bool norm : {false, true}) {
        SCOPED_TRACE(norm ? "accumulate with the input norm" : "accumulate");
        test::DeviceArray<T> product(size_t(m) * kN), residual(pr.y0);
        kernel::LinearParams p = pr.linear(pr.dX.get(), product.get(), true);
        if (norm) p = withNorm(p, pr);
        product.poison();
        kernel::detail::launchLinearGemv(p, cfg, nullptr);
        p.y = residual.get();
        p.accumulate = true;
        kernel::detail::launchLinearGemv(p, cfg, nullptr);
        expect_bits(residual.download(), residualAfterNorm(pr, product),
                    "accumulate vs gemv + rmsnorm's residual add");
      }
    }
  }
}

TEST(GemvNormGpu, EveryConfiguration) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(91);
  for (int32_t m : {1, 7, 9, 16}) {
    for (int32_t k : {136, 1000, 1024, 4096}) {
      everyConfiguration<bf16>(m, k, rng);
      everyConfiguration<fp16>(m, k, rng);
    }
  }
}

TEST(GemvNormGpu, LauncherFusesUpTo16RowsAndMatchesTheCpuReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(5);
  kernel::LinearContext ctx;
  for (int32_t m : {1, 16}) {
    SCOPED_TRACE(::testing::Message() << "m " << m);
    Problem<bf16> pr(m, 1024, 1024, rng);
    test::DeviceArray<bf16> y(pr.y0);
    kernel::LinearParams p = pr.linear(pr.dX.get(), y.get(), true);
    p.normWeight = pr.dNormW.get();
    p.normEps = kEps;
    p.accumulate = true;
    EXPECT_TRUE(kernel::linearFusesRowNorm(m));
    kernel::launchLinear(p, ctx, nullptr);
    // The CPU reference composes the unfused steps on host copies: the product within two
    // roundings of each other (the normalized x, the output) plus one of the sum with y0.
    std::vector<bf16> cpu = pr.y0;
    kernel::LinearParams h = p;
    h.x = pr.x.data();
    h.w = pr.w.data();
    h.bias = pr.bias.data();
    h.y = cpu.data();
    h.normWeight = pr.normW.data();
    ref::linear(h);
    std::vector<double> want, mag;
    pr.exact(want, mag);
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] = to_d(cpu[i]);
      mag[i] = 2 * mag[i] + std::abs(to_d(pr.y0[i])) + std::abs(want[i]);
    }
    expectWithinRounding(y.download(), want, mag, "launchLinear vs ref::linear");
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
  kernel::LinearParams p = pr.linear(pr.dX.get(), y.get(), false);
  p.normWeight = pr.dNormW.get();
  try {
    kernel::launchLinear(p, ctx, nullptr);
    ADD_FAILURE() << "normWeight at m = 17 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("normWeight"), std::string::npos) << e.what();
  }
  p.normWeight = nullptr;
  p.accumulate = true;
  p.m = 16;
  p.algo = kernel::LinearAlgo::kCublasLt;
  try {
    kernel::launchLinear(p, ctx, nullptr);
    ADD_FAILURE() << "accumulate through cuBLASLt was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("accumulate"), std::string::npos) << e.what();
  }
  const std::vector<bf16> after = y.download();
  expect_bits(after, pr.y0, "y after the rejected calls");
}

}  // namespace
}  // namespace es
