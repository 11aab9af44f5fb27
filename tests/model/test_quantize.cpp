// The round-to-nearest quantizers of `edgespec quantize` (model/quantize.h) against values
// decoded here from the format definitions (E4M3: sign, 4-bit exponent of bias 7, 3-bit
// mantissa, subnormals at exponent 0, S.1111.111 NaN; int4: (q - z) * s), the AWQ GEMM packing
// against a hand-computed word, and the folder writer (model/quantize_folder.h) on the qwen3
// fixture: what it writes, sharding, and every refusal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "common/errors.h"
#include "model/quantize.h"
#include "model/quantize_folder.h"
#include "model/weight_store.h"
#include "support/poisoned_model.h"
#include "support/test_util.h"

namespace es::model {
namespace {

namespace fs = std::filesystem;

// E4M3 from its definition (independent of the encoder and of common/quant_dequant).
float decodeE4M3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float v = e == 15 && m == 7 ? std::numeric_limits<float>::quiet_NaN()
                  : e == 0          ? std::ldexp(static_cast<float>(m) / 8.0f, -6)
                                    : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  return (c & 0x80) ? -v : v;
}

uint8_t int4Q(const HostQuantizedMatrix& m, int64_t r, int64_t c) {
  return (m.data[static_cast<size_t>(r * (m.k / 2) + c / 2)] >> (4 * (c % 2))) & 15;
}
float int4Scale(const HostQuantizedMatrix& m, int64_t r, int64_t g) {
  fp16 s;
  std::memcpy(&s, m.scales.data() + 2 * (r * (m.k / m.group) + g), 2);
  return to_float(s);
}
uint8_t int4Zero(const HostQuantizedMatrix& m, int64_t r, int64_t g) {
  return m.zeros[static_cast<size_t>(r * (m.k / m.group) + g)];
}
// W' [n, k] from the int4 layout: w = (q - z) * s in f32.
std::vector<float> dequantInt4(const HostQuantizedMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.n * m.k), std::nanf(""));
  for (int64_t r = 0; r < m.n; ++r)
    for (int64_t c = 0; c < m.k; ++c) {
      const int64_t g = c / m.group;
      out[r * m.k + c] =
          static_cast<float>(int4Q(m, r, c) - int4Zero(m, r, g)) * int4Scale(m, r, g);
    }
  return out;
}
float fp8RowScale(const HostQuantizedMatrix& m, int64_t r, int64_t c) {
  const int64_t blocks = (m.k + m.group - 1) / m.group;
  float s;
  std::memcpy(&s, m.scales.data() + 4 * (r * blocks + c / m.group), 4);
  return s;
}
std::vector<float> dequantFp8(const HostQuantizedMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.n * m.k), std::nanf(""));
  for (int64_t r = 0; r < m.n; ++r)
    for (int64_t c = 0; c < m.k; ++c)
      out[r * m.k + c] = decodeE4M3(m.data[r * m.k + c]) * fp8RowScale(m, r, c);
  return out;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// --- E4M3 encoder -------------------------------------------------------------------------------

TEST(Fp8Encoder, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float v = decodeE4M3(code);
    if (std::isnan(v)) {
      EXPECT_EQ(floatToFp8E4M3(v), code) << c;  // 0x7f and 0xff: the sign is kept
      continue;
    }
    EXPECT_EQ(floatToFp8E4M3(v), code) << "code " << c << " value " << v;
  }
}

TEST(Fp8Encoder, MidpointsRoundToEvenAndNeighboursToNearest) {
  // Between each pair of consecutive finite positive codes (0 .. 0x7e): the midpoint goes to the
  // even code, a value just below it to the lower code, just above it to the upper one.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = decodeE4M3(static_cast<uint8_t>(c));
    const float hi = decodeE4M3(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both are short binary fractions
    ASSERT_EQ(mid - lo, hi - mid);
    const int even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(floatToFp8E4M3(mid), even) << "between " << lo << " and " << hi;
    EXPECT_EQ(floatToFp8E4M3(-mid), 0x80 | even);
    EXPECT_EQ(floatToFp8E4M3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(floatToFp8E4M3(std::nextafter(mid, 1000.0f)), c + 1);
  }
  // Below the smallest subnormal (2^-9): half of it ties to 0 (even), more rounds up to it.
  EXPECT_EQ(floatToFp8E4M3(0x1p-10f), 0x00);
  EXPECT_EQ(floatToFp8E4M3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(floatToFp8E4M3(1e-30f), 0x00);
  EXPECT_EQ(floatToFp8E4M3(-0.0f), 0x80);
}

TEST(Fp8Encoder, SaturatesAndKeepsNaN) {
  for (float v : {448.0f, 448.5f, 464.0f, 479.0f, 480.0f, 1e6f, 3e38f,
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(floatToFp8E4M3(v), 0x7e) << v;
    EXPECT_EQ(floatToFp8E4M3(-v), 0xfe) << -v;
  }
  EXPECT_EQ(floatToFp8E4M3(std::nanf("")), 0x7f);
  EXPECT_EQ(floatToFp8E4M3(-std::nanf("")), 0xff);
  EXPECT_EQ(decodeE4M3(0x7e), 448.0f);
}

TEST(Fp16RoundUp, SmallestF16NotBelow) {
  EXPECT_EQ(fp16RoundUp(1.0f).bits, 0x3c00);
  EXPECT_EQ(fp16RoundUp(std::nextafter(1.0f, 2.0f)).bits, 0x3c01);
  EXPECT_EQ(fp16RoundUp(1e-9f).bits, 0x0001);  // smallest subnormal, 2^-24
  EXPECT_EQ(fp16RoundUp(0.0f).bits, 0x0000);
  EXPECT_EQ(fp16RoundUp(65504.0f).bits, 0x7bff);
  EXPECT_TRUE(std::isinf(to_float(fp16RoundUp(65504.5f))));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-20.0f, 15.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = std::exp2(d(rng));
    const fp16 h = fp16RoundUp(x);
    EXPECT_GE(to_float(h), x);
    EXPECT_LT(to_float(fp16{static_cast<uint16_t>(h.bits - 1)}), x);
  }
}

// --- int4 ---------------------------------------------------------------------------------------

TEST(QuantizeInt4, ValuesOnTheGridRoundTripExactly) {
  // Each group holds q = 0 and q = 15 (so its min / max are the grid's ends), a zero point in
  // [0, 15] (so 0 is inside) and an f16 scale: quantizing gives back s, z and every q.
  std::mt19937 rng(7);
  for (int32_t group : {32, 64, 128}) {
    const int64_t n = 5, k = 2 * group;
    std::vector<float> w(static_cast<size_t>(n * k));
    std::vector<uint8_t> qs(w.size()), zs(static_cast<size_t>(n * 2));
    std::vector<uint16_t> ss(zs.size());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < 2; ++g) {
        const uint8_t z = static_cast<uint8_t>(test::randomInts(rng, 1, 0, 15)[0]);
        const fp16 s = to_fp16(std::exp2(std::uniform_real_distribution<float>(-12, 4)(rng)));
        zs[r * 2 + g] = z;
        ss[r * 2 + g] = s.bits;
        const auto q = test::randomInts(rng, static_cast<size_t>(group), 0, 15);
        for (int64_t j = 0; j < group; ++j) {
          const uint8_t qj = j == 0 ? 0 : j == 1 ? 15 : static_cast<uint8_t>(q[j]);
          qs[r * k + g * group + j] = qj;
          w[r * k + g * group + j] = static_cast<float>(qj - z) * to_float(s);
        }
      }
    const HostQuantizedMatrix m = quantizeInt4(w, n, k, group, "grid");
    ASSERT_EQ(m.data.size(), static_cast<size_t>(n * k / 2));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t g = 0; g < 2; ++g) {
        fp16 s;
        std::memcpy(&s, m.scales.data() + 2 * (r * 2 + g), 2);
        EXPECT_EQ(s.bits, ss[r * 2 + g]);
        EXPECT_EQ(int4Zero(m, r, g), zs[r * 2 + g]);
      }
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(int4Q(m, r, c), qs[r * k + c]) << r << "," << c;
    }
    EXPECT_EQ(dequantInt4(m), w);
  }
}

// Each group's scale is the smallest f16 >= (hi - lo) / 15 of the group's range widened to 0,
// its zero point is in [0, 15], and every value comes back within s / 2 (+ 2^-20 s: the f32
// rounding of w / s, at most 15.5 in magnitude; (q - z) * s is exact in f32).
void expectInt4WithinHalfStep(const std::vector<float>& w, int64_t n, int64_t k, int32_t group) {
  const HostQuantizedMatrix m = quantizeInt4(w, n, k, group, "random");
  const std::vector<float> back = dequantInt4(m);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < k / group; ++g) {
      float lo = 0, hi = 0;
      bool constant = true;
      for (int64_t j = 0; j < group; ++j) {
        const float v = w[r * k + g * group + j];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        constant = constant && v == w[r * k + g * group];
      }
      const float s = int4Scale(m, r, g);
      if (!constant) {
        EXPECT_GE(s, (hi - lo) / 15.0f);
        fp16 bits = to_fp16(s);
        --bits.bits;
        EXPECT_LT(to_float(bits), (hi - lo) / 15.0f) << "scale not the smallest";
      }
      EXPECT_LE(int4Zero(m, r, g), 15);
      for (int64_t j = 0; j < group; ++j) {
        const int64_t i = r * k + g * group + j;
        const float tol = s * (0.5f + 0x1p-20f);
        ASSERT_LE(std::fabs(back[i] - w[i]), tol)
            << "row " << r << " col " << g * group + j << " w " << w[i] << " s " << s;
      }
    }
  }
}

TEST(QuantizeInt4, ErrorWithinHalfAStep) {
  std::mt19937 rng(11);
  for (int32_t group : {32, 64, 128}) {
    const int64_t n = 24, k = 4 * group;
    std::vector<float> w(static_cast<size_t>(n * k));
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (auto& v : w) v = d(rng);
    // Rows of other shapes: all positive, all negative, large, tiny (below f16's normals).
    for (int64_t c = 0; c < k; ++c) {
      w[1 * k + c] = 3.0f + std::fabs(d(rng));
      w[2 * k + c] = -7.0f - std::fabs(d(rng));
      w[3 * k + c] = d(rng) * 1e5f;
      w[4 * k + c] = d(rng) * 1e-6f;
    }
    expectInt4WithinHalfStep(w, n, k, group);
  }
}

TEST(QuantizeInt4, ConstantGroupsAreExact) {
  const int32_t group = 32;
  const std::vector<float> values = {0.0f, 0.375f, -3.0f, 1.0f / 1024, -0.0078125f, 1000.0f};
  std::vector<float> w;
  for (float v : values) w.insert(w.end(), group, v);
  const HostQuantizedMatrix m =
      quantizeInt4(w, static_cast<int64_t>(values.size()), group, group, "constant");
  EXPECT_EQ(dequantInt4(m), w);
  EXPECT_EQ(int4Scale(m, 0, 0), 1.0f);  // the zero group: s = 1, z = q = 0
  EXPECT_EQ(int4Scale(m, 2, 0), 3.0f);  // s = |c|, q - z = -1
  EXPECT_EQ(int4Zero(m, 2, 0), 1);
  // A constant that is no f16 value (1 + 2^-20) takes the general rule: within s / 2.
  std::vector<float> odd(group, 1.0f + 0x1p-20f);
  expectInt4WithinHalfStep(odd, 1, group, group);
}

TEST(QuantizeInt4, Refusals) {
  std::vector<float> w(2 * 96, 0.5f);
  EXPECT_NE(errorOf([&] { quantizeInt4(w, 2, 96, 64, "blk.w"); }).find("'blk.w'"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { quantizeInt4(w, 2, 96, 48, "blk.w"); }).find("group"), std::string::npos);
  w[96 + 5] = std::nanf("");
  const std::string nan = errorOf([&] { quantizeInt4(w, 2, 96, 32, "blk.w"); });
  EXPECT_NE(nan.find("'blk.w' has a non-finite value (nan) at [1, 5]"), std::string::npos) << nan;
  w[96 + 5] = 0.0f;
  w[7] = 2e6f;  // range / 15 > 65504
  const std::string big = errorOf([&] { quantizeInt4(w, 2, 96, 32, "blk.w"); });
  EXPECT_NE(big.find("row 0 group 0"), std::string::npos) << big;
  EXPECT_NE(big.find("65504"), std::string::npos) << big;
  EXPECT_THROW(quantizeInt4(std::span<const float>(w).first(10), 2, 96, 32, "blk.w"),
               InvalidArgument);
}

// --- fp8 ----------------------------------------------------------------------------------------

TEST(QuantizeFp8, ValuesOnTheGridRoundTripExactly) {
  // Blocks of fp8 values times a power of two, each holding +-448 (so amax / 448 is the scale):
  // the codes come back and so does W, with ragged last blocks (200 x 300).
  const int64_t n = 200, k = 300;
  std::mt19937 rng(5);
  std::vector<float> w(static_cast<size_t>(n * k));
  std::vector<float> blockScale(4);
  for (int64_t b = 0; b < 4; ++b) blockScale[b] = std::exp2(static_cast<float>(b * 3 - 6));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      uint8_t code = static_cast<uint8_t>(test::randomInts(rng, 1, 0, 255)[0]);
      if ((code & 0x7f) == 0x7f) code = 0;
      if (r % 128 == 0 && c % 128 == 0) code = 0xfe;  // -448 in every block
      const float s = blockScale[(r / 128) * 2 + (c / 128 >= 1 ? 1 : 0)];
      w[r * k + c] = decodeE4M3(code) * s;
    }
  // Column blocks 1 and 2 share a scale in this construction; block (., 2) gets its own -448.
  const HostQuantizedMatrix m = quantizeFp8Blocks(w, n, k, "grid");
  EXPECT_EQ(m.group, 128);
  ASSERT_EQ(m.scales.size(), static_cast<size_t>(n * 3 * 4));
  EXPECT_EQ(dequantFp8(m), w);
  const std::vector<float> inv = fp8BlockScaleInv(m);
  ASSERT_EQ(inv.size(), 6u);  // [ceil(200/128), ceil(300/128)] = [2, 3]
  for (int64_t rb = 0; rb < 2; ++rb)
    for (int64_t cb = 0; cb < 3; ++cb) {
      EXPECT_EQ(inv[rb * 3 + cb], blockScale[rb * 2 + (cb >= 1 ? 1 : 0)]) << rb << "," << cb;
      for (int64_t r = rb * 128; r < std::min<int64_t>(n, rb * 128 + 128); ++r)
        ASSERT_EQ(fp8RowScale(m, r, cb * 128), inv[rb * 3 + cb]);
    }
}

TEST(QuantizeFp8, ErrorWithinHalfAnUlpOfE4M3) {
  const int64_t n = 130, k = 257;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = d(rng);
  for (int64_t c = 0; c < k; ++c) w[c] = 0.0f;  // a zero row inside a block
  for (int64_t r = 128; r < n; ++r)
    for (int64_t c = 256; c < k; ++c) w[r * k + c] = 0.0f;  // an all-zero block
  const HostQuantizedMatrix m = quantizeFp8Blocks(w, n, k, "random");
  const std::vector<float> back = dequantFp8(m);
  EXPECT_EQ(fp8RowScale(m, 129, 256), 1.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const float s = fp8RowScale(m, r, c), v = w[r * k + c];
      // Normals: 3 mantissa bits, half an ulp is 2^-4 of the value; subnormals: half of 2^-9.
      // Plus the f32 rounding of w / s and of the product.
      const float tol = std::max(std::fabs(v) * 0x1p-4f, s * 0x1p-10f) * (1 + 0x1p-20f);
      ASSERT_LE(std::fabs(back[r * k + c] - v), tol) << r << "," << c;
    }
}

TEST(QuantizeFp8, Refusals) {
  std::vector<float> w(4 * 8, 1.0f);
  w[3 * 8 + 2] = -std::numeric_limits<float>::infinity();
  const std::string e = errorOf([&] { quantizeFp8Blocks(w, 4, 8, "x.weight"); });
  EXPECT_NE(e.find("'x.weight' has a non-finite value (-inf) at [3, 2]"), std::string::npos) << e;
  EXPECT_THROW(quantizeFp8Blocks(w, 4, 9, "x.weight"), InvalidArgument);
}

// --- AWQ packing --------------------------------------------------------------------------------

TEST(AwqPacking, HandComputedWords) {
  // 16 output features x 64 inputs, group 32: q[n][k] = n % 16 ^ (k % 2), zeros z[n][g] = 15 - n,
  // scales s[n][g] = n + g / 2.
  HostQuantizedMatrix m;
  m.format = QuantFormat::kInt4;
  m.group = 32;
  m.n = 16;
  m.k = 64;
  m.data.assign(16 * 32, 0);
  m.scales.resize(16 * 2 * 2);
  m.zeros.resize(16 * 2);
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t c = 0; c < 64; ++c)
      m.data[r * 32 + c / 2] |= static_cast<uint8_t>(((r ^ (c % 2)) & 15) << (4 * (c % 2)));
    for (int64_t g = 0; g < 2; ++g) {
      m.zeros[r * 2 + g] = static_cast<uint8_t>(15 - r);
      const fp16 s = to_fp16(static_cast<float>(r) + 0.5f * static_cast<float>(g));
      std::memcpy(m.scales.data() + 2 * (r * 2 + g), &s, 2);
    }
  }
  const AwqGemmTensors t = packAwqGemm(m);
  ASSERT_EQ(t.qweight.size(), 64u * 2);
  ASSERT_EQ(t.qzeros.size(), 2u * 2);
  ASSERT_EQ(t.scales.size(), 2u * 16);
  // Input row 0 (k even): word j holds features 8j + {0, 2, 4, 6, 1, 3, 5, 7} in nibbles 0..7.
  EXPECT_EQ(static_cast<uint32_t>(t.qweight[0]), 0x75316420u);
  EXPECT_EQ(static_cast<uint32_t>(t.qweight[1]), 0xfdb9eca8u);
  // Input row 1 (k odd): feature n holds n ^ 1.
  EXPECT_EQ(static_cast<uint32_t>(t.qweight[2]), 0x64207531u);
  // Zeros 15 - n: word 0 nibbles 15, 13, 11, 9, 14, 12, 10, 8.
  EXPECT_EQ(static_cast<uint32_t>(t.qzeros[0]), 0x8ace9bdfu);
  EXPECT_EQ(static_cast<uint32_t>(t.qzeros[2 + 1]), 0x02461357u);  // [group 1, word 1]: 7 .. 0
  EXPECT_EQ(to_float(t.scales[1 * 16 + 3]), 3.5f);                 // [group 1, feature 3]
  EXPECT_EQ(to_float(t.scales[0 * 16 + 9]), 9.0f);

  HostQuantizedMatrix odd = m;
  odd.n = 12;
  EXPECT_THROW(packAwqGemm(odd), InvalidArgument);
}

// --- the folder ---------------------------------------------------------------------------------

class QuantizeFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("es_quantize_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  static std::string fixture() { return test::test_data_dir() + "/models/qwen3"; }

  fs::path root_;
};

// A safetensors file's header and data section, read here (the loader does not know I32/F8).
struct RawSafetensors {
  nlohmann::json header;
  std::vector<uint8_t> data;
  std::vector<uint8_t> bytes(const std::string& name) const {
    const auto& o = header.at(name).at("data_offsets");
    return {data.begin() + o[0].get<int64_t>(), data.begin() + o[1].get<int64_t>()};
  }
};
RawSafetensors readRaw(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  RawSafetensors r;
  r.header = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + static_cast<int64_t>(n));
  r.data.assign(all.begin() + 8 + static_cast<int64_t>(n), all.end());
  return r;
}
std::vector<float> bf16AsFloat(const std::vector<uint8_t>& b) {
  std::vector<float> out(b.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    bf16 v;
    std::memcpy(&v, b.data() + 2 * i, 2);
    out[i] = to_float(v);
  }
  return out;
}
template <typename T>
std::vector<uint8_t> rawBytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST_F(QuantizeFolder, ShardedOutputHoldsWhatTheQuantizersGive) {
  for (const QuantizeTo to : {QuantizeTo::kInt4, QuantizeTo::kFp8}) {
    const fs::path out = root_ / (to == QuantizeTo::kInt4 ? "int4" : "fp8");
    const QuantizeReport r = quantizeFolder(
        fixture(), out, {.to = to, .group = 64, .maxShardBytes = 100'000, .progress = {}});
    EXPECT_EQ(r.quantized, 14u);
    EXPECT_GT(r.shards, 2u);
    const RawSafetensors in = readRaw(fs::path(fixture()) / "model.safetensors");
    std::ifstream indexFile(out / "model.safetensors.index.json");
    const nlohmann::json index = nlohmann::json::parse(indexFile);
    EXPECT_FALSE(fs::exists(out / "model.safetensors"));
    std::map<std::string, RawSafetensors> shards;
    uint64_t total = 0;
    size_t tensors = 0;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      if (!shards.count(file)) {
        std::ifstream f(out / file.get<std::string>(), std::ios::binary);
        uint64_t headerBytes = 0;
        f.read(reinterpret_cast<char*>(&headerBytes), 8);
        EXPECT_EQ(headerBytes % 8, 0u) << file << ": tensor data not 8-byte aligned";
        shards[file] = readRaw(out / file.get<std::string>());
      }
      const RawSafetensors& s = shards[file];
      ASSERT_TRUE(s.header.contains(name)) << name << " not in " << file;
      total += s.bytes(name).size();
      ++tensors;
    }
    EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
    EXPECT_EQ(tensors, r.tensorsOut);
    EXPECT_EQ(shards.size(), r.shards);
    auto tensor = [&](const std::string& name) {
      return shards.at(index.at("weight_map").at(name)).bytes(name);
    };
    const std::vector<std::string> linears = quantizedLinearNames(r.config);
    for (const auto& [name, meta] : in.header.items()) {
      if (name == "__metadata__") continue;
      const bool quantized = std::find(linears.begin(), linears.end(), name) != linears.end();
      if (!quantized) {
        EXPECT_EQ(tensor(name), in.bytes(name)) << name << " not copied byte for byte";
        continue;
      }
      const int64_t n = meta.at("shape")[0], k = meta.at("shape")[1];
      const std::vector<float> w = bf16AsFloat(in.bytes(name));
      const std::string module = name.substr(0, name.size() - 7);
      if (to == QuantizeTo::kInt4) {
        const AwqGemmTensors t = packAwqGemm(quantizeInt4(w, n, k, 64, name));
        EXPECT_EQ(tensor(module + ".qweight"), rawBytes(t.qweight)) << name;
        EXPECT_EQ(tensor(module + ".qzeros"), rawBytes(t.qzeros)) << name;
        EXPECT_EQ(tensor(module + ".scales"), rawBytes(t.scales)) << name;
      } else {
        const HostQuantizedMatrix m = quantizeFp8Blocks(w, n, k, name);
        EXPECT_EQ(tensor(name), m.data) << name;
        EXPECT_EQ(tensor(module + ".weight_scale_inv"), rawBytes(fp8BlockScaleInv(m))) << name;
      }
    }
    std::ifstream configFile(out / "config.json");
    const nlohmann::json config = nlohmann::json::parse(configFile);
    const nlohmann::json& q = config.at("quantization_config");
    EXPECT_EQ(q.at("quant_method"), to == QuantizeTo::kInt4 ? "awq" : "fp8");
    EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  }
}

TEST_F(QuantizeFolder, Refusals) {
  const fs::path out = root_ / "out";
  auto run = [&](const fs::path& in, const fs::path& o, QuantizeOptions options) {
    return errorOf([&] { quantizeFolder(in, o, options); });
  };
  const QuantizeOptions int4{.group = 128, .progress = {}};
  // down_proj is [128, 192]: not whole groups of 128. Nothing is written.
  std::string e = run(fixture(), out, int4);
  EXPECT_NE(e.find("'model.layers.0.mlp.down_proj.weight' [128, 192] cannot be int4 with --group "
                   "128: k must be a multiple of the int4 group (--group 64 fits)"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_NE(run(fixture(), out, {.group = 48, .progress = {}})
                .find("'--group' = 48: int4 group must be 32, 64 or 128"),
            std::string::npos);
  EXPECT_NE(run(fixture() + "/model.safetensors", out, int4).find("is not a folder"),
            std::string::npos);
  EXPECT_NE(run(root_ / "missing", out, int4).find("does not exist"), std::string::npos);
  std::ofstream(root_ / "model.gguf") << "GGUF";
  EXPECT_NE(run(root_ / "model.gguf", out, int4).find("convert it first"), std::string::npos);
  EXPECT_NE(run(root_, out, int4).find("no config.json"), std::string::npos);
  EXPECT_NE(
      run(fixture(), fixture(), {.group = 64, .force = true, .progress = {}}).find("is IN_FOLDER"),
      std::string::npos);

  // OUT not empty: refused, then written with force (its stale shards removed).
  fs::create_directories(out);
  std::ofstream(out / "model-00001-of-00009.safetensors") << "stale";
  EXPECT_NE(run(fixture(), out, {.group = 64, .progress = {}}).find("pass --force"),
            std::string::npos);
  quantizeFolder(fixture(), out, {.group = 64, .force = true, .progress = {}});
  EXPECT_FALSE(fs::exists(out / "model-00001-of-00009.safetensors"));
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  // Its output is quantized already.
  e = run(out, root_ / "again", {.to = QuantizeTo::kFp8, .progress = {}});
  EXPECT_NE(e.find("has a quantization_config (quant_method 'awq'): the model is quantized "
                   "already"),
            std::string::npos)
      << e;
  // An older compressed-tensors config marks it with compression_config.
  const fs::path compressed = root_ / "compressed";
  fs::copy(fixture(), compressed);
  std::ifstream configIn(compressed / "config.json");
  nlohmann::json config = nlohmann::json::parse(configIn);
  configIn.close();
  config["compression_config"] = {{"quant_method", "compressed-tensors"}};
  std::ofstream(compressed / "config.json") << config.dump();
  e = run(compressed, root_ / "again", {.to = QuantizeTo::kFp8, .progress = {}});
  EXPECT_NE(e.find("has a compression_config (quant_method 'compressed-tensors')"),
            std::string::npos)
      << e;
}

TEST_F(QuantizeFolder, NonFiniteWeightNamesTheTensorAndLeavesNothing) {
  const test::PoisonedModel model("model.layers.1.mlp.up_proj.weight", 3, test::kBf16NaN);
  const fs::path out = root_ / "out";
  const std::string e =
      errorOf([&] { quantizeFolder(model.dir(), out, {.to = QuantizeTo::kFp8, .progress = {}}); });
  EXPECT_NE(e.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("non-finite value (nan) at [3, 0]"), std::string::npos) << e;
  ASSERT_TRUE(fs::is_directory(out));
  EXPECT_TRUE(fs::is_empty(out)) << "a failed run left files behind";
}

}  // namespace
}  // namespace es::model
