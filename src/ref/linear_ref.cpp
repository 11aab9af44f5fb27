// CPU reference of the linear layer (kernels/linear.h): y = x · W^T (+ bias), fp32 products and
// fp32 accumulation, one rounding to outDtype.
//
// This is also the CPU backend's GEMM, so it is blocked: x is converted to fp32 once; each thread
// owns a range of output features and converts a block of W rows at a time to fp32, then forms
// row-by-row dot products (both operands contiguous; 8 independent partial sums so the compiler
// can vectorise the inner loop).
#include <algorithm>
#include <vector>

#include "kernels/linear.h"
#include "ref/forward_ref_util.h"

namespace es::ref {
namespace {

constexpr int64_t kWBlockRows = 32;  // W rows converted per block (32 x K fp32 stays in L2)

inline float dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (; i < k; ++i) acc[i & 7] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void linear(const kernel::LinearParams& p) {
  if (!kernel::validate(p)) return;
  const int64_t m = p.m, n = p.n, k = p.k;
  std::vector<float> xf(static_cast<size_t>(m * k));
  loadFloats(p.x, p.dtype, 0, m * k, xf.data());
  std::vector<float> bias;
  if (p.bias != nullptr) {
    bias.resize(static_cast<size_t>(n));
    loadFloats(p.bias, p.dtype, 0, n, bias.data());
  }
  const int64_t blocks = (n + kWBlockRows - 1) / kWBlockRows;
  detail::parallel_for(blocks, 2 * kWBlockRows * k * m, [&](int64_t begin, int64_t end) {
    std::vector<float> wf(static_cast<size_t>(kWBlockRows * k));
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t j0 = blk * kWBlockRows;
      const int64_t rows = std::min(kWBlockRows, n - j0);
      loadFloats(p.w, p.dtype, j0 * k, rows * k, wf.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = xf.data() + i * k;
        for (int64_t j = 0; j < rows; ++j) {
          float acc = dot(xr, wf.data() + j * k, k);
          if (!bias.empty()) acc += bias[static_cast<size_t>(j0 + j)];
          storeFromFloat(p.y, p.outDtype, i * n + j0 + j, acc);
        }
      }
    }
  });
}

}  // namespace es::ref
