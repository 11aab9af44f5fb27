// The quantized gemv's host rules and decoders, on the CPU (kernels/linear_quant_gemv.h and
// kernels/linear_quant_gemv_decode.h; the kernel itself is tested on the GPU by
// test_linear_quant_gpu.cpp).
//  * Decoders: every format (int4 at groups 32 / 64 / 128, fp8 at group 128 with a short last
//    group and a 16-element last block, and per channel, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K),
//    both operand dtypes: each row's spans staged as the kernel stages them (quant::spanSegment:
//    16-byte segments, the shift of GGUF rows that are not 16-byte aligned, zero fill past the end
//    of W), then every lane's operands for every block; each operand times its scale, plus the
//    block offset, rounded as the formats' definition rounds, must equal dequantizeRow's value of
//    the element the lane mapping names, exactly. Rows past n must decode to zeros.
//  * quant::dequant16 (the prefill path's dequantization kernel): every element, bit for bit.
//  * The span / shared-memory sizes agree with the decoders' traits; the launcher's kSplit rule;
//    quantGemvRejection's checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.h"
#include "common/quant_dequant.h"
#include "common/quant_format.h"
#include "kernels/linear.h"
#include "kernels/linear_quant_gemv.h"
#include "kernels/linear_quant_gemv_decode.h"

namespace es {
namespace {

using kernel::quant::Block;
using kernel::quant::RowSrc;
using kernel::quant::Traits;

void putHalf(uint8_t* p, float v) {
  const uint16_t b = to_fp16(v).bits;
  p[0] = static_cast<uint8_t>(b & 0xff);
  p[1] = static_cast<uint8_t>(b >> 8);
}

// A random quantized W [n, k] with finite scales (no NaN fp8 codes) and its reference values.
struct HostW {
  QuantFormat format;
  int32_t group, n, k;
  int64_t rowBytes;
  std::vector<uint8_t> data, scales, zeros;
  std::vector<float> values;

  HostW(QuantFormat f, int32_t group_, int32_t n_, int32_t k_, std::mt19937& rng)
      : format(f), group(group_), n(n_), k(k_), rowBytes(dataRowBytes(f, k_, group_)) {
    EXPECT_EQ(quantLayoutRejection(f, k, group), nullptr);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    data.resize(size_t(n) * rowBytes);
    for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
    scales.resize(size_t(n) * scaleRowBytes(f, k, group));
    zeros.resize(size_t(n) * zeroRowBytes(f, k, group));
    if (f == QuantFormat::kInt4) {
      for (size_t i = 0; i < scales.size() / 2; ++i) putHalf(&scales[2 * i], 0.02f * unit(rng));
      for (auto& z : zeros) z = static_cast<uint8_t>(byte(rng) & 15);
    } else if (f == QuantFormat::kFp8E4M3) {
      for (auto& b : data) {
        if ((b & 0x7f) == 0x7f) b ^= 0x01;
      }
      for (size_t i = 0; i < scales.size() / 4; ++i) {
        const float s = 0.01f * unit(rng);
        std::memcpy(&scales[4 * i], &s, 4);
      }
    } else {
      const int32_t bb = ggufBlockBytes(f);
      for (size_t at = 0; at < data.size(); at += size_t(bb)) {
        uint8_t* blk = &data[at];
        if (f == QuantFormat::kGgufQ6_K) {
          putHalf(blk + 208, 0.001f * unit(rng));
        } else {
          putHalf(blk, 0.01f * unit(rng));
          if (f != QuantFormat::kGgufQ8_0 && f != QuantFormat::kGgufQ4_0) {
            putHalf(blk + 2, 0.01f * unit(rng));
          }
        }
      }
    }
    values.resize(size_t(n) * k);
    const QuantizedWeightView v{.format = f,
                                .data = data.data(),
                                .scales = scales.empty() ? nullptr : scales.data(),
                                .zeros = zeros.empty() ? nullptr : zeros.data(),
                                .group = group};
    for (int32_t r = 0; r < n; ++r) {
      dequantizeRow(v, k, r, std::span<float>(values.data() + size_t(r) * k, size_t(k)));
    }
  }
};

// The staged copy of row `row`'s span u (the kernel's shared-memory row), filled first with a
// poison byte so that a byte the copy misses shows.
template <QuantFormat F>
std::vector<uint8_t> stage(const HostW& w, int64_t row, int64_t u) {
  using Tr = Traits<F>;
  std::vector<uint8_t> buf(size_t(Tr::kStride), 0xA5);
  const int64_t total = int64_t(w.data.size());
  for (int s = 0; s < Tr::kSegs; ++s) {
    const kernel::quant::Segment seg = kernel::quant::spanSegment<F>(row, w.n, w.rowBytes, u, s);
    if (seg.bytes < 0) continue;
    EXPECT_LE(seg.bytes, 16);
    EXPECT_EQ(seg.src % 16, 0);
    EXPECT_LE(seg.src + seg.bytes, total) << "a segment reads past the end of W";
    std::memset(&buf[size_t(16 * s)], 0, 16);
    if (seg.bytes > 0)
      std::memcpy(&buf[size_t(16 * s)], &w.data[size_t(seg.src)], size_t(seg.bytes));
  }
  return buf;
}

// k offset in the block of half h of pair j for lane t4 (the mapping of the decode header).
template <QuantFormat F>
int laneK(int t4, int j, int h) {
  const int e = 2 * j + h;
  if constexpr (Traits<F>::kSplit4) return e < 4 ? 4 * t4 + e : 16 + 4 * t4 + (e - 4);
  return 8 * t4 + e;
}

template <QuantFormat F, typename T>
void checkDecoders(const HostW& w) {
  using Tr = Traits<F>;
  SCOPED_TRACE(::testing::Message() << quantFormatName(F) << " group " << w.group << " n " << w.n
                                    << " k " << w.k << " " << dtype_name(dtype_of<T>));
  const int64_t spans = (int64_t{w.k} + Tr::kSpan - 1) / Tr::kSpan;
  const int64_t scaleElems = F == QuantFormat::kFp8E4M3 ? scaleRowBytes(F, w.k, w.group) / 4
                                                        : scaleRowBytes(F, w.k, w.group) / 2;
  size_t bad = 0, checked = 0;
  for (int64_t row = 0; row <= w.n; ++row) {  // row n: past the end (zeros)
    RowSrc src{};
    if (row < w.n && F == QuantFormat::kInt4) {
      src.scales = reinterpret_cast<const uint16_t*>(w.scales.data()) + row * scaleElems;
      src.zeros = w.zeros.data() + row * zeroRowBytes(F, w.k, w.group);
    } else if (row < w.n && F == QuantFormat::kFp8E4M3) {
      src.scales = reinterpret_cast<const float*>(w.scales.data()) + row * scaleElems;
    }
    for (int64_t u = 0; u < spans; ++u) {
      const std::vector<uint8_t> buf = stage<F>(w, row, u);
      const int64_t shift = kernel::quant::spanAt<F>(row, w.rowBytes, u) & 15;
      if (Tr::kAligned) {
        EXPECT_EQ(shift, 0) << "row " << row << " span " << u;
      }
      src.span = buf.data() + shift;
      const int64_t k0 = u * Tr::kSpan;
      for (int b = 0; b < Tr::kSpan / 32 && k0 + 32 * b < w.k; ++b) {
        const int64_t kb = k0 + 32 * b;
        for (int t4 = 0; t4 < 4; ++t4) {
          kernel::quant::loadGroup<F, T>(src, static_cast<uint32_t>(kb / w.group));
          const Block o = kernel::quant::decodeBlock<F, T>(src, b, t4);
          for (int j = 0; j < 4; ++j) {
            for (int h = 0; h < 2; ++h) {
              const int64_t kk = kb + laneK<F>(t4, j, h);
              if (kk >= w.k) continue;  // the kernel zeroes operands past k
              const float v = kernel::quant::pairHalf<T>(o.p[j], h);
              const float s = j < 2 ? o.s0 : o.s1;
              const float got = Tr::kAffine ? s * v + o.off : s * v;
              const float want = row < w.n ? w.values[size_t(row) * w.k + size_t(kk)] : 0.0f;
              ++checked;
              if (!(got == want) && ++bad <= 5) {
                ADD_FAILURE() << "row " << row << " k " << kk << " (block " << b << ", lane t4 "
                              << t4 << ", pair " << j << "." << h << "): got " << got << " = " << s
                              << " * " << v << " + " << o.off << ", want " << want;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << checked;
  EXPECT_EQ(checked, size_t(w.n + 1) * size_t(w.k));
}

template <QuantFormat F>
void checkFormat(int32_t group, int32_t n, int32_t k, std::mt19937& rng) {
  const HostW w(F, group, n, k, rng);
  checkDecoders<F, bf16>(w);
  checkDecoders<F, fp16>(w);
}

TEST(LinearQuantDecode, EveryFormatMatchesDequantizeRow) {
  std::mt19937 rng(1);
  checkFormat<QuantFormat::kInt4>(32, 5, 96, rng);
  checkFormat<QuantFormat::kInt4>(64, 5, 320, rng);
  checkFormat<QuantFormat::kInt4>(128, 5, 2176, rng);
  checkFormat<QuantFormat::kFp8E4M3>(128, 5, 144, rng);  // short last group, 16-element block
  checkFormat<QuantFormat::kFp8E4M3>(128, 5, 2064, rng);
  checkFormat<QuantFormat::kFp8E4M3>(1040, 5, 1040, rng);  // per channel
  checkFormat<QuantFormat::kGgufQ8_0>(32, 5, 96, rng);     // 102-byte rows: shifted spans
  checkFormat<QuantFormat::kGgufQ8_0>(32, 5, 1056, rng);
  checkFormat<QuantFormat::kGgufQ4_0>(32, 5, 160, rng);
  checkFormat<QuantFormat::kGgufQ4_0>(32, 5, 1024, rng);
  checkFormat<QuantFormat::kGgufQ4_1>(32, 5, 224, rng);
  checkFormat<QuantFormat::kGgufQ4_K>(256, 5, 768, rng);
  checkFormat<QuantFormat::kGgufQ5_K>(256, 5, 1280, rng);
  checkFormat<QuantFormat::kGgufQ6_K>(256, 5, 768, rng);  // 630-byte rows: shifted spans
  checkFormat<QuantFormat::kGgufQ6_K>(256, 3, 1280, rng);
}

// The prefill path's dequantization: every element of every row, bit for bit dequantizeRow's.
template <QuantFormat F>
void checkDequant16(int32_t group, int32_t n, int32_t k, std::mt19937& rng) {
  const HostW w(F, group, n, k, rng);
  SCOPED_TRACE(::testing::Message() << quantFormatName(F) << " group " << group << " k " << k);
  const QuantizedWeightView v{.format = F,
                              .data = w.data.data(),
                              .scales = w.scales.empty() ? nullptr : w.scales.data(),
                              .zeros = w.zeros.empty() ? nullptr : w.zeros.data(),
                              .group = group};
  size_t bad = 0;
  for (int32_t r = 0; r < n; ++r) {
    for (int32_t c0 = 0; c0 < k; c0 += 16) {
      float got[16];
      kernel::quant::dequant16(v, k, w.rowBytes, r, c0, got);
      for (int e = 0; e < 16; ++e) {
        const float want = w.values[size_t(r) * k + size_t(c0 + e)];
        if (std::memcmp(&got[e], &want, 4) != 0 && ++bad <= 5) {
          ADD_FAILURE() << "row " << r << " k " << c0 + e << ": got " << got[e] << " want " << want;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

TEST(LinearQuantDecode, Dequant16MatchesDequantizeRow) {
  std::mt19937 rng(2);
  checkDequant16<QuantFormat::kInt4>(32, 3, 96, rng);
  checkDequant16<QuantFormat::kInt4>(128, 3, 2176, rng);
  checkDequant16<QuantFormat::kFp8E4M3>(128, 3, 144, rng);
  checkDequant16<QuantFormat::kFp8E4M3>(1040, 3, 1040, rng);
  checkDequant16<QuantFormat::kGgufQ8_0>(32, 3, 96, rng);
  checkDequant16<QuantFormat::kGgufQ4_0>(32, 3, 160, rng);
  checkDequant16<QuantFormat::kGgufQ4_1>(32, 3, 224, rng);
  checkDequant16<QuantFormat::kGgufQ4_K>(256, 3, 768, rng);
  checkDequant16<QuantFormat::kGgufQ5_K>(256, 3, 1280, rng);
  checkDequant16<QuantFormat::kGgufQ6_K>(256, 3, 768, rng);
}

// Every fp8 byte (but the NaN codes, which the bf16 path does not keep: see fp8Pair) decodes to
// its value in both operand dtypes, in every byte of a word.
TEST(LinearQuantDecode, Fp8PairEveryByte) {
  for (uint32_t a = 0; a < 256; ++a) {
    if ((a & 0x7f) == 0x7f) continue;
    for (int at = 0; at < 4; ++at) {
      // byte `at` is a, the others bytes that are not NaN codes
      uint32_t w = 0;
      for (int i = 0; i < 4; ++i) {
        uint32_t b = i == at ? a : (a * 37u + 11u * uint32_t(i)) & 0xffu;
        if (i != at && (b & 0x7f) == 0x7f) b ^= 1;
        w |= b << (8 * i);
      }
      for (int i = 0; i < 4; ++i) {
        const float want = fp8E4M3ToFloat(static_cast<uint8_t>((w >> (8 * i)) & 0xffu));
        const int pair = i / 2, half = i % 2;
        EXPECT_EQ(kernel::quant::pairHalf<bf16>(kernel::quant::fp8Pair<bf16>(w, pair), half), want)
            << std::hex << w << " byte " << i;
        EXPECT_EQ(kernel::quant::pairHalf<fp16>(kernel::quant::fp8Pair<fp16>(w, pair), half), want)
            << std::hex << w << " byte " << i;
      }
    }
  }
}

template <QuantFormat F>
void expectSizes() {
  EXPECT_EQ(kernel::detail::quantGemvSpan(F), Traits<F>::kSpan) << quantFormatName(F);
  EXPECT_EQ(kernel::detail::quantGemvRowStride(F), Traits<F>::kStride) << quantFormatName(F);
  EXPECT_EQ(dataRowBytes(F, Traits<F>::kSpan, 32), Traits<F>::kSpanBytes) << quantFormatName(F);
  // Two CTAs an SM: the stages (dynamic) and the partial sums (9 KB static) within 227 KB each.
  EXPECT_LE(2 * (kernel::detail::quantGemvSmemBytes(F) + 9 * 1024), 228 * 1024);
}

TEST(LinearQuantDecode, SizesAgree) {
  expectSizes<QuantFormat::kInt4>();
  expectSizes<QuantFormat::kFp8E4M3>();
  expectSizes<QuantFormat::kGgufQ8_0>();
  expectSizes<QuantFormat::kGgufQ4_0>();
  expectSizes<QuantFormat::kGgufQ4_1>();
  expectSizes<QuantFormat::kGgufQ4_K>();
  expectSizes<QuantFormat::kGgufQ5_K>();
  expectSizes<QuantFormat::kGgufQ6_K>();
}

TEST(LinearQuantDecode, KSplitRule) {
  using kernel::detail::chooseQuantGemvConfig;
  // Qwen3-8B on 132 SMs (264 CTA slots a wave). qkv: 384 tiles fill 1.45 waves (73 %), split 2
  // fills 2.9 (97 %).
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kInt4, 6144, 4096, 132).kSplit, 2);
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kFp8E4M3, 6144, 4096, 132).kSplit, 2);
  // o, gate_up, down, lm_head: 97 % and more unsplit; a split fills no better.
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kInt4, 4096, 4096, 132).kSplit, 1);
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kInt4, 24576, 4096, 132).kSplit, 1);
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kInt4, 4096, 12288, 132).kSplit, 1);
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kGgufQ4_K, 151936, 4096, 132).kSplit, 1);
  // A thin W: the largest split whose spans still give every warp of the cluster one.
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kFp8E4M3, 64, 65536, 132).kSplit, 8);
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kGgufQ6_K, 64, 12288, 132).kSplit, 4);
  EXPECT_EQ(chooseQuantGemvConfig(QuantFormat::kInt4, 64, 2048, 132).kSplit, 1);  // 8 spans
  // Never more warps a cluster than spans.
  for (int32_t k : {256, 1024, 4096, 12288}) {
    for (int32_t n : {16, 1000, 6144}) {
      const int32_t split = chooseQuantGemvConfig(QuantFormat::kInt4, n, k, 132).kSplit;
      EXPECT_LE(8 * split, std::max(8, (k + 255) / 256)) << n << " x " << k;
    }
  }
}

TEST(LinearQuantDecode, Rejections) {
  alignas(16) static uint8_t bytes[4096];
  const QuantizedWeightView fp8{.format = QuantFormat::kFp8E4M3,
                                .data = bytes,
                                .scales = bytes + 1024,
                                .zeros = nullptr,
                                .group = 128};
  kernel::LinearParams p{.x = bytes + 2048,
                         .w = bytes,
                         .y = bytes + 3072,
                         .m = 1,
                         .n = 4,
                         .k = 256,
                         .dtype = DType::kBF16,
                         .outDtype = DType::kBF16};
  EXPECT_NE(kernel::detail::quantGemvRejection(p), nullptr);  // not quantized
  p.quantized = fp8;
  EXPECT_EQ(kernel::detail::quantGemvRejection(p), nullptr);
  auto rejects = [&](auto edit, const char* what) {
    kernel::LinearParams q = p;
    edit(q);
    EXPECT_NE(kernel::detail::quantGemvRejection(q), nullptr) << what;
  };
  rejects([](kernel::LinearParams& q) { q.m = 17; }, "m 17");
  rejects([](kernel::LinearParams& q) { q.k = 200; }, "k % 16");
  rejects([](kernel::LinearParams& q) { q.dtype = q.outDtype = DType::kF32; }, "f32 x");
  rejects([](kernel::LinearParams& q) { q.x = bytes + 2050; }, "x misaligned");
  rejects([](kernel::LinearParams& q) { q.quantized->data = bytes + 8; }, "data misaligned");
  rejects([](kernel::LinearParams& q) { q.quantized->scales = bytes + 1026; }, "scales");
  rejects([](kernel::LinearParams& q) { q.quantized->scales = nullptr; }, "no scales");
  rejects([](kernel::LinearParams& q) { q.quantized->group = 64; }, "fp8 group 64");
  rejects(
      [](kernel::LinearParams& q) {
        q.normWeight = bytes;
        q.outDtype = DType::kF32;
      },
      "norm with f32 y");
  rejects(
      [](kernel::LinearParams& q) {
        q.accumulate = true;
        q.outDtype = DType::kF32;
      },
      "accumulate with f32 y");
  rejects([](kernel::LinearParams& q) { q.normWeight = bytes + 2; }, "normWeight misaligned");
  {
    kernel::LinearParams q = p;
    q.normWeight = bytes;
    q.accumulate = true;
    EXPECT_EQ(kernel::detail::quantGemvRejection(q), nullptr) << "fused norm and residual add";
  }
  rejects(
      [](kernel::LinearParams& q) {
        q.quantized = QuantizedWeightView{
            .format = QuantFormat::kInt4, .data = bytes, .scales = bytes, .group = 128};
      },
      "int4 without zeros");
}

}  // namespace
}  // namespace es
