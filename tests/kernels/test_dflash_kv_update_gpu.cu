// GPU parity of launchDFlashTargetKVCacheUpdate against the CPU reference over random shapes
// (B up to 64, Hkv 1/2/3/4/8, D 64/128/256, rotaryDim = D, < D, and a non-multiple of 16 that
// takes the scalar path), fp16 and bf16. Both start from the same random pool; the whole pool is
// compared afterwards (so untouched regions are checked too): V and pass-through K bit-exact,
// rotated K within one rounding (1 ulp) of the cache type.
// Besides the public launcher, every case also runs the kernels of dflash_kv_update_kernel.cuh
// directly on the same inputs: the pair kernel with 1 and 2 tokens per thread (the launcher uses
// 1), with and without streaming hints, and the scalar fallback (forced even where the 16-byte
// path applies).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dflash_kv_update.h"
#include "kernels/dflash_kv_update_kernel.cuh"
#include "kv/page_geometry.h"
#include "support/gpu_test_util.h"

namespace es {
namespace {

constexpr int32_t kPage = kv::kTokensPerPage;

struct Shape {
  int32_t batch, hkv, dim, rotary, max_pages, width;
};

template <typename T>
T cast(float v) {
  if constexpr (std::is_same_v<T, fp16>) {
    return to_fp16(v);
  } else {
    return to_bf16(v);
  }
}

// Distance in ulps between two finite values of a 16-bit float type (sign-magnitude bits).
int ulpDistance(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t x) { return (x & 0x8000u) ? -int(x & 0x7fffu) : int(x & 0x7fffu); };
  return std::abs(ordered(a) - ordered(b));
}

template <typename T>
void runCase(const Shape& s, std::mt19937& rng, bool misaligned) {
  SCOPED_TRACE(::testing::Message()
               << "B " << s.batch << " Hkv " << s.hkv << " D " << s.dim << " rot " << s.rotary
               << " W " << s.width << (misaligned ? " misaligned" : ""));
  const int32_t num_pages = s.batch * s.max_pages + 3;  // spare pages nobody maps
  const int32_t tokens = s.batch * s.width;
  const int64_t row = int64_t{s.hkv} * s.dim;
  std::uniform_int_distribution<int> coin(0, 99);

  // Scrambled K ids and an independent scrambled V permutation; some entries unmapped (-1) or
  // out of their plane. Distinct ids per entry, so no two tokens share a destination.
  std::vector<int32_t> kIds(num_pages), vIds(num_pages);
  for (int32_t i = 0; i < num_pages; ++i) kIds[i] = vIds[i] = i;
  std::shuffle(kIds.begin(), kIds.end(), rng);
  std::shuffle(vIds.begin(), vIds.end(), rng);
  std::vector<int32_t> table(size_t(s.batch) * 2 * s.max_pages);
  for (int32_t b = 0; b < s.batch; ++b) {
    for (int32_t lp = 0; lp < s.max_pages; ++lp) {
      const int32_t e = b * s.max_pages + lp;
      int32_t k = kIds[e], v = vIds[e] + num_pages;
      const int roll = b == 0 ? 99 : coin(rng);  // sequence 0 stays fully mapped
      if (roll < 5)
        k = -1;
      else if (roll < 8)
        k = num_pages + k;  // past the K plane
      else if (roll < 11)
        v = -1;
      else if (roll < 14)
        v = v - num_pages;  // a K-plane id in the V row
      else if (roll < 16)
        v = 2 * num_pages + (v & 7);  // past the V plane
      table[size_t(b) * 2 * s.max_pages + lp] = k;
      table[size_t(b) * 2 * s.max_pages + s.max_pages + lp] = v;
    }
  }

  // Token-major rows b * W + t; starts chosen to cross 127/128/129, reach the last page and run
  // past capacity; padding rows (-1) and owners == B.
  std::vector<int32_t> positions(tokens), owners(tokens);
  const int32_t capacity = s.max_pages * kPage;
  for (int32_t b = 0; b < s.batch; ++b) {
    // Sequence 0 has at least one live row, so every case writes something.
    const int32_t len = std::uniform_int_distribution<int32_t>(b == 0 ? 1 : 0, s.width)(rng);
    int32_t start;
    switch (b % 4) {
      case 0:
        start = 126;
        break;
      case 1:
        start = capacity - 2;
        break;
      default:
        start = std::uniform_int_distribution<int32_t>(0, capacity - 1)(rng);
    }
    for (int32_t t = 0; t < s.width; ++t) {
      const int32_t r = b * s.width + t;
      const bool live = t < len;
      positions[r] = live ? start + t : -1;
      owners[r] = live ? b : -1;
      if (live && r > 0 && coin(rng) < 3) owners[r] = s.batch;  // invalid owner
      if (live && r > 0 && coin(rng) < 3) owners[r] = -1;       // padding owner, valid position
    }
  }

  std::uniform_real_distribution<float> val(-2.0f, 2.0f);
  std::vector<T> k(size_t(tokens) * row), v(k.size());
  for (auto& x : k) x = cast<T>(val(rng));
  for (auto& x : v) x = cast<T>(val(rng));
  std::vector<float> cosSin(size_t(tokens) * s.rotary);
  for (int32_t r = 0; r < tokens; ++r) {
    for (int32_t j = 0; j < s.rotary / 2; ++j) {
      const float angle = std::uniform_real_distribution<float>(0.0f, 6.3f)(rng);
      cosSin[size_t(r) * s.rotary + j] = std::cos(angle);
      cosSin[size_t(r) * s.rotary + s.rotary / 2 + j] = std::sin(angle);
    }
  }
  std::vector<T> pool(size_t(2) * num_pages * kPage * row);
  uint32_t state = static_cast<uint32_t>(rng());
  for (auto& x : pool) {  // xorshift: the pools reach 100 MB, mt19937 per element is slow
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    x.bits = static_cast<uint16_t>(state >> 8);
  }

  // Reference.
  std::vector<T> want = pool;
  kernel::DFlashTargetKVCacheUpdateParams<T> p;
  p.kDelta = k.data();
  p.vDelta = v.data();
  p.kvCache = want.data();
  p.tokenAlignedCosSin = cosSin.data();
  p.deltaPositions = positions.data();
  p.deltaTokenToSequence = owners.data();
  p.pageTable = table.data();
  p.numDeltaTokens = tokens;
  p.batchSize = s.batch;
  p.numKVHeads = s.hkv;
  p.headDim = s.dim;
  p.rotaryDim = s.rotary;
  p.numPages = num_pages;
  p.maxPagesPerSeq = s.max_pages;
  ref::dflashTargetKVCacheUpdate(p);

  int64_t written = 0;
  for (size_t i = 0; i < pool.size(); ++i) written += want[i].bits != pool[i].bits;
  EXPECT_GT(written, 0) << "the case wrote nothing: it would not test the kernel";

  // Device: a misaligned K base (one element in) forces the scalar path.
  const size_t kShift = misaligned ? 1 : 0;
  std::vector<T> kHost(k.size() + kShift);
  std::copy(k.begin(), k.end(), kHost.begin() + kShift);
  test::DeviceArray<T> dK(kHost), dV(v);
  test::DeviceArray<float> dCs(cosSin);
  test::DeviceArray<int32_t> dPos(positions), dOwn(owners), dTable(table);
  auto q = p;
  q.kDelta = dK.get() + kShift;
  q.vDelta = dV.get();
  q.tokenAlignedCosSin = dCs.get();
  q.deltaPositions = dPos.get();
  q.deltaTokenToSequence = dOwn.get();
  q.pageTable = dTable.get();
  namespace ku = kernel::kvupdate;
  const bool pair = ku::pairPathApplies(q);
  enum class Path { kLauncher, kPair1, kPair2, kPair2Plain, kPair1Plain, kScalar };
  const char* names[] = {"launcher",        "pair tok1",       "pair tok2",
                         "pair tok2 plain", "pair tok1 plain", "scalar"};
  for (const Path path : {Path::kLauncher, Path::kPair1, Path::kPair2, Path::kPair2Plain,
                          Path::kPair1Plain, Path::kScalar}) {
    if (path != Path::kLauncher && path != Path::kScalar && !pair) continue;
    SCOPED_TRACE(names[int(path)]);
    test::DeviceArray<T> dPool(pool);
    q.kvCache = dPool.get();
    switch (path) {
      case Path::kLauncher:
        kernel::launchDFlashTargetKVCacheUpdate(q, nullptr);
        break;
      case Path::kPair1:
        ku::launchPair<1, true>(q, nullptr);
        break;
      case Path::kPair2:
        ku::launchPair<2, true>(q, nullptr);
        break;
      case Path::kPair2Plain:
        ku::launchPair<2, false>(q, nullptr);
        break;
      case Path::kPair1Plain:
        ku::launchPair<1, false>(q, nullptr);
        break;
      case Path::kScalar:
        ku::launchScalar(q, nullptr);
        break;
    }
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<T> got = dPool.download();

    const size_t plane = size_t(num_pages) * kPage * row;
    int failures = 0;
    for (size_t i = 0; i < got.size() && failures < 10; ++i) {
      if (got[i].bits == want[i].bits) continue;
      const int32_t d = static_cast<int32_t>(i % s.dim);
      const bool rotatedK = i < plane && d < s.rotary && want[i].bits != pool[i].bits;
      if (rotatedK && ulpDistance(got[i].bits, want[i].bits) <= 1) continue;
      ++failures;
      ADD_FAILURE() << "pool element " << i << " (" << (i < plane ? "K" : "V") << " flat page "
                    << i / (size_t(kPage) * row) << ", dim " << d << "): got 0x" << std::hex
                    << got[i].bits << " want 0x" << want[i].bits << " before 0x" << pool[i].bits;
    }
  }
}

template <typename T>
class KvUpdateGpu : public ::testing::Test {};
using CacheTypes = ::testing::Types<fp16, bf16>;
TYPED_TEST_SUITE(KvUpdateGpu, CacheTypes);

TYPED_TEST(KvUpdateGpu, MatchesReferenceOverRandomShapes) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(20240601u + sizeof(TypeParam) + std::is_same_v<TypeParam, bf16>);
  int index = 0;
  for (const int32_t hkv : {1, 2, 3, 4, 8}) {
    for (const int32_t dim : {64, 128, 256}) {
      for (const int32_t rotary : {dim, dim / 2, 24}) {
        // Keep the pool modest for the widest rows; B = 64 appears in the dedicated case below.
        const int32_t maxB = hkv * dim >= 1024 ? 16 : 64;
        const Shape s{std::uniform_int_distribution<int32_t>(1, maxB)(rng),
                      hkv,
                      dim,
                      rotary,
                      std::uniform_int_distribution<int32_t>(2, 4)(rng),
                      std::uniform_int_distribution<int32_t>(1, 40)(rng)};
        runCase<TypeParam>(s, rng, index % 7 == 3);
        ++index;
      }
    }
  }
}

TYPED_TEST(KvUpdateGpu, DecodeShapeBatch64) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(7u);
  runCase<TypeParam>(Shape{64, 8, 128, 128, 3, 16}, rng, false);
  runCase<TypeParam>(Shape{64, 2, 64, 32, 2, 16}, rng, false);
}

// Edge cases of the pair kernel: rotaryDim = 16 (one pair, many pass-through chunks), rotaryDim/2
// = 24 (pairs at 0, 8, 16; pass-through starts mid-row), rotaryDim = 40 (half 20, scalar),
// odd T (a half-filled last group with 2 tokens per thread), Hkv 16 with 28 units per head (448
// units per token > 256 threads: the CTA loops over one token), Hkv 5 (units not dividing 256).
TYPED_TEST(KvUpdateGpu, PairKernelEdgeCases) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(99u + std::is_same_v<TypeParam, bf16>);
  runCase<TypeParam>(Shape{3, 4, 128, 16, 2, 7}, rng, false);    // T = 21
  runCase<TypeParam>(Shape{5, 2, 64, 48, 3, 9}, rng, false);     // T = 45
  runCase<TypeParam>(Shape{2, 8, 256, 48, 2, 13}, rng, false);   // T = 26
  runCase<TypeParam>(Shape{3, 2, 128, 40, 2, 5}, rng, false);    // scalar: half = 20
  runCase<TypeParam>(Shape{3, 16, 256, 64, 2, 11}, rng, false);  // 448 units per token
  runCase<TypeParam>(Shape{7, 5, 128, 128, 2, 3}, rng, false);   // T = 21, Hkv 5
  runCase<TypeParam>(Shape{1, 8, 128, 128, 2, 1}, rng, false);   // T = 1
}

TEST(KvUpdateGpuValidation, RejectsBeforeLaunchAndZeroIsANoOp) {
  ES_SKIP_IF_NO_GPU();
  test::DeviceArray<fp16> pool(size_t(2) * kPage * 64);
  test::DeviceArray<int32_t> ints(4);
  test::DeviceArray<float> cs(64);
  auto params = [&](int32_t tokens, int32_t rotaryDim) {
    return kernel::DFlashKvUpdateParamsF16{.kDelta = pool.get(),
                                           .vDelta = pool.get(),
                                           .kvCache = pool.get(),
                                           .tokenAlignedCosSin = cs.get(),
                                           .deltaPositions = ints.get(),
                                           .deltaTokenToSequence = ints.get(),
                                           .pageTable = ints.get(),
                                           .numDeltaTokens = tokens,
                                           .batchSize = 1,
                                           .numKVHeads = 1,
                                           .headDim = 64,
                                           .rotaryDim = rotaryDim,
                                           .numPages = 1,
                                           .maxPagesPerSeq = 1};
  };
  kernel::DFlashKvUpdateParamsF16 noK = params(1, 64);
  noK.kDelta = nullptr;
  EXPECT_THROW(kernel::launchDFlashTargetKVCacheUpdate(noK, nullptr), InvalidArgument);
  EXPECT_THROW(kernel::launchDFlashTargetKVCacheUpdate(params(1, 65), nullptr), InvalidArgument);
  const std::vector<fp16> before = pool.download();
  kernel::launchDFlashTargetKVCacheUpdate(params(0, 64), nullptr);
  const std::vector<fp16> after = pool.download();
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(fp16)), 0);
}

}  // namespace
}  // namespace es
