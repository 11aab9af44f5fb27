// GPU parity of launchLinear with the CPU reference, on both CUDA paths:
//  * cuBLASLt (forced with LinearAlgo::kCublasLt, and kAuto outside the gemv's domain): f32 (true
//    fp32, no TF32), f16 and bf16 inputs, same-dtype and f32 (logits) outputs, with and without
//    bias (epilogue and the separate f32 bias kernel), odd K/N, misaligned x, repeated calls
//    reusing the cached plan;
//  * the decode gemv (forced with kGemv, and kAuto inside its domain): m = 1, 2, 5, 16 at the
//    real shapes 4096 x 4096, 1024 x 4096 and 151936 x 1024 (sampled output columns: the first
//    and last 64 and 256 random others), odd n, k not a multiple of 32, bias, f32 and 16-bit
//    outputs, every (rowTiles, kSplit) configuration and x-tile count directly, capture in a
//    CUDA graph, and the rejections of unsupported parameters.
// Outputs are poisoned before every launch. Tolerance: the table's rel term, plus fp32
// accumulation-order slack 2^-20 * sum|x*w|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"

namespace es {
namespace {

using namespace fwdtest;
using kernel::LinearAlgo;

// Host inputs and their device copies; x starts `off` elements into its buffer.
template <typename T>
struct Problem {
  int32_t m, n, k;
  size_t off;
  std::vector<T> x, w, bias;
  test::DeviceArray<T> dX, dW, dB;

  Problem(int32_t m_, int32_t n_, int32_t k_, size_t off_, std::mt19937& rng)
      : m(m_),
        n(n_),
        k(k_),
        off(off_),
        x(off_ + size_t(m_) * k_),
        w(size_t(n_) * k_),
        bias(n_),
        dX(0),
        dW(0),
        dB(0) {
    fill(x, rng, -1.0f, 1.0f);
    fill(w, rng, -1.0f, 1.0f);
    fill(bias, rng, -1.0f, 1.0f);
    dX = test::DeviceArray<T>(x);
    dW = test::DeviceArray<T>(w);
    dB = test::DeviceArray<T>(bias);
  }
  // Same W and bias, fresh x with m rows.
  void resetX(int32_t m_, std::mt19937& rng) {
    m = m_;
    x.assign(off + size_t(m) * k, T{});
    fill(x, rng, -1.0f, 1.0f);
    dX = test::DeviceArray<T>(x);
  }
  kernel::LinearParams params(void* y, DType out, bool withBias, LinearAlgo algo) const {
    kernel::LinearParams p{.x = dX.get() + off,
                           .w = dW.get(),
                           .bias = withBias ? dB.get() : nullptr,
                           .y = y,
                           .m = m,
                           .n = n,
                           .k = k,
                           .dtype = dtype_of<T>,
                           .outDtype = out,
                           .algo = algo};
    return p;
  }
};

// Every output column, or (sampled) the first and last 64 and 256 random others, sorted.
std::vector<int32_t> columns(int32_t n, bool sampled, std::mt19937& rng) {
  std::vector<int32_t> cols;
  if (!sampled || n <= 384) {
    for (int32_t j = 0; j < n; ++j) cols.push_back(j);
    return cols;
  }
  for (int32_t j = 0; j < 64; ++j) cols.push_back(j);
  for (int32_t j = n - 64; j < n; ++j) cols.push_back(j);
  std::uniform_int_distribution<int32_t> d(64, n - 65);
  for (int i = 0; i < 256; ++i) cols.push_back(d(rng));
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  return cols;
}

// Launches through `launch(params)` twice (poisoned y each time) and compares the chosen
// columns with the CPU reference run on those columns' rows of W.
template <typename T, typename O, typename Launch>
void check(const Problem<T>& pr, bool withBias, const std::vector<int32_t>& cols, Launch&& launch) {
  SCOPED_TRACE(::testing::Message()
               << "m " << pr.m << " n " << pr.n << " k " << pr.k << " bias " << withBias
               << " offset " << pr.off << " " << dtype_name(dtype_of<T>) << " -> "
               << dtype_name(dtype_of<O>) << " columns " << cols.size());
  const int32_t m = pr.m, k = pr.k, nc = int32_t(cols.size());
  std::vector<T> wSub(size_t(nc) * k), bSub(nc);
  for (int32_t j = 0; j < nc; ++j) {
    std::copy_n(pr.w.begin() + size_t(cols[j]) * k, k, wSub.begin() + size_t(j) * k);
    bSub[j] = pr.bias[cols[j]];
  }
  std::vector<O> want(size_t(m) * nc);
  kernel::LinearParams r{.x = pr.x.data() + pr.off,
                         .w = wSub.data(),
                         .bias = withBias ? bSub.data() : nullptr,
                         .y = want.data(),
                         .m = m,
                         .n = nc,
                         .k = k,
                         .dtype = dtype_of<T>,
                         .outDtype = dtype_of<O>};
  ref::linear(r);

  test::DeviceArray<O> dY(size_t(m) * pr.n);
  const kernel::LinearParams p = pr.params(dY.get(), dtype_of<O>, withBias, LinearAlgo::kAuto);
  const Tol tol = tol_for<O>();
  std::vector<double> allowed(want.size());
  for (int32_t i = 0; i < m; ++i) {
    const T* xr = pr.x.data() + pr.off + size_t(i) * k;
    for (int32_t j = 0; j < nc; ++j) {
      const T* wr = wSub.data() + size_t(j) * k;
      double mag = 0;
      for (int32_t kk = 0; kk < k; ++kk) mag += std::abs(to_d(xr[kk]) * to_d(wr[kk]));
      allowed[size_t(i) * nc + j] =
          tol.rel * std::abs(to_d(want[size_t(i) * nc + j])) + std::ldexp(mag, -20) + 1e-6;
    }
  }
  for (int rep = 0; rep < 2; ++rep) {
    dY.poison();
    launch(p);
    const std::vector<O> got = dY.download();
    size_t bad = 0;
    for (int32_t i = 0; i < m; ++i) {
      for (int32_t j = 0; j < nc; ++j) {
        const size_t e = size_t(i) * nc + j;
        const double g = to_d(got[size_t(i) * pr.n + cols[j]]), w = to_d(want[e]);
        if (!(std::abs(g - w) <= allowed[e]) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << i << "," << cols[j] << "] got " << g << " want " << w;
        }
      }
    }
    EXPECT_EQ(bad, 0u) << "rep " << rep;
  }
}

// launchLinear with p.algo = algo.
auto viaLauncher(kernel::LinearContext& ctx, LinearAlgo algo, cudaStream_t stream = nullptr) {
  return [&ctx, algo, stream](kernel::LinearParams p) {
    p.algo = algo;
    kernel::launchLinear(p, ctx, stream);
  };
}

template <typename T, typename O>
void run(kernel::LinearContext& ctx, LinearAlgo algo, int32_t m, int32_t n, int32_t k,
         bool withBias, bool offsetX, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "algo " << int(algo));
  Problem<T> pr(m, n, k, offsetX ? 1 : 0, rng);
  check<T, O>(pr, withBias, columns(n, false, rng), viaLauncher(ctx, algo));
}

TEST(LinearGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(21);
  // kAuto: the gemv where it applies (m <= 16, 16-bit, k % 8 == 0, aligned), else cuBLASLt;
  // kCublasLt: cuBLASLt for every case.
  for (LinearAlgo algo : {LinearAlgo::kAuto, LinearAlgo::kCublasLt}) {
    for (bool bias : {false, true}) {
      run<float, float>(ctx, algo, 3, 64, 45, bias, false, rng);
      run<float, float>(ctx, algo, 17, 576, 576, bias, true, rng);
      run<bf16, bf16>(ctx, algo, 1, 576, 576, bias, false, rng);
      run<bf16, bf16>(ctx, algo, 7, 1536, 576, bias, false, rng);
      run<bf16, bf16>(ctx, algo, 3, 256, 64, bias, true, rng);  // misaligned x: cuBLASLt
      run<bf16, bf16>(ctx, algo, 130, 192, 64, bias, true, rng);
      run<bf16, float>(ctx, algo, 4, 4096, 1024, bias, false, rng);  // logits
      run<fp16, fp16>(ctx, algo, 9, 320, 896, bias, false, rng);
      run<fp16, float>(ctx, algo, 2, 100, 64, bias, false, rng);
      run<bf16, bf16>(ctx, algo, 5, 40, 60, bias, false, rng);  // k % 8 != 0: cuBLASLt
    }
    run<bf16, bf16>(ctx, algo, 256, 896, 896, true, false, rng);
  }
}

// The gemv, forced, at decode shapes.
TEST(LinearGpu, GemvDecodeShapes) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(8);
  const auto gemv = viaLauncher(ctx, LinearAlgo::kGemv);
  for (int32_t m : {1, 2, 5, 16}) {
    Problem<bf16> o(m, 4096, 4096, 0, rng);  // Qwen3-8B o_proj
    check<bf16, bf16>(o, false, columns(o.n, false, rng), gemv);
    check<bf16, bf16>(o, true, columns(o.n, true, rng), gemv);
    Problem<bf16> kv(m, 1024, 4096, 0, rng);  // Qwen3-8B k_proj
    check<bf16, bf16>(kv, true, columns(kv.n, false, rng), gemv);
    check<bf16, float>(kv, false, columns(kv.n, false, rng), gemv);
    Problem<bf16> odd(m, 333, 1000, 0, rng);  // odd n, k % 32 != 0
    check<bf16, bf16>(odd, true, columns(odd.n, false, rng), gemv);
    check<bf16, float>(odd, true, columns(odd.n, false, rng), gemv);
    Problem<fp16> h(m, 1027, 2056, 0, rng);
    check<fp16, fp16>(h, true, columns(h.n, false, rng), gemv);
    check<fp16, float>(h, false, columns(h.n, false, rng), gemv);
    Problem<bf16> tiny(m, 1, 8, 0, rng);
    check<bf16, bf16>(tiny, true, columns(tiny.n, false, rng), gemv);
    Problem<bf16> small(m, 17, 24, 0, rng);
    check<bf16, float>(small, true, columns(small.n, false, rng), gemv);
  }
}

// Qwen3-0.6B lm_head (151936 x 1024), f32 logits, sampled output columns.
TEST(LinearGpu, GemvLmHeadSampled) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(151936);
  Problem<bf16> head(1, 151936, 1024, 0, rng);
  for (int32_t m : {1, 2, 5, 16}) {
    head.resetX(m, rng);
    check<bf16, float>(head, false, columns(head.n, true, rng),
                       viaLauncher(ctx, LinearAlgo::kGemv));
    check<bf16, bf16>(head, m == 5, columns(head.n, true, rng),
                      viaLauncher(ctx, LinearAlgo::kAuto));
  }
}

// Every kernel instantiation: rowTiles 1/2 x one/two x tiles x kSplit 1..8 (clusters), with
// tails in n (100 = 3 * 32 + 4), in k (1000 = 31 * 32 + 8) and warps that get no K block.
TEST(LinearGpu, GemvEveryConfiguration) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(90);
  for (int32_t m : {1, 7, 9, 16}) {
    Problem<bf16> pr(m, 100, 1000, 0, rng);
    Problem<fp16> ph(m, 100, 1000, 0, rng);
    for (int32_t tiles : {1, 2}) {
      for (int32_t split : {1, 2, 4, 8}) {
        SCOPED_TRACE(::testing::Message() << "rowTiles " << tiles << " kSplit " << split);
        const kernel::detail::GemvConfig cfg{tiles, split};
        const auto direct = [cfg](const kernel::LinearParams& p) {
          kernel::detail::launchLinearGemv(p, cfg, nullptr);
        };
        check<bf16, bf16>(pr, true, columns(pr.n, false, rng), direct);
        check<bf16, float>(pr, false, columns(pr.n, false, rng), direct);
        check<fp16, fp16>(ph, split == 2, columns(ph.n, false, rng), direct);
      }
    }
  }
}

// Row invariance (linear_gemv.h): through kAuto, each row of a 16-row x gives the same bits as
// that row alone (m = 1) and inside m = 5: the launcher keeps the K split of m = 1 (rowTiles may
// change). Shapes of SmolLM2-135M and Qwen3-8B, with bias, 16-bit and f32 outputs.
TEST(LinearGpu, GemvRowsDoNotDependOnTheOtherRows) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(16);
  struct Shape {
    int32_t n, k;
  };
  for (const Shape sh : {Shape{576, 576}, Shape{3072, 576}, Shape{576, 1536}, Shape{49152, 576},
                         Shape{6144, 4096}, Shape{4096, 12288}, Shape{8192, 4096}}) {
    SCOPED_TRACE(::testing::Message() << sh.n << " x " << sh.k);
    Problem<bf16> full(16, sh.n, sh.k, 0, rng);
    for (const DType out : {DType::kBF16, DType::kF32}) {
      const size_t esize = out == DType::kF32 ? 4 : 2;
      test::DeviceArray<uint8_t> y16(size_t(16) * sh.n * esize), y1(size_t(sh.n) * esize),
          y5(size_t(5) * sh.n * esize);
      kernel::launchLinear(full.params(y16.get(), out, true, LinearAlgo::kAuto), ctx, nullptr);
      const std::vector<uint8_t> all = y16.download();
      size_t bad = 0;
      for (int32_t r = 0; r < 16; ++r) {
        kernel::LinearParams one = full.params(y1.get(), out, true, LinearAlgo::kAuto);
        one.x = full.dX.get() + size_t(r) * sh.k;
        one.m = 1;
        y1.poison();
        kernel::launchLinear(one, ctx, nullptr);
        const std::vector<uint8_t> row = y1.download();
        bad += !std::equal(row.begin(), row.end(), all.begin() + size_t(r) * sh.n * esize);
      }
      kernel::LinearParams five = full.params(y5.get(), out, true, LinearAlgo::kAuto);
      five.x = full.dX.get() + size_t(11) * sh.k;  // rows 11 ... 15
      five.m = 5;
      kernel::launchLinear(five, ctx, nullptr);
      const std::vector<uint8_t> part = y5.download();
      bad += !std::equal(part.begin(), part.end(), all.begin() + size_t(11) * sh.n * esize);
      EXPECT_EQ(bad, 0u) << "rows differing from the 16-row call (out " << dtype_name(out) << ")";
    }
  }
}

// launchLinear (gemv, single CTA per tile and clusters; cuBLASLt) recorded into a CUDA graph
// and replayed: no allocation, synchronisation or host read inside.
TEST(LinearGpu, CapturedInAGraph) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(7);
  cudaStream_t stream;
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (LinearAlgo algo : {LinearAlgo::kGemv, LinearAlgo::kCublasLt}) {
    for (int32_t m : {1, 16}) {
      for (int32_t n : {151936 / 32, 1024}) {  // 1024: kSplit > 1 (a cluster launch)
        Problem<bf16> pr(m, n, 1024, 0, rng);
        SCOPED_TRACE(::testing::Message() << "algo " << int(algo));
        // cuBLASLt chooses its plan on the first, eager, call; the graph replays it.
        kernel::LinearParams warm = pr.params(nullptr, DType::kF32, false, algo);
        test::DeviceArray<float> scratch(size_t(m) * n);
        warm.y = scratch.get();
        kernel::launchLinear(warm, ctx, stream);
        ES_CUDA_CHECK(cudaStreamSynchronize(stream));
        check<bf16, float>(pr, false, columns(n, true, rng), [&](kernel::LinearParams p) {
          p.algo = algo;
          ES_CUDA_CHECK(cudaDeviceSynchronize());  // the poisoning memset (legacy stream)
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          ES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          kernel::launchLinear(p, ctx, stream);
          ES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
          ES_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
          ES_CUDA_CHECK(cudaGraphLaunch(exec, stream));
          ES_CUDA_CHECK(cudaStreamSynchronize(stream));
          ES_CUDA_CHECK(cudaGraphExecDestroy(exec));
          ES_CUDA_CHECK(cudaGraphDestroy(graph));
        });
      }
    }
  }
  ES_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(LinearGpu, GemvRejectsUnsupportedParams) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  test::DeviceArray<bf16> x(17 * 64 + 8), w(64 * 64 + 8), y(17 * 64);
  test::DeviceArray<float> xf(64), wf(64 * 64), yf(64);
  auto make = [&] {
    kernel::LinearParams p{.x = x.get(), .w = w.get(), .y = y.get(), .m = 1, .n = 64, .k = 64};
    p.dtype = p.outDtype = DType::kBF16;
    p.algo = LinearAlgo::kGemv;
    return p;
  };
  kernel::LinearParams p = make();
  p.dtype = p.outDtype = DType::kF32;
  p.x = xf.get();
  p.w = wf.get();
  p.y = yf.get();
  test::expectInvalidArgument([&] { kernel::launchLinear(p, ctx, nullptr); }, "params");
  p = make();
  p.m = 17;
  test::expectInvalidArgument([&] { kernel::launchLinear(p, ctx, nullptr); }, "params");
  p = make();
  p.k = 60;
  test::expectInvalidArgument([&] { kernel::launchLinear(p, ctx, nullptr); }, "params");
  p = make();
  p.x = x.get() + 1;
  test::expectInvalidArgument([&] { kernel::launchLinear(p, ctx, nullptr); }, "params");
  p = make();
  p.w = w.get() + 4;
  test::expectInvalidArgument([&] { kernel::launchLinear(p, ctx, nullptr); }, "params");
  p = make();
  test::expectInvalidArgument(
      [&] {
        kernel::detail::launchLinearGemv(p, {3, 1}, nullptr);
      },
      "rowTiles");
  test::expectInvalidArgument(
      [&] {
        kernel::detail::launchLinearGemv(p, {1, 3}, nullptr);
      },
      "kSplit");
  ES_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(LinearGpu, ZeroRowsIsANoOp) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  kernel::LinearParams p;
  p.n = 4;
  p.k = 4;
  kernel::launchLinear(p, ctx, nullptr);
  p.algo = LinearAlgo::kGemv;
  kernel::launchLinear(p, ctx, nullptr);
  ES_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace es
