// GPU parity of launchLinear on a quantized W (LinearParams::quantized) with the CPU reference
// values of common/quant_dequant.h (dequantizeRow, the formats' definition), on both CUDA paths:
//  * the quantized gemv (m <= 16; kAuto and forced with kGemv, and every kSplit directly): every
//    format (int4 at group 32 / 64 / 128, fp8 at group 128 and per channel, Q8_0, Q4_0, Q4_1,
//    Q4_K, Q5_K, Q6_K) x m = 1, 2, 5, 16 x shapes with n not a multiple of the 16-row tile, k not
//    a multiple of the 256-element span where the format allows it (fp8: a 16-element last block
//    and a short last scale group; GGUF rows whose blocks are not 16-byte aligned), bias on and
//    off, 16-bit and f32 y; the Qwen3-8B o_proj shape with sampled columns; row invariance (each
//    row of a 16-row call equals the 1-row call on that row, bit for bit);
//  * the prefill path (m > 16, and kCublasLt): W dequantized to the input dtype, then cuBLASLt;
//    its scratch inside a CUDA graph (fits: replays; larger: InvalidArgument);
//  * the fused input RMSNorm and residual add (normWeight, accumulate) of a decode layer, against
//    their definition in linear.h, and their row invariance; the SwiGLU epilogue
//    (launchGateUpSwiglu, kInterleaved8) equal to the unfused gemv + launchSwiglu bit for bit;
//  * rejections (kGemv outside the gemv's domain, a fused norm where the gemv does not run).
// y is poisoned (0xff bytes: NaN) before every launch. The reference is the double sum of x times
// the f32 values dequantizeRow gives, plus the bias. Tolerance, per output, with mag = sum |x * w|
// over k:
//   gemv, f32 y       2^-18 * mag: f32 accumulation in a different order (mma sums of 16 k, one
//                     scale product per block, k / 32 block sums and the warp / CTA sums), each
//                     rounding <= 2^-24 of a partial sum bounded by mag;
//   gemv, 16-bit y    that plus half an ulp of y's dtype, y being rounded once: 2^-8 |ref| for
//                     bf16 (8 significant bits), 2^-11 |ref| for f16;
//   prefill           plus 2^-8 * mag (bf16) / 2^-11 * mag (f16): every W element is rounded
//                     once to the input dtype before cuBLASLt multiplies it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/quant_dequant.h"
#include "common/quant_format.h"
#include "kernels/gate_up_swiglu.h"
#include "kernels/linear.h"
#include "kernels/linear_quant_gemv.h"
#include "support/gpu_test_util.h"
#include "support/test_util.h"

namespace es {
namespace {

using kernel::LinearAlgo;
using kernel::LinearParams;

uint16_t halfBits(float v) { return to_fp16(v).bits; }
void putHalf(uint8_t* p, float v) {
  const uint16_t b = halfBits(v);
  p[0] = static_cast<uint8_t>(b & 0xff);
  p[1] = static_cast<uint8_t>(b >> 8);
}

// A random quantized W [n, k] (finite scales, no NaN fp8 codes: checkpoints hold none), on the
// host and the device, and its reference values.
struct QuantW {
  QuantFormat format;
  int32_t group, n, k;
  std::vector<uint8_t> data, scales, zeros;
  std::vector<float> values;  // [n, k] dequantizeRow
  test::DeviceArray<uint8_t> dData{0}, dScales{0}, dZeros{0};

  QuantW(QuantFormat f, int32_t group_, int32_t n_, int32_t k_, std::mt19937& rng)
      : format(f), group(group_), n(n_), k(k_) {
    const char* why = quantLayoutRejection(f, k, group);
    if (why != nullptr) ADD_FAILURE() << "bad test layout: " << why;
    const int64_t rb = dataRowBytes(f, k, group), sb = scaleRowBytes(f, k, group),
                  zb = zeroRowBytes(f, k, group);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    data.resize(size_t(n) * rb);
    for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
    scales.resize(size_t(n) * sb);
    zeros.resize(size_t(n) * zb);
    if (f == QuantFormat::kInt4) {
      for (size_t i = 0; i < scales.size() / 2; ++i) putHalf(&scales[2 * i], 0.02f * unit(rng));
      for (auto& z : zeros) z = static_cast<uint8_t>(byte(rng) & 15);
    } else if (f == QuantFormat::kFp8E4M3) {
      for (auto& b : data) {
        if ((b & 0x7f) == 0x7f) b ^= 0x01;  // NaN codes -> +-448 / its neighbour
      }
      for (size_t i = 0; i < scales.size() / 4; ++i) {
        const float s = (1.0f / 448.0f) * (0.5f + 0.5f * std::abs(unit(rng)));
        std::memcpy(&scales[4 * i], &s, 4);
      }
    } else {
      // The f16 fields of every block: finite, so that the values are.
      const int32_t bb = ggufBlockBytes(f);
      for (int64_t at = 0; at < int64_t(data.size()); at += bb) {
        uint8_t* blk = &data[size_t(at)];
        switch (f) {
          case QuantFormat::kGgufQ8_0:
          case QuantFormat::kGgufQ4_0:
            putHalf(blk, 0.02f * unit(rng));
            break;
          case QuantFormat::kGgufQ4_1:
            putHalf(blk, 0.02f * unit(rng));
            putHalf(blk + 2, 0.2f * unit(rng));
            break;
          case QuantFormat::kGgufQ4_K:
          case QuantFormat::kGgufQ5_K:
            putHalf(blk, 0.002f * unit(rng));
            putHalf(blk + 2, 0.002f * unit(rng));
            break;
          case QuantFormat::kGgufQ6_K:
            putHalf(blk + 208, 0.0005f * unit(rng));
            break;
          default:
            break;
        }
      }
    }
    values.resize(size_t(n) * k);
    const QuantizedWeightView hv = view(data.data(), scales.data(), zeros.data());
    for (int32_t r = 0; r < n; ++r) {
      dequantizeRow(hv, k, r, std::span<float>(values.data() + size_t(r) * k, size_t(k)));
    }
    dData = test::DeviceArray<uint8_t>(data);
    if (!scales.empty()) dScales = test::DeviceArray<uint8_t>(scales);
    if (!zeros.empty()) dZeros = test::DeviceArray<uint8_t>(zeros);
  }
  QuantizedWeightView view(const void* d, const void* s, const void* z) const {
    return {.format = format,
            .data = d,
            .scales = scales.empty() ? nullptr : s,
            .zeros = zeros.empty() ? nullptr : z,
            .group = group};
  }
  QuantizedWeightView deviceView() const { return view(dData.get(), dScales.get(), dZeros.get()); }
};

// x [m, k] and bias [n] of T, random in [-1, 1], on the host and the device.
template <typename T>
struct Inputs {
  int32_t m;
  std::vector<T> x, bias;
  test::DeviceArray<T> dX{0}, dB{0};
  Inputs(int32_t m_, int32_t n, int32_t k, std::mt19937& rng) : m(m_) {
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    x.resize(size_t(m) * k);
    bias.resize(size_t(n));
    for (auto& v : x) v = cast(unit(rng));
    for (auto& v : bias) v = cast(unit(rng));
    dX = test::DeviceArray<T>(x);
    dB = test::DeviceArray<T>(bias);
  }
  static T cast(float v) {
    if constexpr (std::is_same_v<T, bf16>)
      return to_bf16(v);
    else
      return to_fp16(v);
  }
};

template <typename T>
double toD(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return to_float(v);
}

LinearParams paramsFor(const QuantW& w, const void* x, const void* bias, void* y, int32_t m,
                       DType dtype, DType out, LinearAlgo algo) {
  LinearParams p{.x = x,
                 .w = w.dData.get(),  // unused with `quantized`; non-null for validate()
                 .bias = bias,
                 .y = y,
                 .m = m,
                 .n = w.n,
                 .k = w.k,
                 .dtype = dtype,
                 .outDtype = out,
                 .algo = algo};
  p.quantized = w.deviceView();
  return p;
}

// Every byte of a to 0xff: NaN in f32, f16 and bf16, so an output the kernel does not write fails
// the comparison.
template <typename T>
void poisonNaN(test::DeviceArray<T>& a) {
  ES_CUDA_CHECK(cudaMemset(a.get(), 0xff, sizeof(T) * a.size()));
  ES_CUDA_CHECK(cudaDeviceSynchronize());
}

enum class Path { kGemv, kPrefill };

// Runs `launch` on poisoned y (twice: poison, launch, compare) and compares the columns `cols`
// (all when empty) of every row with the reference, within the tolerance above.
template <typename T, typename Y, typename Launch>
void check(const QuantW& w, const Inputs<T>& in, bool withBias, Path path,
           const std::vector<int32_t>& cols, Launch&& launch) {
  SCOPED_TRACE(::testing::Message()
               << quantFormatName(w.format) << " group " << w.group << " m " << in.m << " n " << w.n
               << " k " << w.k << " bias " << withBias << " " << dtype_name(dtype_of<T>) << " -> "
               << dtype_name(dtype_of<Y>) << (path == Path::kGemv ? " gemv" : " prefill"));
  std::vector<int32_t> js = cols;
  if (js.empty()) {
    for (int32_t j = 0; j < w.n; ++j) js.push_back(j);
  }
  const int32_t m = in.m, k = w.k;
  const bool f32 = std::is_same_v<Y, float>;
  const double outHalfUlp =
      f32 ? 0.0 : (std::is_same_v<Y, bf16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11));
  const double wRound = path == Path::kGemv       ? 0.0
                        : std::is_same_v<T, bf16> ? std::ldexp(1.0, -8)
                                                  : std::ldexp(1.0, -11);
  std::vector<double> want(size_t(m) * js.size()), allowed(want.size());
  for (int32_t i = 0; i < m; ++i) {
    for (size_t c = 0; c < js.size(); ++c) {
      const int32_t j = js[c];
      const float* wr = w.values.data() + size_t(j) * k;
      double sum = 0, mag = 0;
      for (int32_t kk = 0; kk < k; ++kk) {
        const double t = toD(in.x[size_t(i) * k + kk]) * double(wr[kk]);
        sum += t;
        mag += std::abs(t);
      }
      if (withBias) sum += toD(in.bias[size_t(j)]);
      want[size_t(i) * js.size() + c] = sum;
      const double accum = std::ldexp(mag, -18) + wRound * mag;
      allowed[size_t(i) * js.size() + c] = outHalfUlp * std::abs(sum) + 2 * accum + 1e-30;
    }
  }
  test::DeviceArray<Y> dY(size_t(m) * w.n);
  const LinearParams p = paramsFor(w, in.dX.get(), withBias ? in.dB.get() : nullptr, dY.get(), m,
                                   dtype_of<T>, dtype_of<Y>, LinearAlgo::kAuto);
  for (int rep = 0; rep < 2; ++rep) {
    poisonNaN(dY);
    launch(p);
    const std::vector<Y> got = dY.download();
    size_t bad = 0;
    for (int32_t i = 0; i < m; ++i) {
      for (size_t c = 0; c < js.size(); ++c) {
        const double g = toD(got[size_t(i) * w.n + js[c]]);
        const size_t e = size_t(i) * js.size() + c;
        if (!(std::abs(g - want[e]) <= allowed[e]) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << i << "," << js[c] << "] got " << g << " want " << want[e]
                        << " (allowed " << allowed[e] << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0u) << "rep " << rep;
  }
}

auto viaLauncher(kernel::LinearContext& ctx, LinearAlgo algo, cudaStream_t stream = nullptr) {
  return [&ctx, algo, stream](LinearParams p) {
    p.algo = algo;
    kernel::launchLinear(p, ctx, stream);
  };
}

struct Case {
  QuantFormat format;
  int32_t group, n, k;
};

// Every format with ragged shapes: n = 37 (two tiles, the second 5 rows), k not a multiple of
// the 256-element span where the layout allows it.
std::vector<Case> raggedCases() {
  return {
      {QuantFormat::kInt4, 32, 37, 96},       {QuantFormat::kInt4, 64, 37, 320},
      {QuantFormat::kInt4, 128, 37, 2176},    {QuantFormat::kFp8E4M3, 128, 37, 144},
      {QuantFormat::kFp8E4M3, 128, 37, 2064}, {QuantFormat::kFp8E4M3, 1040, 37, 1040},
      {QuantFormat::kGgufQ8_0, 32, 37, 96},   {QuantFormat::kGgufQ8_0, 32, 37, 1056},
      {QuantFormat::kGgufQ4_0, 32, 37, 160},  {QuantFormat::kGgufQ4_1, 32, 37, 224},
      {QuantFormat::kGgufQ4_K, 256, 37, 768}, {QuantFormat::kGgufQ5_K, 256, 37, 1280},
      {QuantFormat::kGgufQ6_K, 256, 37, 768}, {QuantFormat::kGgufQ6_K, 256, 37, 1280},
  };
}

TEST(LinearQuantGpu, GemvMatchesReferenceEveryFormat) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(42);
  for (const Case& c : raggedCases()) {
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    for (int32_t m : {1, 2, 5, 16}) {
      const Inputs<bf16> xb(m, c.n, c.k, rng);
      const Inputs<fp16> xh(m, c.n, c.k, rng);
      for (bool bias : {false, true}) {
        check<bf16, bf16>(w, xb, bias, Path::kGemv, {}, viaLauncher(ctx, LinearAlgo::kAuto));
        check<bf16, float>(w, xb, bias, Path::kGemv, {}, viaLauncher(ctx, LinearAlgo::kGemv));
        check<fp16, fp16>(w, xh, bias, Path::kGemv, {}, viaLauncher(ctx, LinearAlgo::kGemv));
        check<fp16, float>(w, xh, bias, Path::kGemv, {}, viaLauncher(ctx, LinearAlgo::kAuto));
      }
    }
  }
}

// Every format at the Qwen3-8B o_proj shape (4096 x 4096), sampled columns (the first and last
// 48 and 160 random others).
TEST(LinearQuantGpu, GemvQwen3Shape) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(4096);
  const int32_t n = 4096, k = 4096;
  std::vector<int32_t> cols;
  for (int32_t j = 0; j < 48; ++j) cols.push_back(j);
  std::uniform_int_distribution<int32_t> mid(48, n - 49);
  for (int i = 0; i < 160; ++i) cols.push_back(mid(rng));
  for (int32_t j = n - 48; j < n; ++j) cols.push_back(j);
  const Case cases[] = {
      {QuantFormat::kInt4, 128, n, k},     {QuantFormat::kFp8E4M3, 128, n, k},
      {QuantFormat::kFp8E4M3, k, n, k},    {QuantFormat::kGgufQ8_0, 32, n, k},
      {QuantFormat::kGgufQ4_0, 32, n, k},  {QuantFormat::kGgufQ4_1, 32, n, k},
      {QuantFormat::kGgufQ4_K, 256, n, k}, {QuantFormat::kGgufQ5_K, 256, n, k},
      {QuantFormat::kGgufQ6_K, 256, n, k},
  };
  for (const Case& c : cases) {
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    for (int32_t m : {1, 16}) {
      const Inputs<bf16> xb(m, n, k, rng);
      check<bf16, bf16>(w, xb, m == 16, Path::kGemv, cols, viaLauncher(ctx, LinearAlgo::kAuto));
      check<bf16, float>(w, xb, false, Path::kGemv, cols, viaLauncher(ctx, LinearAlgo::kAuto));
    }
  }
}

// Every kSplit (clusters of 1-8 CTAs) directly, on shapes where some warps get no span.
TEST(LinearQuantGpu, GemvEveryKSplit) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(8);
  const Case cases[] = {{QuantFormat::kInt4, 64, 40, 2560},
                        {QuantFormat::kFp8E4M3, 128, 40, 1040},
                        {QuantFormat::kGgufQ4_K, 256, 40, 2304},
                        {QuantFormat::kGgufQ6_K, 256, 40, 2304},
                        {QuantFormat::kGgufQ8_0, 32, 40, 1312}};
  for (const Case& c : cases) {
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    for (int32_t m : {1, 9}) {
      const Inputs<bf16> xb(m, c.n, c.k, rng);
      for (int32_t split : {1, 2, 4, 8}) {
        SCOPED_TRACE(::testing::Message() << "kSplit " << split);
        const auto direct = [split](const LinearParams& p) {
          kernel::detail::launchLinearQuantGemv(p, {.kSplit = split}, nullptr);
        };
        check<bf16, bf16>(w, xb, true, Path::kGemv, {}, direct);
        check<bf16, float>(w, xb, false, Path::kGemv, {}, direct);
      }
    }
  }
}

// Row invariance: each row of a 16-row call gives the same bits as that row alone (m = 1) and
// inside a 5-row call, at shapes where the launcher splits K over a cluster and where it does not.
TEST(LinearQuantGpu, GemvRowsDoNotDependOnTheOtherRows) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(16);
  const Case cases[] = {
      {QuantFormat::kInt4, 128, 4096, 4096},     {QuantFormat::kInt4, 128, 64, 12288},
      {QuantFormat::kFp8E4M3, 128, 1000, 4096},  {QuantFormat::kGgufQ4_K, 256, 64, 12288},
      {QuantFormat::kGgufQ6_K, 256, 1000, 4096}, {QuantFormat::kGgufQ8_0, 32, 64, 4096},
      {QuantFormat::kGgufQ4_1, 32, 300, 2048}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << quantFormatName(c.format) << " " << c.n << " x " << c.k);
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    const Inputs<bf16> full(16, c.n, c.k, rng);
    for (const DType out : {DType::kBF16, DType::kF32}) {
      const size_t esize = out == DType::kF32 ? 4 : 2;
      test::DeviceArray<uint8_t> y16(size_t(16) * c.n * esize), y1(size_t(c.n) * esize),
          y5(size_t(5) * c.n * esize);
      poisonNaN(y16);
      kernel::launchLinear(paramsFor(w, full.dX.get(), full.dB.get(), y16.get(), 16, DType::kBF16,
                                     out, LinearAlgo::kAuto),
                           ctx, nullptr);
      const std::vector<uint8_t> all = y16.download();
      size_t bad = 0;
      for (int32_t r = 0; r < 16; ++r) {
        poisonNaN(y1);
        kernel::launchLinear(paramsFor(w, full.dX.get() + size_t(r) * c.k, full.dB.get(), y1.get(),
                                       1, DType::kBF16, out, LinearAlgo::kAuto),
                             ctx, nullptr);
        const std::vector<uint8_t> row = y1.download();
        bad += !std::equal(row.begin(), row.end(), all.begin() + size_t(r) * c.n * esize);
      }
      poisonNaN(y5);
      kernel::launchLinear(paramsFor(w, full.dX.get() + size_t(11) * c.k, full.dB.get(), y5.get(),
                                     5, DType::kBF16, out, LinearAlgo::kAuto),
                           ctx, nullptr);
      const std::vector<uint8_t> part = y5.download();
      bad += !std::equal(part.begin(), part.end(), all.begin() + size_t(11) * c.n * esize);
      EXPECT_EQ(bad, 0u) << "rows differing from the 16-row call (out " << dtype_name(out) << ")";
    }
  }
}

// The prefill path: m > 16 through kAuto, and kCublasLt at decode sizes.
TEST(LinearQuantGpu, PrefillMatchesReference) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(77);
  for (const Case& c : raggedCases()) {
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    const Inputs<bf16> xb(40, c.n, c.k, rng);
    const Inputs<fp16> xh(17, c.n, c.k, rng);
    const Inputs<bf16> x4(4, c.n, c.k, rng);
    check<bf16, bf16>(w, xb, true, Path::kPrefill, {}, viaLauncher(ctx, LinearAlgo::kAuto));
    check<bf16, float>(w, xb, false, Path::kPrefill, {}, viaLauncher(ctx, LinearAlgo::kAuto));
    check<fp16, fp16>(w, xh, true, Path::kPrefill, {}, viaLauncher(ctx, LinearAlgo::kAuto));
    check<bf16, bf16>(w, x4, true, Path::kPrefill, {}, viaLauncher(ctx, LinearAlgo::kCublasLt));
  }
}

// Both paths recorded into a CUDA graph after an eager call of the shape; a prefill needing a
// larger dequantization scratch while capturing is rejected.
TEST(LinearQuantGpu, CapturedInAGraph) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(5);
  cudaStream_t stream;
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const QuantW w(QuantFormat::kInt4, 128, 1000, 1024, rng);
  auto graphed = [&](LinearParams p) {
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
  };
  for (int32_t m : {1, 16, 64}) {
    const Inputs<bf16> xb(m, w.n, w.k, rng);
    test::DeviceArray<float> warm(size_t(m) * w.n);
    kernel::launchLinear(paramsFor(w, xb.dX.get(), nullptr, warm.get(), m, DType::kBF16,
                                   DType::kF32, LinearAlgo::kAuto),
                         ctx, stream);
    ES_CUDA_CHECK(cudaStreamSynchronize(stream));
    check<bf16, float>(w, xb, false, m > 16 ? Path::kPrefill : Path::kGemv, {}, graphed);
  }
  // A W twice as large: its scratch cannot be allocated inside the capture.
  const QuantW big(QuantFormat::kInt4, 128, 2000, 1024, rng);
  const Inputs<bf16> xb(64, big.n, big.k, rng);
  test::DeviceArray<bf16> y(size_t(64) * big.n);
  ES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  EXPECT_THROW(kernel::launchLinear(paramsFor(big, xb.dX.get(), nullptr, y.get(), 64, DType::kBF16,
                                              DType::kBF16, LinearAlgo::kAuto),
                                    ctx, stream),
               InvalidArgument);
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  ES_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The fused input norm (normWeight: s * (W · round(x * normWeight)), s = 1 / sqrt(mean(x^2) +
// eps) per row) and residual add (accumulate: y = round(y + round(product))), as linear.h defines
// them for the gemv, against a double reference of that definition; then row invariance with both.
// Tolerance: as above with mag = s * sum |round(x * nw) * w|, plus 2^-18 |product| for s (an f32
// sum of squares and a square root), and with accumulate half an ulp of the product's rounding
// and of the sum's.
TEST(LinearQuantGpu, GemvFusedNormAndResidual) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const Case cases[] = {{QuantFormat::kInt4, 128, 300, 4096},
                        {QuantFormat::kFp8E4M3, 128, 37, 2064},
                        {QuantFormat::kGgufQ4_K, 256, 64, 12288},  // kSplit 4: a cluster
                        {QuantFormat::kGgufQ6_K, 256, 37, 1280},
                        {QuantFormat::kGgufQ4_1, 32, 37, 224}};
  for (const Case& c : cases) {
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    std::vector<bf16> nw(size_t(c.k));
    for (auto& v : nw) v = to_bf16(1.0f + 0.5f * unit(rng));
    const test::DeviceArray<bf16> dNw(nw);
    const float eps = 1e-6f;
    for (int32_t m : {1, 5, 16}) {
      const Inputs<bf16> in(m, c.n, c.k, rng);
      std::vector<bf16> y0(size_t(m) * c.n);
      for (auto& v : y0) v = to_bf16(4.0f * unit(rng));
      for (bool acc : {false, true}) {
        for (bool withBias : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << quantFormatName(c.format) << " m " << m << " n " << c.n << " k " << c.k
                       << " accumulate " << acc << " bias " << withBias);
          test::DeviceArray<bf16> dY(size_t(m) * c.n);
          poisonNaN(dY);
          if (acc) dY.upload(y0);
          LinearParams p = paramsFor(w, in.dX.get(), withBias ? in.dB.get() : nullptr, dY.get(), m,
                                     DType::kBF16, DType::kBF16, LinearAlgo::kAuto);
          p.normWeight = dNw.get();
          p.normEps = eps;
          p.accumulate = acc;
          kernel::launchLinear(p, ctx, nullptr);
          const std::vector<bf16> got = dY.download();
          size_t bad = 0;
          for (int32_t i = 0; i < m; ++i) {
            const bf16* xr = in.x.data() + size_t(i) * c.k;
            double ss = 0;
            std::vector<double> xn(size_t(c.k));
            for (int32_t kk = 0; kk < c.k; ++kk) {
              const float xv = to_float(xr[kk]);
              ss += double(xv) * xv;
              xn[size_t(kk)] = to_float(to_bf16(xv * to_float(nw[size_t(kk)])));
            }
            const double scale = 1.0 / std::sqrt(ss / c.k + eps);
            for (int32_t j = 0; j < c.n; ++j) {
              const float* wr = w.values.data() + size_t(j) * c.k;
              double sum = 0, mag = 0;
              for (int32_t kk = 0; kk < c.k; ++kk) {
                sum += xn[size_t(kk)] * wr[kk];
                mag += std::abs(xn[size_t(kk)] * wr[kk]);
              }
              sum *= scale;
              mag *= scale;
              if (withBias) sum += to_float(in.bias[size_t(j)]);
              const double before = acc ? to_float(y0[size_t(i) * c.n + j]) : 0.0;
              const double want = before + sum;
              const double half = std::ldexp(1.0, -8);
              const double allowed = 2 * std::ldexp(mag, -18) + std::ldexp(std::abs(sum), -18) +
                                     half * std::abs(want) + (acc ? half * std::abs(sum) : 0.0) +
                                     1e-30;
              const double g = to_float(got[size_t(i) * c.n + j]);
              if (!(std::abs(g - want) <= allowed) && ++bad <= 5) {
                ADD_FAILURE() << "y[" << i << "," << j << "] got " << g << " want " << want
                              << " (allowed " << allowed << ")";
              }
            }
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
    // Row invariance with the fused norm and residual add: the rows of a 16-row call equal 1-row
    // calls bit for bit.
    const Inputs<bf16> full(16, c.n, c.k, rng);
    std::vector<bf16> y0(size_t(16) * c.n);
    for (auto& v : y0) v = to_bf16(4.0f * unit(rng));
    test::DeviceArray<bf16> y16(y0);
    LinearParams p = paramsFor(w, full.dX.get(), full.dB.get(), y16.get(), 16, DType::kBF16,
                               DType::kBF16, LinearAlgo::kAuto);
    p.normWeight = dNw.get();
    p.accumulate = true;
    kernel::launchLinear(p, ctx, nullptr);
    const std::vector<bf16> all = y16.download();
    size_t bad = 0;
    for (int32_t r = 0; r < 16; ++r) {
      const std::vector<bf16> before(y0.begin() + size_t(r) * c.n,
                                     y0.begin() + size_t(r + 1) * c.n);
      test::DeviceArray<bf16> y1(before);
      LinearParams one = p;
      one.x = full.dX.get() + size_t(r) * c.k;
      one.y = y1.get();
      one.m = 1;
      kernel::launchLinear(one, ctx, nullptr);
      const std::vector<bf16> row = y1.download();
      for (int32_t j = 0; j < c.n; ++j) bad += row[size_t(j)].bits != all[size_t(r) * c.n + j].bits;
    }
    EXPECT_EQ(bad, 0u) << quantFormatName(c.format)
                       << ": fused rows differing from the 16-row call";
  }
}

// launchGateUpSwiglu on a quantized gate/up W in GateUpLayout::kInterleaved8: the gemv's SwiGLU
// epilogue (one kernel) equals the plain quantized gemv into [m, 2I] followed by launchSwiglu, bit
// for bit, with and without the fused input norm and a bias, at cluster and single-CTA splits.
TEST(LinearQuantGpu, GemvSwigluEpilogueEqualsUnfused) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const Case cases[] = {{QuantFormat::kInt4, 128, 512, 2048},
                        {QuantFormat::kFp8E4M3, 128, 96, 1040},
                        {QuantFormat::kGgufQ4_K, 256, 64, 12288},
                        {QuantFormat::kGgufQ6_K, 256, 96, 768},
                        {QuantFormat::kGgufQ8_0, 32, 48, 1056}};
  for (const Case& c : cases) {
    const QuantW w(c.format, c.group, c.n, c.k, rng);
    std::vector<bf16> nw(size_t(c.k));
    for (auto& v : nw) v = to_bf16(1.0f + 0.5f * unit(rng));
    const test::DeviceArray<bf16> dNw(nw);
    for (int32_t m : {1, 5, 16}) {
      const Inputs<bf16> in(m, c.n, c.k, rng);
      for (bool norm : {false, true}) {
        for (bool withBias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << quantFormatName(c.format) << " m " << m << " norm "
                                            << norm << " bias " << withBias);
          test::DeviceArray<bf16> gateUp(size_t(m) * c.n), fused(size_t(m) * c.n / 2),
              unfused(size_t(m) * c.n / 2);
          poisonNaN(fused);
          poisonNaN(unfused);
          LinearParams l = paramsFor(w, in.dX.get(), withBias ? in.dB.get() : nullptr, gateUp.get(),
                                     m, DType::kBF16, DType::kBF16, LinearAlgo::kAuto);
          if (norm) l.normWeight = dNw.get();
          kernel::launchGateUpSwiglu(
              {.linear = l, .out = fused.get(), .layout = kernel::GateUpLayout::kInterleaved8}, ctx,
              nullptr);
          kernel::launchLinear(l, ctx, nullptr);
          kernel::launchSwiglu({.gateUp = gateUp.get(),
                                .out = unfused.get(),
                                .rows = m,
                                .intermediateSize = c.n / 2,
                                .dtype = DType::kBF16,
                                .layout = kernel::GateUpLayout::kInterleaved8},
                               nullptr);
          const std::vector<bf16> a = fused.download(), b = unfused.download();
          size_t bad = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            // Both NaN would mean neither path wrote the output (the poison).
            if ((a[i].bits != b[i].bits || std::isnan(to_float(a[i]))) && ++bad <= 5) {
              ADD_FAILURE() << "out[" << i << "] fused " << to_float(a[i]) << " unfused "
                            << to_float(b[i]);
            }
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

TEST(LinearQuantGpu, Rejections) {
  ES_SKIP_IF_NO_GPU();
  kernel::LinearContext ctx;
  std::mt19937 rng(3);
  const QuantW w(QuantFormat::kFp8E4M3, 128, 64, 256, rng);
  const Inputs<bf16> xb(2, w.n, w.k + 8, rng);
  test::DeviceArray<bf16> y(size_t(2) * w.n);
  // x 16 bytes past a 16-byte boundary plus 2 bytes: misaligned for the gemv.
  LinearParams p = paramsFor(w, xb.dX.get() + 1, nullptr, y.get(), 2, DType::kBF16, DType::kBF16,
                             LinearAlgo::kGemv);
  EXPECT_NE(kernel::detail::quantGemvRejection(p), nullptr);
  EXPECT_THROW(kernel::launchLinear(p, ctx, nullptr), InvalidArgument);
  p.algo = LinearAlgo::kAuto;  // ... which kAuto sends to the prefill path instead
  EXPECT_NO_THROW(kernel::launchLinear(p, ctx, nullptr));
  ES_CUDA_CHECK(cudaDeviceSynchronize());
  // A fused norm where the gemv does not run (m > 16; kCublasLt).
  const Inputs<bf16> x20(20, w.n, w.k, rng);
  test::DeviceArray<bf16> y20(size_t(20) * w.n);
  LinearParams norm = paramsFor(w, x20.dX.get(), nullptr, y20.get(), 20, DType::kBF16, DType::kBF16,
                                LinearAlgo::kAuto);
  const std::vector<bf16> ones(size_t(w.k), to_bf16(1.0f));
  const test::DeviceArray<bf16> normW(ones);
  norm.normWeight = normW.get();
  EXPECT_THROW(kernel::launchLinear(norm, ctx, nullptr), InvalidArgument);
  norm.m = 2;
  norm.algo = LinearAlgo::kCublasLt;
  EXPECT_THROW(kernel::launchLinear(norm, ctx, nullptr), InvalidArgument);
  LinearParams many = norm;
  many.normWeight = nullptr;
  many.m = 17;
  EXPECT_NE(kernel::detail::quantGemvRejection(many), nullptr);
}

}  // namespace
}  // namespace es
