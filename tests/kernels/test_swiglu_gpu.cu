// GPU parity of launchSwiglu with the CPU reference: f32/f16/bf16, vector and scalar paths
// (intermediate a multiple of 8 or not, misaligned bases), both gate/up layouts, poisoned output;
// tolerance table in forward_ops_gpu_test_util.h.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/swiglu.h"

namespace es {
namespace {

using namespace fwdtest;

template <typename T>
void run(int32_t rows, int32_t inter, bool offset, std::mt19937& rng,
         kernel::GateUpLayout layout = kernel::GateUpLayout::kHalves) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " inter " << inter << " offset " << offset
                                    << " " << dtype_name(dtype_of<T>) << " layout " << int(layout));
  const size_t off = offset ? 1 : 0;
  std::vector<T> gate_up(off + size_t(rows) * 2 * inter);
  fill(gate_up, rng, -8.0f, 8.0f);
  std::vector<T> want(off + size_t(rows) * inter);
  kernel::SwigluParams p{.gateUp = gate_up.data() + off,
                         .out = want.data() + off,
                         .rows = rows,
                         .intermediateSize = inter,
                         .dtype = dtype_of<T>,
                         .layout = layout};
  ref::swiglu(p);
  test::DeviceArray<T> d_in(gate_up), d_out(want.size());
  p.gateUp = d_in.get() + off;
  p.out = d_out.get() + off;
  kernel::launchSwiglu(p, nullptr);
  std::vector<T> got = d_out.download();
  got.erase(got.begin(), got.begin() + off);
  want.erase(want.begin(), want.begin() + off);
  expect_close(got, want, tol_for<T>(), "out");
}

TEST(SwigluGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(9);
  for (int32_t inter : {1536, 37, 8, 4864}) {
    for (int32_t rows : {1, 33}) {
      for (bool off : {false, true}) {
        run<float>(rows, inter, off, rng);
        run<bf16>(rows, inter, off, rng);
        run<fp16>(rows, inter, off, rng);
      }
    }
  }
  run<bf16>(700, 1536, false, rng);
  for (int32_t inter : {1536, 8, 4864}) {
    for (bool off : {false, true}) {
      run<float>(5, inter, off, rng, kernel::GateUpLayout::kInterleaved8);
      run<bf16>(5, inter, off, rng, kernel::GateUpLayout::kInterleaved8);
      run<fp16>(5, inter, off, rng, kernel::GateUpLayout::kInterleaved8);
    }
  }
}

}  // namespace
}  // namespace es
