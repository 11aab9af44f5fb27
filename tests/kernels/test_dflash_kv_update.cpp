// CPU checks of the DFlash target KV update reference (spec §2.1) and checkDFlashRopeCapacity
// (§2.2): hand-computed RoPE, an independent double-precision NeoX formula, scrambled and
// independently mapped K/V page tables, padding rows, page boundaries, per-plane skipping, and
// argument validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/errors.h"
#include "kernels/dflash_kv_update.h"
#include "support/test_util.h"

namespace es {
namespace {

using kernel::DFlashTargetKVCacheUpdateParams;
constexpr int32_t kPage = 128;

inline float toF(fp16 v) { return to_float(v); }
inline float toF(bf16 v) { return to_float(v); }
template <typename T>
T fromF(float v);
template <>
fp16 fromF<fp16>(float v) {
  return to_fp16(v);
}
template <>
bf16 fromF<bf16>(float v) {
  return to_bf16(v);
}

// Throws es::InvalidArgument whose message quotes the argument name.
// A pool [2, numPages, 128, hkv, dim] filled with a recognisable per-element bit pattern that no
// test input uses (so any element written by mistake, or not written, is visible).
template <typename T>
std::vector<T> sentinelPool(int32_t num_pages, int32_t hkv, int32_t dim) {
  std::vector<T> pool(size_t{2} * num_pages * kPage * hkv * dim);
  for (size_t i = 0; i < pool.size(); ++i)
    pool[i].bits = static_cast<uint16_t>(0x7000u | (i & 0x3ffu));
  return pool;
}

template <typename T>
int64_t poolOffset(int32_t flatPage, int32_t slot, int32_t h, int32_t d, int32_t hkv, int32_t dim) {
  return ((int64_t{flatPage} * kPage + slot) * hkv + h) * dim + d;
}

template <typename T>
class KvUpdateRef : public ::testing::Test {};
using CacheTypes = ::testing::Types<fp16, bf16>;
TYPED_TEST_SUITE(KvUpdateRef, CacheTypes);

// Rotation by 90 degrees (cos 0, sin 1) on pair 0 and by 0 (cos 1, sin 0) on pair 1:
// k = [1, 2, 3, 4] -> [1*0 - 3*1, 2*1 - 4*0, 3*0 + 1*1, 4*1 + 2*0] = [-3, 2, 1, 4].
TYPED_TEST(KvUpdateRef, HandComputedRotateHalf) {
  using T = TypeParam;
  const int32_t num_pages = 1;
  std::vector<T> k = {fromF<T>(1), fromF<T>(2), fromF<T>(3), fromF<T>(4)};
  std::vector<T> v = {fromF<T>(5), fromF<T>(6), fromF<T>(7), fromF<T>(8)};
  std::vector<float> cosSin = {0.0f, 1.0f, 1.0f, 0.0f};  // cos[0], cos[1], sin[0], sin[1]
  std::vector<int32_t> positions = {3}, owners = {0}, table = {0, 1};
  std::vector<T> pool = sentinelPool<T>(num_pages, 1, 4);
  const std::vector<T> before = pool;

  DFlashTargetKVCacheUpdateParams<T> p;
  p.kDelta = k.data();
  p.vDelta = v.data();
  p.kvCache = pool.data();
  p.tokenAlignedCosSin = cosSin.data();
  p.deltaPositions = positions.data();
  p.deltaTokenToSequence = owners.data();
  p.pageTable = table.data();
  p.numDeltaTokens = 1;
  p.batchSize = 1;
  p.numKVHeads = 1;
  p.headDim = 4;
  p.rotaryDim = 4;
  p.numPages = num_pages;
  p.maxPagesPerSeq = 1;
  ref::dflashTargetKVCacheUpdate(p);

  const float wantK[4] = {-3, 2, 1, 4};
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(toF(pool[poolOffset<T>(0, 3, 0, d, 1, 4)]), wantK[d]) << "k dim " << d;
    EXPECT_EQ(toF(pool[poolOffset<T>(1, 3, 0, d, 1, 4)]), 5.0f + d) << "v dim " << d;
  }
  for (size_t i = 0; i < pool.size(); ++i) {
    const bool written = (i >= size_t(poolOffset<T>(0, 3, 0, 0, 1, 4)) &&
                          i < size_t(poolOffset<T>(0, 4, 0, 0, 1, 4))) ||
                         (i >= size_t(poolOffset<T>(1, 3, 0, 0, 1, 4)) &&
                          i < size_t(poolOffset<T>(1, 4, 0, 0, 1, 4)));
    if (!written) {
      ASSERT_EQ(pool[i].bits, before[i].bits) << "untouched element " << i;
    }
  }
}

// Random K against the NeoX formula evaluated in double in this test, rotaryDim = D and < D.
TYPED_TEST(KvUpdateRef, MatchesDoublePrecisionNeoxFormula) {
  using T = TypeParam;
  // One rounding to the cache type: half an ulp, relative 2^-8 (bf16) or 2^-11 (fp16).
  const double rel = std::is_same_v<T, bf16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  for (const int32_t rotaryDim : {32, 16, 6}) {
    const int32_t hkv = 3, dim = 32, tokens = 5, num_pages = 4;
    const int32_t half = rotaryDim / 2;
    const std::vector<int32_t> positions = {0, 1, 127, 128, 300};
    const std::vector<int32_t> owners = {0, 0, 0, 0, 0};
    const std::vector<int32_t> table = {2, 0, 3, 1 + num_pages, 3 + num_pages, 0 + num_pages};
    std::vector<T> k(size_t(tokens) * hkv * dim), v(k.size());
    uint32_t state = 12345u + rotaryDim;
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 4.0f - 2.0f;
    };
    for (auto& x : k) x = fromF<T>(next());
    for (auto& x : v) x = fromF<T>(next());
    std::vector<float> cosSin(size_t(tokens) * rotaryDim);
    for (int32_t r = 0; r < tokens; ++r) {
      for (int32_t j = 0; j < half; ++j) {
        const double angle = positions[r] * std::pow(10000.0, -2.0 * j / rotaryDim);
        cosSin[r * rotaryDim + j] = static_cast<float>(std::cos(angle));
        cosSin[r * rotaryDim + half + j] = static_cast<float>(std::sin(angle));
      }
    }
    std::vector<T> pool = sentinelPool<T>(num_pages, hkv, dim);
    DFlashTargetKVCacheUpdateParams<T> p;
    p.kDelta = k.data();
    p.vDelta = v.data();
    p.kvCache = pool.data();
    p.tokenAlignedCosSin = cosSin.data();
    p.deltaPositions = positions.data();
    p.deltaTokenToSequence = owners.data();
    p.pageTable = table.data();
    p.numDeltaTokens = tokens;
    p.batchSize = 1;
    p.numKVHeads = hkv;
    p.headDim = dim;
    p.rotaryDim = rotaryDim;
    p.numPages = num_pages;
    p.maxPagesPerSeq = 3;
    ref::dflashTargetKVCacheUpdate(p);

    for (int32_t r = 0; r < tokens; ++r) {
      const int32_t lp = positions[r] / kPage, slot = positions[r] % kPage;
      const int32_t kPageId = table[lp], vPageId = table[3 + lp];
      for (int32_t h = 0; h < hkv; ++h) {
        const T* kin = &k[(size_t(r) * hkv + h) * dim];
        const T* vin = &v[(size_t(r) * hkv + h) * dim];
        for (int32_t i = 0; i < dim; ++i) {
          const T got = pool[poolOffset<T>(kPageId, slot, h, i, hkv, dim)];
          if (i >= rotaryDim) {
            EXPECT_EQ(got.bits, kin[i].bits) << "pass-through dim " << i;
          } else {
            const int32_t j = i < half ? i : i - half;
            const double c = cosSin[r * rotaryDim + j], s = cosSin[r * rotaryDim + half + j];
            const double want = i < half ? double(toF(kin[i])) * c - double(toF(kin[i + half])) * s
                                         : double(toF(kin[i])) * c + double(toF(kin[i - half])) * s;
            EXPECT_NEAR(toF(got), want, rel * std::fabs(want) + 1e-5)
                << "rotary " << rotaryDim << " token " << r << " head " << h << " dim " << i;
          }
          EXPECT_EQ(pool[poolOffset<T>(vPageId, slot, h, i, hkv, dim)].bits, vin[i].bits);
        }
      }
    }
  }
}

// Scrambled page table, K and V mapped independently, page boundaries 127/128/129, the last page,
// a position past capacity, padding rows, and per-plane skipping of unmapped or out-of-plane ids.
TYPED_TEST(KvUpdateRef, ScrambledTableAndPerPlaneSkipping) {
  using T = TypeParam;
  const int32_t hkv = 2, dim = 16, rotaryDim = 8, num_pages = 6, max_pages = 3, batch = 2;
  // [B, 2, maxPages]: K ids then V ids (V ids carry +numPages = +6).
  const std::vector<int32_t> table = {
      4,          1,  5,
      /* V */ 8,  6,  3,  // seq 0: V page 2 holds a K-plane id (3): V skipped there
      2,          -1, 9,
      /* V */ 11, 9,  12  // seq 1: K -1 and 9 >= numPages skip K; V 12 = 2*numPages skips V
  };
  struct Row {
    int32_t owner, pos;
  };
  const std::vector<Row> rows = {{0, 0},  {0, 127}, {0, 128}, {0, 129}, {0, 383}, {0, 384},
                                 {-1, 5}, {1, -1},  {2, 5},   {1, 130}, {1, 300}, {1, 127}};
  const int32_t tokens = static_cast<int32_t>(rows.size());
  // Hand-derived writes: (flat page, slot, row, plane 0 = K / 1 = V).
  struct Write {
    int32_t page, slot, row, plane;
  };
  const std::vector<Write> writes = {{4, 0, 0, 0},   {8, 0, 0, 1},    {4, 127, 1, 0},
                                     {8, 127, 1, 1}, {1, 0, 2, 0},    {6, 0, 2, 1},
                                     {1, 1, 3, 0},   {6, 1, 3, 1},    {5, 127, 4, 0},
                                     {9, 2, 9, 1},   {2, 127, 11, 0}, {11, 127, 11, 1}};

  std::vector<int32_t> positions, owners;
  for (const Row& r : rows) {
    positions.push_back(r.pos);
    owners.push_back(r.owner);
  }
  // Nonzero integers (exact in fp16 and bf16); with cos = 1, sin = 0, K is written unchanged.
  std::vector<T> k(size_t(tokens) * hkv * dim), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = fromF<T>(static_cast<float>(int(i % 97) + 1));
    v[i] = fromF<T>(-static_cast<float>(int(i % 89) + 1));
  }
  std::vector<float> cosSin(size_t(tokens) * rotaryDim, 0.0f);
  for (int32_t r = 0; r < tokens; ++r) {
    for (int32_t j = 0; j < rotaryDim / 2; ++j) cosSin[r * rotaryDim + j] = 1.0f;
  }
  std::vector<T> pool = sentinelPool<T>(num_pages, hkv, dim);
  std::vector<T> want = pool;
  for (const Write& w : writes) {
    const std::vector<T>& src = w.plane == 0 ? k : v;
    for (int32_t h = 0; h < hkv; ++h) {
      for (int32_t d = 0; d < dim; ++d) {
        want[poolOffset<T>(w.page, w.slot, h, d, hkv, dim)] =
            src[(size_t(w.row) * hkv + h) * dim + d];
      }
    }
  }

  DFlashTargetKVCacheUpdateParams<T> p;
  p.kDelta = k.data();
  p.vDelta = v.data();
  p.kvCache = pool.data();
  p.tokenAlignedCosSin = cosSin.data();
  p.deltaPositions = positions.data();
  p.deltaTokenToSequence = owners.data();
  p.pageTable = table.data();
  p.numDeltaTokens = tokens;
  p.batchSize = batch;
  p.numKVHeads = hkv;
  p.headDim = dim;
  p.rotaryDim = rotaryDim;
  p.numPages = num_pages;
  p.maxPagesPerSeq = max_pages;
  ref::dflashTargetKVCacheUpdate(p);
  for (size_t i = 0; i < pool.size(); ++i) {
    ASSERT_EQ(pool[i].bits, want[i].bits)
        << "pool element " << i << " (flat page " << i / (size_t(kPage) * hkv * dim) << ")";
  }
}

TYPED_TEST(KvUpdateRef, ValidationNamesTheArgument) {
  using T = TypeParam;
  std::vector<T> k(64), v(64), pool(size_t{2} * kPage * 64);
  std::vector<float> cs(8);
  std::vector<int32_t> pos = {0}, own = {0}, table = {0, 1};
  auto make = [&] {
    DFlashTargetKVCacheUpdateParams<T> p;
    p.kDelta = k.data();
    p.vDelta = v.data();
    p.kvCache = pool.data();
    p.tokenAlignedCosSin = cs.data();
    p.deltaPositions = pos.data();
    p.deltaTokenToSequence = own.data();
    p.pageTable = table.data();
    p.numDeltaTokens = 1;
    p.batchSize = 1;
    p.numKVHeads = 1;
    p.headDim = 64;
    p.rotaryDim = 8;
    p.numPages = 1;
    p.maxPagesPerSeq = 1;
    return p;
  };
  auto expect = [&](auto mutate, const char* name) {
    auto p = make();
    mutate(p);
    test::expectInvalidArgument([&] { ref::dflashTargetKVCacheUpdate(p); }, name);
  };
  using P = DFlashTargetKVCacheUpdateParams<T>;
  expect([](P& p) { p.numDeltaTokens = -1; }, "numDeltaTokens");
  expect([](P& p) { p.batchSize = -2; }, "batchSize");
  expect([](P& p) { p.numKVHeads = 0; }, "numKVHeads");
  expect([](P& p) { p.headDim = 0; }, "headDim");
  expect([](P& p) { p.rotaryDim = 0; }, "rotaryDim");
  expect([](P& p) { p.rotaryDim = 7; }, "rotaryDim");
  expect([](P& p) { p.rotaryDim = 66; }, "rotaryDim");
  expect([](P& p) { p.numPages = 0; }, "numPages");
  expect([](P& p) { p.numPages = INT32_MAX / 2 + 1; }, "numPages");
  expect([](P& p) { p.maxPagesPerSeq = 0; }, "maxPagesPerSeq");
  expect([](P& p) { p.kDelta = nullptr; }, "kDelta");
  expect([](P& p) { p.vDelta = nullptr; }, "vDelta");
  expect([](P& p) { p.kvCache = nullptr; }, "kvCache");
  expect([](P& p) { p.tokenAlignedCosSin = nullptr; }, "tokenAlignedCosSin");
  expect([](P& p) { p.deltaPositions = nullptr; }, "deltaPositions");
  expect([](P& p) { p.deltaTokenToSequence = nullptr; }, "deltaTokenToSequence");
  expect([](P& p) { p.pageTable = nullptr; }, "pageTable");

  // The message names the launcher and the limit too.
  try {
    auto p = make();
    p.rotaryDim = 66;
    ref::dflashTargetKVCacheUpdate(p);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("launchDFlashTargetKVCacheUpdate"), std::string::npos) << what;
    EXPECT_NE(what.find("66"), std::string::npos) << what;
    EXPECT_NE(what.find("64"), std::string::npos) << what;
  }

  // A zero count is a no-op, even with null data pointers.
  const std::vector<T> before = pool;
  auto p = make();
  p.numDeltaTokens = 0;
  p.kDelta = nullptr;
  EXPECT_NO_THROW(ref::dflashTargetKVCacheUpdate(p));
  p = make();
  p.batchSize = 0;
  EXPECT_NO_THROW(ref::dflashTargetKVCacheUpdate(p));
  for (size_t i = 0; i < pool.size(); ++i) ASSERT_EQ(pool[i].bits, before[i].bits);
}

TEST(DFlashRopeCapacity, RejectsOnlyACacheLongerThanTheKvCapacity) {
  EXPECT_NO_THROW(kernel::checkDFlashRopeCapacity(4000, 4096));  // unpadded max: legal
  EXPECT_NO_THROW(kernel::checkDFlashRopeCapacity(4096, 4096));
  EXPECT_THROW(kernel::checkDFlashRopeCapacity(4097, 4096), std::runtime_error);
  test::expectInvalidArgument([] { kernel::checkDFlashRopeCapacity(4224, 4096); }, "cosSinSeqLen");
}

}  // namespace
}  // namespace es
