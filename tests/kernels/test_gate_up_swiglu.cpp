// The gate/up + SwiGLU op on the CPU (kernels/gate_up_swiglu.h, kernels/swiglu.h): the interleaved
// layout's offsets, SwiGLU and the whole op in that layout against the halves layout of the same
// matrix (bit for bit), the backend's reordering of a checkpoint's halves (interleaveGateUp), and
// the validation messages.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "kernels/gate_up_swiglu.h"
#include "model/weight_upload.h"
#include "ops/backend.h"
#include "support/test_util.h"

namespace es {
namespace {

using kernel::GateUpLayout;

// Row i of the halves order -> its row in the interleaved order.
int64_t interleavedRow(int64_t i, int64_t features) {
  return i < features ? kernel::gateOffset(GateUpLayout::kInterleaved8, i)
                      : kernel::upOffset(GateUpLayout::kInterleaved8, i - features, features);
}

TEST(GateUpLayout, Offsets) {
  using kernel::gateOffset;
  using kernel::upOffset;
  EXPECT_EQ(gateOffset(GateUpLayout::kHalves, 5), 5);
  EXPECT_EQ(upOffset(GateUpLayout::kHalves, 5, 24), 29);
  // Interleaved: [g0..g7 u0..u7 g8..g15 u8..u15 ...]
  EXPECT_EQ(gateOffset(GateUpLayout::kInterleaved8, 0), 0);
  EXPECT_EQ(gateOffset(GateUpLayout::kInterleaved8, 7), 7);
  EXPECT_EQ(upOffset(GateUpLayout::kInterleaved8, 0, 24), 8);
  EXPECT_EQ(gateOffset(GateUpLayout::kInterleaved8, 8), 16);
  EXPECT_EQ(upOffset(GateUpLayout::kInterleaved8, 13, 24), 29);
  // A permutation of [0, 2I).
  std::vector<int> seen(48, 0);
  for (int64_t i = 0; i < 48; ++i) ++seen[static_cast<size_t>(interleavedRow(i, 24))];
  EXPECT_EQ(seen, std::vector<int>(48, 1));
}

// The same [rows, 2I] values in both layouts give the same SwiGLU bits.
TEST(GateUpLayout, SwigluInterleavedEqualsHalves) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-6.0f, 6.0f);
  const int32_t rows = 3, I = 40;
  std::vector<float> halves(size_t{rows} * 2 * I), inter(halves.size());
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t i = 0; i < 2 * I; ++i) {
      const float v = d(rng);
      halves[size_t(r) * 2 * I + i] = v;
      inter[size_t(r) * 2 * I + interleavedRow(i, I)] = v;
    }
  }
  std::vector<float> a(size_t{rows} * I, -1.0f), b(a.size(), -2.0f);
  kernel::SwigluParams p{.gateUp = halves.data(),
                         .out = a.data(),
                         .rows = rows,
                         .intermediateSize = I,
                         .dtype = DType::kF32};
  ref::swiglu(p);
  p.gateUp = inter.data();
  p.out = b.data();
  p.layout = GateUpLayout::kInterleaved8;
  ref::swiglu(p);
  EXPECT_EQ(a, b);
  p.intermediateSize = 12;  // not a multiple of 8
  test::expectInvalidArgument([&] { ref::swiglu(p); }, "intermediateSize");
}

// The op in the interleaved layout (W and bias reordered by the CPU backend's interleaveGateUp)
// equals the halves layout, and both equal linear then SwiGLU; bf16 W with f32 x as on the CPU.
TEST(GateUpSwiglu, InterleavedEqualsHalvesAndTheTwoSteps) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const int32_t m = 3, I = 24, K = 40;
  std::vector<bf16> w(size_t{2} * I * K);
  std::vector<float> bias(size_t{2} * I), x(size_t{m} * K);
  for (auto& v : w) v = to_bf16(d(rng));
  for (auto& v : bias) v = d(rng);
  for (auto& v : x) v = d(rng);

  auto backend = ops::makeCpuBackend();
  Buffer wHalves = backend->allocate(static_cast<int64_t>(w.size() * sizeof(bf16)));
  backend->copyFromHost(wHalves.data(), w.data(), wHalves.bytes());
  Buffer bHalves = backend->allocate(static_cast<int64_t>(bias.size() * 4));
  backend->copyFromHost(bHalves.data(), bias.data(), bHalves.bytes());
  const Buffer wInter = model::interleaveGateUp(*backend, wHalves, I, K * int64_t{sizeof(bf16)});
  const Buffer bInter = model::interleaveGateUp(*backend, bHalves, I, 4);
  // Row interleavedRow(i) of the reordered matrix is row i of the checkpoint's.
  for (int64_t i = 0; i < 2 * I; ++i) {
    const bf16* got = wInter.as<bf16>() + interleavedRow(i, I) * K;
    for (int32_t k = 0; k < K; ++k)
      ASSERT_EQ(got[k].bits, w[size_t(i) * K + k].bits) << i << "," << k;
    EXPECT_EQ(bInter.as<float>()[interleavedRow(i, I)], bias[size_t(i)]);
  }

  std::vector<float> scratch(size_t{m} * 2 * I), out[3];
  for (int variant = 0; variant < 3; ++variant) {
    const bool inter = variant == 1;
    out[variant].assign(size_t{m} * I, -7.0f);
    kernel::GateUpSwigluParams p;
    p.linear.x = x.data();
    p.linear.w = inter ? wInter.data() : wHalves.data();
    p.linear.bias = inter ? bInter.data() : bHalves.data();
    p.linear.y = scratch.data();
    p.linear.m = m;
    p.linear.n = 2 * I;
    p.linear.k = K;
    p.linear.dtype = DType::kF32;
    p.linear.outDtype = DType::kF32;
    p.linear.weightDtype = DType::kBF16;
    p.out = out[variant].data();
    p.layout = inter ? GateUpLayout::kInterleaved8 : GateUpLayout::kHalves;
    if (variant < 2) {
      ref::gateUpSwiglu(p);
    } else {  // the two steps by hand, halves
      ref::linear(p.linear);
      ref::swiglu(kernel::swigluStep(p));
    }
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0], out[2]);
  for (float v : out[1]) EXPECT_NE(v, -7.0f);
}

TEST(GateUpSwiglu, Validation) {
  std::vector<float> x(8), w(16 * 8), y(16), out(8);
  auto make = [&] {
    kernel::GateUpSwigluParams p;
    p.linear.x = x.data();
    p.linear.w = w.data();
    p.linear.y = y.data();
    p.linear.m = 1;
    p.linear.n = 16;
    p.linear.k = 8;
    p.linear.dtype = DType::kF32;
    p.linear.outDtype = DType::kF32;
    p.out = out.data();
    p.layout = GateUpLayout::kInterleaved8;
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.linear.m = 0;
  EXPECT_FALSE(kernel::validate(p));  // no rows: a no-op
  p = make();
  p.linear.n = 8;
  test::expectInvalidArgument([&] { ref::gateUpSwiglu(p); }, "linear.n");
  p = make();
  p.linear.n = 6;
  p.layout = GateUpLayout::kHalves;
  EXPECT_TRUE(kernel::validate(p));
  p.linear.n = 5;
  test::expectInvalidArgument([&] { ref::gateUpSwiglu(p); }, "linear.n");
  p = make();
  p.linear.dtype = DType::kBF16;  // f32 logits-style output: the linear layer allows it
  test::expectInvalidArgument([&] { ref::gateUpSwiglu(p); }, "linear.outDtype");
  p = make();
  p.out = nullptr;
  test::expectInvalidArgument([&] { ref::gateUpSwiglu(p); }, "out");
  p = make();
  p.out = y.data();
  test::expectInvalidArgument([&] { ref::gateUpSwiglu(p); }, "out");
  auto backend = ops::makeCpuBackend();
  Buffer b = backend->allocate(20 * 4);
  test::expectInvalidArgument([&] { model::interleaveGateUp(*backend, b, 10, 4); }, "features");
  test::expectInvalidArgument([&] { model::interleaveGateUp(*backend, b, 8, 4); },
                              "halves.bytes()");
}

}  // namespace
}  // namespace es
