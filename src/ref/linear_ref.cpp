// CPU reference of the linear layer (kernels/linear.h): y = x · W^T (+ bias), fp32 products and
// fp32 accumulation, one rounding to outDtype.
//
// Summation order (the reference's definition, kept bit for bit by every path below): each
// output is a dot product over k with 8 partial sums, lane l taking elements l, l + 8, l + 16, …
// in order (a tail of k % 8 elements goes to lanes 0 … k % 8 − 1), reduced as
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Every product is rounded before it is added:
// this file is compiled with -ffp-contract=off (CMakeLists.txt), so no path fuses a multiply-add.
// An output therefore does not depend on m or on the other rows, so a 16-row verify equals 16
// one-row decodes on the CPU backend, as on the GPU.
//
// This is also the CPU backend's GEMM, so it is blocked: x is converted to fp32 once; each thread
// owns a range of output features (blocks of 32 W rows). fp32 W is read in place; bf16 W is
// widened in registers for fewer than 8 x rows (decode, verify) and widened to fp32 once per
// block for more (prefill), where in-register widening would repeat for every x tile; f16 W is
// converted per block. Register tiles are 4 x rows by 2 W rows (4 x 4 where AVX-512VL gives 32
// vector registers; 1 x 4 for the last m % 4 rows): each loaded 8-lane vector then feeds 2–4
// products instead of one. The tile loop is compiled for AVX-512VL, AVX2 and the baseline x86-64
// (chosen at load time); all give the same bits, since vector lanes are the partial sums above.
//
// A quantized W (LinearParams::quantized) is decoded one block of W rows at a time into the same
// per-thread fp32 scratch (common/quant_dequant.h dequantizeRow, row by row) and multiplied
// exactly as an fp32 W: the result is, bit for bit, the dense fp32 product with the dequantized
// values, and the packed bytes are the only copy of W a step reads.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/quant_dequant.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "ref/forward_ref_util.h"

namespace es::ref {
namespace {

constexpr int64_t kWBlockRows = 32;             // W rows per block (32 x K fp32 stays in L2)
constexpr int64_t kMinRowsToWidenPerBlock = 8;  // x rows from which bf16 W is widened per block

// Eight fp32 lanes: one lane per partial sum of the summation order above. LanesAt reads 8
// floats, Bf16At 8 bf16 values, at any element-aligned address (one unaligned vector load).
typedef float Lanes __attribute__((vector_size(32)));
typedef float LanesAt __attribute__((vector_size(32), aligned(4), may_alias));
typedef uint16_t Bf16At __attribute__((vector_size(16), aligned(2), may_alias));
typedef uint32_t Bits __attribute__((vector_size(32)));

// By reference: a 32-byte vector passed by value has a different ABI with and without AVX.
__attribute__((always_inline)) inline float reduceLanes(const Lanes& a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// W element loads: fp32 in place, or bf16 widened in registers (exact: a bf16 is the top half of
// an fp32), so bf16 W is read from memory at half the bytes and never copied.
__attribute__((always_inline)) inline void loadW(Lanes& v, const float* p) {
  v = *reinterpret_cast<const LanesAt*>(p);
}
__attribute__((always_inline)) inline void loadW(Lanes& v, const uint16_t* p) {
  const Bits bits = __builtin_convertvector(*reinterpret_cast<const Bf16At*>(p), Bits) << 16;
  v = (Lanes)bits;  // a vector cast between equal sizes reinterprets the bits
}
__attribute__((always_inline)) inline float wAt(const float* p, int64_t i) { return p[i]; }
__attribute__((always_inline)) inline float wAt(const uint16_t* p, int64_t i) {
  const uint32_t bits = uint32_t{p[i]} << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// out[r][c] = dot(x[r], w[c]) over k, for an R x C tile (the loops over r and c unrolled, so the
// R * C accumulators stay in registers). Inlined into the cloned caller, so it is compiled once
// per target there. WT: float or uint16_t (bf16 bits).
template <int R, int C, typename WT>
__attribute__((always_inline)) inline void dotTile(const float* const* x, const WT* const* w,
                                                   int64_t k, float (&out)[R][C]) {
  Lanes acc[R][C] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    Lanes xv[R], wv[C];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) xv[r] = *reinterpret_cast<const LanesAt*>(x[r] + i);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) loadW(wv[c], w[c] + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] += xv[r] * wv[c];
    }
  }
  for (; i < k; ++i) {
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c][i & 7] += x[r][i] * wAt(w[c], i);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) out[r][c] = reduceLanes(acc[r][c]);
  }
}

// One block of W rows against every x row: y[i, j0 + j] for i < m, j < rows.
template <typename WT>
struct BlockJob {
  const float* x;     // [m, k] fp32
  const WT* w;        // [rows, k] fp32 or bf16 bits: W rows j0 … j0 + rows − 1
  const float* bias;  // [n] fp32, or null
  int64_t m, k, n, j0, rows;
  void* y;  // [m, n] outDtype
  DType outDtype;
};

template <int R, int C, typename WT>
__attribute__((always_inline)) inline void storeTile(const BlockJob<WT>& b, int64_t i, int64_t j) {
  const float* xs[R];
  const WT* ws[C];
  for (int r = 0; r < R; ++r) xs[r] = b.x + (i + r) * b.k;
  for (int c = 0; c < C; ++c) ws[c] = b.w + (j + c) * b.k;
  float out[R][C];
  dotTile<R, C, WT>(xs, ws, b.k, out);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float acc = out[r][c];
      if (b.bias != nullptr) acc += b.bias[b.j0 + j + c];
      storeFromFloat(b.y, b.outDtype, (i + r) * b.n + b.j0 + j + c, acc);
    }
  }
}

// Tiles of R x rows by C W rows, then 4 x 1 for the last rows % C W rows, then 1 x 4 / 1 x 1
// for the last m % R x rows (and m % R >= 4: 4 x 2 first).
template <int R, int C, typename WT>
__attribute__((always_inline)) inline void runBlockOf(const BlockJob<WT>& b) {
  int64_t i = 0;
  for (; i + R <= b.m; i += R) {
    int64_t j = 0;
    for (; j + C <= b.rows; j += C) storeTile<R, C>(b, i, j);
    for (; j < b.rows; ++j) storeTile<R, 1>(b, i, j);
  }
  if constexpr (R > 4) {
    for (; i + 4 <= b.m; i += 4) {
      int64_t j = 0;
      for (; j + 2 <= b.rows; j += 2) storeTile<4, 2>(b, i, j);
      for (; j < b.rows; ++j) storeTile<4, 1>(b, i, j);
    }
  }
  for (; i < b.m; ++i) {
    int64_t j = 0;
    for (; j + 4 <= b.rows; j += 4) storeTile<1, 4>(b, i, j);
    for (; j < b.rows; ++j) storeTile<1, 1>(b, i, j);
  }
}

// dst[i] = src[i] widened from bf16 bits to fp32 (exact: a bf16 is the top half of an fp32).
ES_X86_CLONES void widenBf16(const uint16_t* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = wAt(src, i);
}

ES_X86_CLONES void runBlockBase(const BlockJob<float>& b) { runBlockOf<4, 2>(b); }
ES_X86_CLONES void runBlock(const BlockJob<uint16_t>& b) { runBlockOf<4, 2>(b); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// With AVX-512VL (x86-64-v4), 32 vector registers hold 4 x 4 tiles: each loaded vector feeds
// 4 products (8-lane vectors all the same, so the same bits as the other paths).
__attribute__((target("arch=x86-64-v4"))) void runBlockWide(const BlockJob<float>& b) {
  runBlockOf<4, 4>(b);
}
void runBlock(const BlockJob<float>& b) {
  static const bool wide = __builtin_cpu_supports("avx512vl");
  if (wide) {
    runBlockWide(b);
  } else {
    runBlockBase(b);
  }
}
#else
void runBlock(const BlockJob<float>& b) { runBlockBase(b); }
#endif

}  // namespace

void linear(const kernel::LinearParams& p) {
  if (!kernel::validate(p)) return;
  const int64_t m = p.m, n = p.n, k = p.k;
  if (p.normWeight != nullptr || p.accumulate) {
    // The fused norm and residual add (linear.h), composed from the unfused steps they replace.
    const int64_t es = dtype_size(p.dtype);
    std::vector<uint8_t> normed(p.normWeight != nullptr ? static_cast<size_t>(m * k * es) : 0);
    std::vector<uint8_t> product(p.accumulate ? static_cast<size_t>(m * n * es) : 0);
    kernel::LinearParams plain = p;
    plain.normWeight = nullptr;
    plain.accumulate = false;
    if (p.normWeight != nullptr) {
      rmsNorm({.x = p.x,
               .weight = p.normWeight,
               .out = normed.data(),
               .rows = p.m,
               .hiddenSize = p.k,
               .eps = p.normEps,
               .dtype = p.dtype});
      plain.x = normed.data();
    }
    if (p.accumulate) plain.y = product.data();
    linear(plain);
    if (p.accumulate) {
      for (int64_t i = 0; i < m * n; ++i) {
        storeFromFloat(p.y, p.dtype, i,
                       loadAsFloat(p.y, p.dtype, i) + loadAsFloat(product.data(), p.dtype, i));
      }
    }
    return;
  }
  // Scratch left uninitialized (make_unique_for_overwrite): every element is written before it
  // is read, so a zero fill (up to m x k floats for x) would only be overwritten.
  const auto xf = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(m * k));
  loadFloats(p.x, p.dtype, 0, m * k, xf.get());
  std::vector<float> bias;
  if (p.bias != nullptr) {
    bias.resize(static_cast<size_t>(n));
    loadFloats(p.bias, p.dtype, 0, n, bias.data());
  }
  const DType wDtype = p.weightDtype.value_or(p.dtype);
  const int64_t blocks = (n + kWBlockRows - 1) / kWBlockRows;
  const float* biasF = bias.empty() ? nullptr : bias.data();
  // bf16 W is widened in registers for few x rows (decode reads each W element once or twice);
  // for more rows each W element would be widened once per 4-row tile, so the block is widened
  // to fp32 once instead (exact, so the same bits).
  const bool widenPerBlock = p.quantized || wDtype == DType::kF16 ||
                             (wDtype == DType::kBF16 && m >= kMinRowsToWidenPerBlock);
  detail::parallelFor(blocks, 2 * kWBlockRows * k * m, [&](int64_t begin, int64_t end) {
    // Each thread's W block scratch, kept between calls: decode runs several linears a layer, and
    // a fresh buffer each time would cost an allocation (and its page faults) every call.
    thread_local std::vector<float> scratch;
    if (widenPerBlock && scratch.size() < static_cast<size_t>(kWBlockRows * k)) {
      scratch.resize(static_cast<size_t>(kWBlockRows * k));
    }
    float* const wf = scratch.data();
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t j0 = blk * kWBlockRows, rows = std::min(kWBlockRows, n - j0);
      if (!widenPerBlock && wDtype == DType::kBF16) {
        runBlock(BlockJob<uint16_t>{xf.get(), static_cast<const uint16_t*>(p.w) + j0 * k, biasF, m,
                                    k, n, j0, rows, p.y, p.outDtype});
        continue;
      }
      const float* w = wf;
      if (p.quantized) {
        for (int64_t r = 0; r < rows; ++r) {
          dequantizeRow(*p.quantized, k, j0 + r,
                        std::span<float>(wf + r * k, static_cast<size_t>(k)));
        }
      } else if (wDtype == DType::kBF16) {
        widenBf16(static_cast<const uint16_t*>(p.w) + j0 * k, rows * k, wf);
      } else if (wDtype == DType::kF16) {
        loadFloats(p.w, wDtype, j0 * k, rows * k, wf);
      } else {
        w = static_cast<const float*>(p.w) + j0 * k;  // fp32 W in place
      }
      runBlock(BlockJob<float>{xf.get(), w, biasF, m, k, n, j0, rows, p.y, p.outDtype});
    }
  });
}

}  // namespace es::ref
