// CPU checks of the fused QKV split / q-k norm / NeoX RoPE / paged KV write reference: a rotation
// at position 1 by hand, q/k RMSNorm and partial rotary against a double formula, GQA with a
// scrambled page table across the 127/128/129 page boundary, padding rows, per-plane skipping of
// unmapped pages, untouched pool regions, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/qkv_rope_kv_write.h"
#include "kv/page_geometry.h"
#include "support/test_util.h"

namespace es {
namespace {

constexpr int32_t kPage = kv::kTokensPerPage;

template <typename T>
T cast(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, bf16>)
    return to_bf16(v);
  else
    return to_fp16(v);
}
template <typename T>
double back(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return to_float(v);
}

// cos/sin table [maxPositions, rotaryDim] for theta = 10000.
std::vector<float> ropeTable(int32_t maxPositions, int32_t rotary) {
  std::vector<float> t(size_t(maxPositions) * rotary);
  for (int32_t p = 0; p < maxPositions; ++p) {
    for (int32_t i = 0; i < rotary / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / rotary);
      t[size_t(p) * rotary + i] = float(std::cos(angle));
      t[size_t(p) * rotary + rotary / 2 + i] = float(std::sin(angle));
    }
  }
  return t;
}

// The contract in double: optional RMSNorm, then NeoX rotation of the first `rotary` dims.
std::vector<double> expectedHead(const std::vector<double>& x, const std::vector<double>* w,
                                 double eps, const float* cs, int32_t rotary) {
  const size_t dim = x.size();
  std::vector<double> n = x;
  if (w != nullptr) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (size_t i = 0; i < dim; ++i) n[i] = x[i] * s * (*w)[i];
  }
  std::vector<double> out = n;
  const int32_t h = rotary / 2;
  for (int32_t i = 0; i < h; ++i) {
    out[i] = n[i] * cs[i] - n[i + h] * cs[h + i];
    out[i + h] = n[i + h] * cs[i] + n[i] * cs[h + i];
  }
  return out;
}

template <typename T>
std::vector<T> sentinelPool(size_t n) {
  std::vector<T> pool(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>)
      pool[i] = 1000.0f + float(i % 97);
    else
      pool[i].bits = static_cast<uint16_t>(0x7000u | (i & 0x3ffu));
  }
  return pool;
}

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Hq = Hkv = 1, D = 64, full rotary, position 1 (cos/sin of angle 10000^(-2i/64)).
// q = [1 x32 | 2 x32] so q'[i] = c_i - 2 s_i and q'[i+32] = 2 c_i + s_i; at i = 0 the angle is
// 1 rad: q'[0] = cos 1 - 2 sin 1 = -1.142639..., q'[32] = 2 cos 1 + sin 1 = 1.922075...
TEST(QkvRopeKvWriteRef, HandRotationAtPosition1) {
  const int32_t dim = 64, num_pages = 2;
  std::vector<float> qkv(3 * dim);
  for (int32_t i = 0; i < dim; ++i) {
    qkv[i] = i < 32 ? 1.0f : 2.0f;
    qkv[dim + i] = 0.01f * float(i);
    qkv[2 * dim + i] = -3.0f + 0.5f * float(i);
  }
  const std::vector<float> cs = ropeTable(2, dim);
  const std::vector<int32_t> positions = {1}, owners = {0};
  const std::vector<int32_t> table = {1, 0 + num_pages};  // K page 1, V flat page 2 (K id 0)
  std::vector<float> pool = sentinelPool<float>(size_t(2) * num_pages * kPage * dim);
  const std::vector<float> before = pool;
  std::vector<float> qOut(dim, -5.0f);
  kernel::QkvRopeKvWriteParams p{.qkv = qkv.data(),
                                 .cosSin = cs.data(),
                                 .maxPositions = 2,
                                 .positions = positions.data(),
                                 .tokenToSequence = owners.data(),
                                 .pageTable = table.data(),
                                 .kvPool = pool.data(),
                                 .qOut = qOut.data(),
                                 .numTokens = 1,
                                 .batchSize = 1,
                                 .numQHeads = 1,
                                 .numKVHeads = 1,
                                 .headDim = dim,
                                 .rotaryDim = dim,
                                 .numPages = num_pages,
                                 .maxPagesPerSeq = 1,
                                 .dtype = DType::kF32};
  ref::qkvRopeKvWrite(p);
  EXPECT_NEAR(qOut[0], std::cos(1.0) - 2 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(qOut[32], 2 * std::cos(1.0) + std::sin(1.0), 1e-6);
  EXPECT_NEAR(qOut[0], -1.1426396637, 1e-6);
  for (int32_t i = 0; i < 32; ++i) {
    const double a = std::pow(10000.0, -2.0 * i / dim);
    EXPECT_NEAR(qOut[i], std::cos(a) - 2 * std::sin(a), 1e-6) << i;
    EXPECT_NEAR(qOut[i + 32], 2 * std::cos(a) + std::sin(a), 1e-6) << i;
    const double k0 = 0.01 * i, k1 = 0.01 * (i + 32);
    const size_t kbase = (size_t(1) * kPage + 1) * dim;  // K page 1, slot 1
    EXPECT_NEAR(pool[kbase + i], k0 * std::cos(a) - k1 * std::sin(a), 1e-6) << i;
    EXPECT_NEAR(pool[kbase + i + 32], k1 * std::cos(a) + k0 * std::sin(a), 1e-6) << i;
  }
  const size_t vbase = (size_t(2) * kPage + 1) * dim;  // flat V page 2, slot 1
  for (int32_t i = 0; i < dim; ++i) EXPECT_EQ(pool[vbase + i], qkv[2 * dim + i]) << i;
  for (size_t i = 0; i < pool.size(); ++i) {
    const bool kRow = i >= (size_t(1) * kPage + 1) * dim && i < (size_t(1) * kPage + 2) * dim;
    const bool vRow = i >= vbase && i < vbase + dim;
    if (!kRow && !vRow) {
      ASSERT_EQ(pool[i], before[i]) << "untouched element " << i;
    }
  }
}

struct Case {
  int32_t hq, hkv, dim, rotary;
  bool q_norm, k_norm;
};

// Two sequences over a scrambled page table, tokens at 127/128/129 and the last page, padding
// rows of every kind, a K entry unmapped (V still written) and a V entry outside its plane
// (K still written). Every written element is checked against the double formula; every other
// pool element must keep its sentinel bits; padding q rows must be zero.
template <typename T>
void gqaCase(DType dtype, const Case& c, double rel) {
  SCOPED_TRACE(::testing::Message()
               << dtype_name(dtype) << " Hq " << c.hq << " Hkv " << c.hkv << " D " << c.dim
               << " rot " << c.rotary << " qn " << c.q_norm << " kn " << c.k_norm);
  const int32_t num_pages = 7, max_pages = 3, batch = 2, maxPos = 3 * kPage;
  // Sequence 0: K pages {4, 0, 6}; sequence 1: K pages {-1 (unmapped), 2, 5} with V of logical
  // page 2 pointing into the K plane (id 1 < numPages): skipped for V only.
  const std::vector<int32_t> table = {4,  0, 6, 3 + num_pages, 1 + num_pages, 5 + num_pages,
                                      -1, 2, 5, 6 + num_pages, 2 + num_pages, 1};
  struct Tok {
    int32_t pos, owner;
  };
  const std::vector<Tok> toks = {{127, 0}, {128, 0}, {129, 0},    {-1, 0},    {5, -1}, {3, 1},
                                 {130, 1}, {300, 1}, {maxPos, 0}, {7, batch}, {383, 0}};
  const int32_t n = int32_t(toks.size());
  const int32_t row = (c.hq + 2 * c.hkv) * c.dim;
  std::mt19937 rng(uint32_t(c.hq * 31 + c.dim));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<T> qkv(size_t(n) * row), qw(c.dim), kw(c.dim);
  for (auto& v : qkv) v = cast<T>(dist(rng));
  for (auto& v : qw) v = cast<T>(dist(rng));
  for (auto& v : kw) v = cast<T>(dist(rng));
  std::vector<int32_t> positions(n), owners(n);
  for (int32_t t = 0; t < n; ++t) {
    positions[t] = toks[t].pos;
    owners[t] = toks[t].owner;
  }
  const std::vector<float> cs = ropeTable(maxPos, c.rotary);
  const size_t poolElems = size_t(2) * num_pages * kPage * c.hkv * c.dim;
  std::vector<T> pool = sentinelPool<T>(poolElems);
  const std::vector<T> before = pool;
  std::vector<T> qOut(size_t(n) * c.hq * c.dim);
  std::memset(qOut.data(), test::kPoisonByte, qOut.size() * sizeof(T));

  kernel::QkvRopeKvWriteParams p{.qkv = qkv.data(),
                                 .qNormWeight = c.q_norm ? qw.data() : nullptr,
                                 .kNormWeight = c.k_norm ? kw.data() : nullptr,
                                 .normEps = 1e-6f,
                                 .cosSin = cs.data(),
                                 .maxPositions = maxPos,
                                 .positions = positions.data(),
                                 .tokenToSequence = owners.data(),
                                 .pageTable = table.data(),
                                 .kvPool = pool.data(),
                                 .qOut = qOut.data(),
                                 .numTokens = n,
                                 .batchSize = batch,
                                 .numQHeads = c.hq,
                                 .numKVHeads = c.hkv,
                                 .headDim = c.dim,
                                 .rotaryDim = c.rotary,
                                 .numPages = num_pages,
                                 .maxPagesPerSeq = max_pages,
                                 .dtype = dtype};
  ref::qkvRopeKvWrite(p);

  std::vector<double> qwd(c.dim), kwd(c.dim);
  for (int32_t i = 0; i < c.dim; ++i) {
    qwd[i] = back(qw[i]);
    kwd[i] = back(kw[i]);
  }
  std::vector<char> written(poolElems, 0);
  auto headOf = [&](int32_t t, int32_t h) {
    std::vector<double> x(c.dim);
    for (int32_t i = 0; i < c.dim; ++i) x[i] = back(qkv[size_t(t) * row + size_t(h) * c.dim + i]);
    return x;
  };
  auto near = [&](double got, double want, const char* what, int32_t t, int32_t h, int32_t i) {
    EXPECT_NEAR(got, want, rel * std::abs(want) + 1e-5)
        << what << " token " << t << " head " << h << " dim " << i;
  };
  for (int32_t t = 0; t < n; ++t) {
    const bool live =
        toks[t].pos >= 0 && toks[t].pos < maxPos && toks[t].owner >= 0 && toks[t].owner < batch;
    for (int32_t h = 0; h < c.hq; ++h) {
      std::vector<double> want(c.dim, 0.0);
      if (live) {
        want = expectedHead(headOf(t, h), c.q_norm ? &qwd : nullptr, 1e-6,
                            cs.data() + size_t(toks[t].pos) * c.rotary, c.rotary);
      }
      for (int32_t i = 0; i < c.dim; ++i) {
        const T got = qOut[(size_t(t) * c.hq + h) * c.dim + i];
        if (!live) {
          ASSERT_EQ(back(got), 0.0) << "padding q row " << t;
        } else {
          near(back(got), want[i], "q", t, h, i);
        }
      }
    }
    if (!live) continue;
    const int32_t lp = toks[t].pos / kPage, slot = toks[t].pos % kPage;
    const int32_t kp = table[size_t(toks[t].owner) * 2 * max_pages + lp];
    const int32_t vp = table[size_t(toks[t].owner) * 2 * max_pages + max_pages + lp];
    for (int32_t h = 0; h < c.hkv; ++h) {
      if (kp >= 0 && kp < num_pages) {
        const auto want = expectedHead(headOf(t, c.hq + h), c.k_norm ? &kwd : nullptr, 1e-6,
                                       cs.data() + size_t(toks[t].pos) * c.rotary, c.rotary);
        const size_t base = ((size_t(kp) * kPage + slot) * c.hkv + h) * c.dim;
        for (int32_t i = 0; i < c.dim; ++i) {
          near(back(pool[base + i]), want[i], "k", t, h, i);
          written[base + i] = 1;
        }
      }
      if (vp >= num_pages && vp < 2 * num_pages) {
        const size_t base = ((size_t(vp) * kPage + slot) * c.hkv + h) * c.dim;
        for (int32_t i = 0; i < c.dim; ++i) {
          EXPECT_TRUE(same_bits(pool[base + i],
                                qkv[size_t(t) * row + size_t(c.hq + c.hkv + h) * c.dim + i]))
              << "v token " << t << " head " << h << " dim " << i;
          written[base + i] = 1;
        }
      }
    }
  }
  size_t changed = 0;
  for (size_t i = 0; i < poolElems; ++i) {
    if (!written[i] && !same_bits(pool[i], before[i])) ++changed;
  }
  EXPECT_EQ(changed, 0u) << "pool elements written outside the expected rows";
  // Sanity: the skipped planes really were skipped (sequence 1 logical page 0 K unmapped, its V
  // page 6+7=13 written; logical page 2 V id 1 in the K plane, its K page 5 written).
  EXPECT_TRUE(written[((size_t(13) * kPage + 3) * c.hkv) * c.dim]);
  EXPECT_TRUE(written[((size_t(5) * kPage + (300 % kPage)) * c.hkv) * c.dim]);
}

TEST(QkvRopeKvWriteRef, GqaPagesPaddingAndNorms) {
  gqaCase<float>(DType::kF32, {6, 2, 64, 64, true, true}, 1e-5);
  gqaCase<float>(DType::kF32, {4, 4, 128, 32, false, false}, 1e-5);
  gqaCase<bf16>(DType::kBF16, {9, 3, 64, 64, false, false}, std::ldexp(1.0, -8) * 1.1);
  gqaCase<bf16>(DType::kBF16, {8, 1, 256, 128, true, true}, std::ldexp(1.0, -8) * 1.1);
  gqaCase<fp16>(DType::kF16, {6, 3, 128, 128, true, false}, std::ldexp(1.0, -11) * 2);
  gqaCase<fp16>(DType::kF16, {2, 1, 64, 16, false, true}, std::ldexp(1.0, -11) * 2);
}

TEST(QkvRopeKvWriteRef, Validation) {
  std::vector<float> qkv(3 * 64), cs(64), pool(2 * 128 * 64), q(64);
  std::vector<int32_t> pos = {0}, own = {0}, table = {0, 1};
  auto make = [&] {
    kernel::QkvRopeKvWriteParams p{.qkv = qkv.data(),
                                   .cosSin = cs.data(),
                                   .maxPositions = 1,
                                   .positions = pos.data(),
                                   .tokenToSequence = own.data(),
                                   .pageTable = table.data(),
                                   .kvPool = pool.data(),
                                   .qOut = q.data(),
                                   .numTokens = 1,
                                   .batchSize = 1,
                                   .numQHeads = 1,
                                   .numKVHeads = 1,
                                   .headDim = 64,
                                   .rotaryDim = 64,
                                   .numPages = 1,
                                   .maxPagesPerSeq = 1,
                                   .dtype = DType::kF32};
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.numTokens = 0;
  p.qkv = nullptr;
  p.batchSize = 0;
  EXPECT_FALSE(kernel::validate(p));
  auto bad = [&](auto mutate, const char* arg) {
    auto pp = make();
    mutate(pp);
    test::expectInvalidArgument([&] { ref::qkvRopeKvWrite(pp); }, arg);
  };
  using P = kernel::QkvRopeKvWriteParams;
  bad([](P& x) { x.numTokens = -1; }, "numTokens");
  bad([](P& x) { x.numQHeads = 0; }, "numQHeads");
  bad([](P& x) { x.numKVHeads = 0; }, "numKVHeads");
  bad(
      [](P& x) {
        x.numQHeads = 3;
        x.numKVHeads = 2;
      },
      "numQHeads");
  bad(
      [](P& x) {
        x.headDim = 96;
        x.rotaryDim = 32;
      },
      "headDim");
  bad([](P& x) { x.rotaryDim = 0; }, "rotaryDim");
  bad([](P& x) { x.rotaryDim = 31; }, "rotaryDim");
  bad([](P& x) { x.rotaryDim = 66; }, "rotaryDim");
  bad([](P& x) { x.maxPositions = 0; }, "maxPositions");
  bad([](P& x) { x.numPages = 0; }, "numPages");
  bad([](P& x) { x.maxPagesPerSeq = 0; }, "maxPagesPerSeq");
  bad([](P& x) { x.dtype = DType::kU8; }, "dtype");
  bad(
      [&](P& x) {
        x.qNormWeight = q.data();
        x.normEps = 0.0f;
      },
      "normEps");
  bad([](P& x) { x.batchSize = 0; }, "batchSize");
  bad([](P& x) { x.qkv = nullptr; }, "qkv");
  bad([](P& x) { x.cosSin = nullptr; }, "cosSin");
  bad([](P& x) { x.positions = nullptr; }, "positions");
  bad([](P& x) { x.tokenToSequence = nullptr; }, "tokenToSequence");
  bad([](P& x) { x.pageTable = nullptr; }, "pageTable");
  bad([](P& x) { x.kvPool = nullptr; }, "kvPool");
  bad([](P& x) { x.qOut = nullptr; }, "qOut");
  bad([&](P& x) { x.qOut = qkv.data(); }, "qOut");
}

}  // namespace
}  // namespace es
