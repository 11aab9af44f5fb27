// The gate/up projection with SwiGLU on the GPU (kernels/gate_up_swiglu.h):
//  * the gemv's SwiGLU epilogue (GemvEpilogue::kSwiglu) equals the plain gemv followed by
//    launchSwiglu on the interleaved layout bit for bit, for every (rowTiles, kSplit)
//    configuration, m = 1, 7, 9, 16, bf16 and f16, with and without bias, with tails in k;
//  * launchGateUpSwiglu at real shapes (Qwen3-0.6B, SmolLM2-135M), m = 1, 4, 16 (fused) and 20
//    (cuBLASLt, then the interleaved SwiGLU kernel): the interleaved layout gives the same bits
//    as the halves layout, the result is the CPU SwiGLU of the GPU's own gate/up outputs bit for
//    bit, and it is close to the all-CPU reference;
//  * the fused path leaves the scratch untouched, and it
//    runs inside a CUDA graph.
// Outputs are poisoned before every launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/gate_up_swiglu.h"
#include "kernels/linear_gemv.h"

namespace es {
namespace {

using namespace fwdtest;
using kernel::GateUpLayout;

// Row i of the halves order -> its row in the interleaved order.
int64_t interleavedRow(int64_t i, int64_t features) {
  return i < features ? kernel::gateOffset(GateUpLayout::kInterleaved8, i)
                      : kernel::upOffset(GateUpLayout::kInterleaved8, i - features, features);
}

// A gate/up problem: x [m, k], W [2I, k] and bias [2I] in both layouts, on host and device.
template <typename T>
struct Problem {
  int32_t m, I, k;
  std::vector<T> x, wHalves, wInter, bHalves, bInter;
  test::DeviceArray<T> dX, dWh, dWi, dBh, dBi;

  Problem(int32_t m_, int32_t I_, int32_t k_, std::mt19937& rng)
      : m(m_),
        I(I_),
        k(k_),
        x(size_t(m_) * k_),
        wHalves(size_t(2) * I_ * k_),
        wInter(wHalves.size()),
        bHalves(size_t(2) * I_),
        bInter(bHalves.size()),
        dX(0),
        dWh(0),
        dWi(0),
        dBh(0),
        dBi(0) {
    fill(x, rng, -0.5f, 0.5f);
    fill(wHalves, rng, -0.5f, 0.5f);
    fill(bHalves, rng, -1.0f, 1.0f);
    for (int64_t i = 0; i < 2 * I; ++i) {
      const int64_t r = interleavedRow(i, I);
      std::copy_n(wHalves.begin() + i * k, k, wInter.begin() + r * k);
      bInter[size_t(r)] = bHalves[size_t(i)];
    }
    dX = test::DeviceArray<T>(x);
    dWh = test::DeviceArray<T>(wHalves);
    dWi = test::DeviceArray<T>(wInter);
    dBh = test::DeviceArray<T>(bHalves);
    dBi = test::DeviceArray<T>(bInter);
  }
  kernel::GateUpSwigluParams params(GateUpLayout layout, bool bias, void* scratch,
                                    void* out) const {
    const bool inter = layout == GateUpLayout::kInterleaved8;
    kernel::GateUpSwigluParams p;
    p.linear.x = dX.get();
    p.linear.w = inter ? dWi.get() : dWh.get();
    p.linear.bias = bias ? (inter ? dBi.get() : dBh.get()) : nullptr;
    p.linear.y = scratch;
    p.linear.m = m;
    p.linear.n = 2 * I;
    p.linear.k = k;
    p.linear.dtype = dtype_of<T>;
    p.linear.outDtype = dtype_of<T>;
    p.out = out;
    p.layout = layout;
    return p;
  }
};

template <typename T>
void everyConfiguration(int32_t m, bool bias, std::mt19937& rng) {
  Problem<T> pr(m, 48, 1000, rng);  // 6 16-row tiles; k = 31 * 32 + 8
  test::DeviceArray<T> scratch(size_t(m) * 2 * pr.I), fused(size_t(m) * pr.I),
      twostep(size_t(m) * pr.I);
  for (int32_t tiles : {1, 2}) {
    for (int32_t split : {1, 2, 4, 8}) {
      SCOPED_TRACE(::testing::Message()
                   << "m " << m << " bias " << bias << " " << dtype_name(dtype_of<T>)
                   << " rowTiles " << tiles << " kSplit " << split);
      const kernel::detail::GemvConfig cfg{tiles, split};
      const kernel::GateUpSwigluParams p =
          pr.params(GateUpLayout::kInterleaved8, bias, scratch.get(), twostep.get());
      twostep.poison();
      scratch.poison();
      kernel::detail::launchLinearGemv(p.linear, cfg, nullptr);
      kernel::launchSwiglu(kernel::swigluStep(p), nullptr);
      kernel::LinearParams f = p.linear;
      f.y = fused.get();
      fused.poison();
      kernel::detail::launchLinearGemv(f, cfg, nullptr, kernel::detail::GemvEpilogue::kSwiglu);
      expect_bits(fused.download(), twostep.download(), "fused vs gemv + swiglu");
    }
  }
}

TEST(GateUpSwigluGpu, EpilogueEqualsGemvThenSwigluInEveryConfiguration) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(77);
  for (int32_t m : {1, 7, 9, 16}) {
    for (bool bias : {false, true}) {
      everyConfiguration<bf16>(m, bias, rng);
      everyConfiguration<fp16>(m, bias, rng);
    }
  }
}

// silu(g) * u in fp32 on host values (the CPU reference's formula).
double swigluOf(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

template <typename T>
void throughLauncher(kernel::LinearContext& ctx, int32_t m, int32_t I, int32_t k, bool bias,
                     std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "m " << m << " I " << I << " k " << k << " bias " << bias
                                    << " " << dtype_name(dtype_of<T>));
  Problem<T> pr(m, I, k, rng);
  const size_t nOut = size_t(m) * I;
  std::vector<T> out[2], gate_up[2];
  for (GateUpLayout layout : {GateUpLayout::kHalves, GateUpLayout::kInterleaved8}) {
    const int v = layout == GateUpLayout::kInterleaved8;
    test::DeviceArray<T> scratch(size_t(m) * 2 * I), d_out(nOut);
    const kernel::GateUpSwigluParams p = pr.params(layout, bias, scratch.get(), d_out.get());
    for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the cached plans
      d_out.poison();
      kernel::launchGateUpSwiglu(p, ctx, nullptr);
      const std::vector<T> got = d_out.download();
      if (rep == 1) expect_bits(got, out[v], "the same call twice");
      out[v] = got;
    }
    gate_up[v] = scratch.download();
  }
  // Either layout: the same bits.
  expect_bits(out[1], out[0], "interleaved vs halves");

  // The halves run went through the linear layer and launchSwiglu: the CPU SwiGLU of its gate/up
  // outputs is its result, bit for bit.
  std::vector<T> want(nOut);
  kernel::SwigluParams s{.gateUp = gate_up[0].data(),
                         .out = want.data(),
                         .rows = m,
                         .intermediateSize = I,
                         .dtype = dtype_of<T>};
  ref::swiglu(s);
  expect_bits(out[0], want, "CPU SwiGLU of the GPU's gate/up");
  if (m > kernel::kGemvAutoMaxRows) {  // cuBLASLt then the interleaved SwiGLU kernel: same check
    s.gateUp = gate_up[1].data();
    s.layout = GateUpLayout::kInterleaved8;
    ref::swiglu(s);
    expect_bits(out[1], want, "CPU SwiGLU of the interleaved gate/up");
  } else {  // the fused path never wrote the scratch
    size_t written = 0;
    std::vector<T> poison(1);
    test::DeviceArray<T> probe(1);
    poison = probe.download();
    for (const T& v : gate_up[1]) written += !same_bits(v, poison[0]);
    EXPECT_EQ(written, 0u) << "scratch elements written by the fused path";
  }

  // Against the all-CPU reference (f32 sums): gate and up each within a bf16/f16 rounding and the
  // summation-order slack, propagated through silu(g) * u.
  std::vector<float> xf(pr.x.size()), wf(pr.wHalves.size()), bf(pr.bHalves.size());
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = float(to_d(pr.x[i]));
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = float(to_d(pr.wHalves[i]));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = float(to_d(pr.bHalves[i]));
  const double ulp = std::is_same_v<T, bf16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  size_t bad = 0;
  for (int32_t r = 0; r < m; ++r) {
    for (int32_t i = 0; i < I; ++i) {
      double gu[2];
      for (int h = 0; h < 2; ++h) {
        const int64_t row = i + h * I;
        double acc = bias ? bf[size_t(row)] : 0.0;
        for (int32_t kk = 0; kk < k; ++kk)
          acc += double(xf[size_t(r) * k + kk]) * wf[size_t(row) * k + kk];
        gu[h] = acc;
      }
      const double g = gu[0], u = gu[1], wantO = swigluOf(g, u);
      const double allowed = 3 * ulp * (std::abs(u) * (1 + std::abs(g)) + std::abs(wantO)) + 1e-3;
      const double got = to_d(out[1][size_t(r) * I + i]);
      if (!(std::abs(got - wantO) <= allowed) && ++bad <= 5) {
        ADD_FAILURE() << "out[" << r << "," << i << "] got " << got << " want " << wantO;
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(GateUpSwigluGpu, LauncherAtModelShapes) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(3072);
  for (int32_t m : {1, 4, 16, 20}) {
    throughLauncher<bf16>(ctx, m, 3072, 1024, false, rng);  // Qwen3-0.6B
    throughLauncher<bf16>(ctx, m, 1536, 576, m == 4, rng);  // SmolLM2-135M
    throughLauncher<fp16>(ctx, m, 256, 72, true, rng);
  }
}

// The fused launch inside a CUDA graph: replays give the eager result.
TEST(GateUpSwigluGpu, CapturedInAGraph) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(12);
  Problem<bf16> pr(1, 3072, 1024, rng);
  test::DeviceArray<bf16> scratch(2 * 3072), eager(3072), replayed(3072);
  kernel::launchGateUpSwiglu(
      pr.params(GateUpLayout::kInterleaved8, true, scratch.get(), eager.get()), ctx, nullptr);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  kernel::launchGateUpSwiglu(
      pr.params(GateUpLayout::kInterleaved8, true, scratch.get(), replayed.get()), ctx, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    replayed.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_bits(replayed.download(), eager.download(), "graph replay vs eager");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace es
