// GPU parity of launchQkvRopeKvWrite with the CPU reference over random shapes: head dims
// 64/128/256, GQA groups 1/2/3/4/8, rotaryDim = D and D/2, q/k norms on and off, f32/f16/bf16,
// scrambled page tables with unmapped and out-of-plane entries, positions across 127/128/129,
// padding rows of every kind. Both start from the same random pool; afterwards every pool
// element the reference left unchanged must be bit-identical on the GPU (untouched regions and
// skipped planes), V rows bit-exact, rotated K and q within the tolerance table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/qkv_rope_kv_write.h"
#include "kv/page_geometry.h"

namespace es {
namespace {

using namespace fwdtest;
constexpr int32_t kPage = kv::kTokensPerPage;

struct Shape {
  int32_t batch, hq, hkv, dim, rotary, max_pages, tokens;
  bool q_norm, k_norm;
};

template <typename T>
void run(const Shape& s, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message()
               << "B " << s.batch << " Hq " << s.hq << " Hkv " << s.hkv << " D " << s.dim << " rot "
               << s.rotary << " T " << s.tokens << " qn " << s.q_norm << " kn " << s.k_norm << " "
               << dtype_name(dtype_of<T>));
  const int32_t num_pages = s.batch * s.max_pages + 2;
  const int32_t maxPos = s.max_pages * kPage;
  std::uniform_int_distribution<int> coin(0, 99);
  std::vector<int32_t> kIds(num_pages), vIds(num_pages);
  std::iota(kIds.begin(), kIds.end(), 0);
  std::iota(vIds.begin(), vIds.end(), 0);
  std::shuffle(kIds.begin(), kIds.end(), rng);
  std::shuffle(vIds.begin(), vIds.end(), rng);
  std::vector<int32_t> table(size_t(s.batch) * 2 * s.max_pages);
  for (int32_t b = 0; b < s.batch; ++b) {
    for (int32_t lp = 0; lp < s.max_pages; ++lp) {
      const size_t e = size_t(b) * s.max_pages + lp;
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
      table[size_t(b) * 2 * s.max_pages + lp] = k;
      table[size_t(b) * 2 * s.max_pages + s.max_pages + lp] = v;
    }
  }
  // Distinct (sequence, position) per live token so no two tokens share a destination.
  std::vector<int32_t> positions(s.tokens), owners(s.tokens);
  const int32_t starts[] = {126, 127, 128, 0, maxPos - 3};
  for (int32_t t = 0; t < s.tokens; ++t) {
    const int32_t b = t % s.batch;
    const int32_t i = t / s.batch;
    positions[t] = std::min(starts[b % 5] + i, maxPos - 1 - (i % 2));
    owners[t] = b;
    const int roll = t == 0 ? 99 : coin(rng);  // token 0 is live, so every case writes
    if (roll < 4)
      positions[t] = -1;
    else if (roll < 7)
      owners[t] = -1;
    else if (roll < 9)
      owners[t] = s.batch;
    else if (roll < 11)
      positions[t] = maxPos;  // >= maxPositions: padding
  }
  // Drop duplicates of (owner, position) that the min() above can create.
  for (int32_t t = 0; t < s.tokens; ++t) {
    for (int32_t u = 0; u < t; ++u) {
      if (owners[u] == owners[t] && positions[u] == positions[t]) positions[t] = -1;
    }
  }
  const int32_t row = (s.hq + 2 * s.hkv) * s.dim;
  std::vector<T> qkv(size_t(s.tokens) * row), qw(s.dim), kw(s.dim);
  fill(qkv, rng, -2.0f, 2.0f);
  fill(qw, rng, 0.5f, 1.5f);
  fill(kw, rng, 0.5f, 1.5f);
  std::vector<float> cosSin(size_t(maxPos) * s.rotary);
  for (int32_t p = 0; p < maxPos; ++p) {
    for (int32_t i = 0; i < s.rotary / 2; ++i) {
      const double a = p * std::pow(1e6, -2.0 * i / s.rotary);
      cosSin[size_t(p) * s.rotary + i] = float(std::cos(a));
      cosSin[size_t(p) * s.rotary + s.rotary / 2 + i] = float(std::sin(a));
    }
  }
  std::vector<T> pool(size_t(2) * num_pages * kPage * s.hkv * s.dim);
  fill(pool, rng, -5.0f, 5.0f);
  std::vector<T> wantPool = pool, wantQ(size_t(s.tokens) * s.hq * s.dim);

  kernel::QkvRopeKvWriteParams p{.qkv = qkv.data(),
                                 .qNormWeight = s.q_norm ? qw.data() : nullptr,
                                 .kNormWeight = s.k_norm ? kw.data() : nullptr,
                                 .normEps = 1e-6f,
                                 .cosSin = cosSin.data(),
                                 .maxPositions = maxPos,
                                 .positions = positions.data(),
                                 .tokenToSequence = owners.data(),
                                 .pageTable = table.data(),
                                 .kvPool = wantPool.data(),
                                 .qOut = wantQ.data(),
                                 .numTokens = s.tokens,
                                 .batchSize = s.batch,
                                 .numQHeads = s.hq,
                                 .numKVHeads = s.hkv,
                                 .headDim = s.dim,
                                 .rotaryDim = s.rotary,
                                 .numPages = num_pages,
                                 .maxPagesPerSeq = s.max_pages,
                                 .dtype = dtype_of<T>};
  ref::qkvRopeKvWrite(p);
  // Which pool elements the reference writes: changed from the random pool, or from a poisoned
  // one (a written value that happens to equal the initial one still counts as written).
  std::vector<T> probe(pool.size()), probe0;
  std::memset(probe.data(), test::kPoisonByte, probe.size() * sizeof(T));
  probe0 = probe;
  std::vector<T> probeQ(wantQ.size());
  p.kvPool = probe.data();
  p.qOut = probeQ.data();
  ref::qkvRopeKvWrite(p);

  test::DeviceArray<T> dQkv(qkv), dQw(qw), dKw(kw), dPool(pool), dQ(wantQ.size());
  test::DeviceArray<float> dCs(cosSin);
  test::DeviceArray<int32_t> dPos(positions), dOwn(owners), dTable(table);
  p.qkv = dQkv.get();
  p.qNormWeight = s.q_norm ? dQw.get() : nullptr;
  p.kNormWeight = s.k_norm ? dKw.get() : nullptr;
  p.cosSin = dCs.get();
  p.positions = dPos.get();
  p.tokenToSequence = dOwn.get();
  p.pageTable = dTable.get();
  p.kvPool = dPool.get();
  p.qOut = dQ.get();
  kernel::launchQkvRopeKvWrite(p, nullptr);
  const std::vector<T> gotPool = dPool.download();
  expect_close(dQ.download(), wantQ, tol_for<T>(), "qOut");

  // Pool: unchanged-by-reference elements bit-identical, written ones within tolerance.
  const Tol tol = tol_for<T>();
  size_t bad = 0, written = 0;
  for (size_t i = 0; i < pool.size(); ++i) {
    const bool refWrote = !same_bits(wantPool[i], pool[i]) || !same_bits(probe[i], probe0[i]);
    written += refWrote;
    bool ok;
    if (!refWrote) {
      ok = same_bits(gotPool[i], pool[i]);
    } else {
      const double g = to_d(gotPool[i]), w = to_d(wantPool[i]);
      ok = std::abs(g - w) <= tol.rel * std::abs(w) + tol.abs;
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << "pool[" << i << "] got " << to_d(gotPool[i]) << " want " << to_d(wantPool[i])
                    << " initial " << to_d(pool[i]);
    }
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(written, 0u) << "the case wrote nothing; it tests nothing";
}

TEST(QkvRopeKvWriteGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(17);
  const Shape shapes[] = {
      {2, 9, 3, 64, 64, 3, 40, false, false},   // SmolLM2-135M heads
      {3, 16, 8, 128, 128, 2, 90, true, true},  // Qwen3-style q/k norm
      {1, 8, 1, 128, 64, 3, 300, false, true},  // group 8, partial rotary
      {4, 4, 4, 256, 256, 2, 64, true, false},  // group 1, D 256
      {2, 8, 4, 256, 128, 2, 20, true, true},   // group 2
      {5, 12, 3, 64, 32, 2, 33, false, false},  // group 4
      {1, 14, 2, 64, 64, 1, 1, true, true},     // decode, group 7
  };
  for (const Shape& s : shapes) {
    run<float>(s, rng);
    run<bf16>(s, rng);
    run<fp16>(s, rng);
  }
}

}  // namespace
}  // namespace es
