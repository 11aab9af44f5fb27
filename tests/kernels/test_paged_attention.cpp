// CPU checks of the paged-attention reference: 1-3 keys by hand, causal prefill/decode, packed
// tree masks with more than one 32-bit word, bidirectional DFlash proposal blocks, sliding
// windows (including unmapped pages that fell out of the window), GQA group sizes 1/2/3/4/8,
// padding rows, scrambled page tables across the 127/128/129 boundary, bf16 storage, validation
// (including the split-KV fields), and the split-KV plan (split counts, row tiles, fallbacks,
// forced counts, the start-up workspace bound). The oracle below recomputes every output in double
// from explicit visible-key lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/paged_attention.h"
#include "kernels/paged_attention_prefill.h"
#include "kv/page_geometry.h"
#include "support/test_util.h"

namespace es {
namespace {

using kernel::AttentionMask;
constexpr int32_t kPage = kv::kTokensPerPage;

float roundTo(DType t, float v) {
  if (t == DType::kBF16) return to_float(to_bf16(v));
  if (t == DType::kF16) return to_float(to_fp16(v));
  return v;
}

// Everything one launch needs, held as float values already representable in `dtype`.
struct Attn {
  DType dtype = DType::kF32;
  int32_t hq = 1, hkv = 1, dim = 64;
  AttentionMask mask = AttentionMask::kCausal;
  int32_t window = 0;
  float scale = 0.125f;
  int32_t numPages = 1, maxPages = 1;
  std::vector<int32_t> qLens, kvLens;  // per sequence
  std::vector<int32_t> positions;      // per row
  std::vector<int32_t> table;          // [B, 2, maxPages]
  std::vector<int32_t> packed;         // [totalQ, words]
  int32_t maxQ = 0;
  std::vector<float> q;     // [totalQ, hq, dim]
  std::vector<float> pool;  // [2 * numPages, 128, hkv, dim]

  int32_t batch() const { return int32_t(qLens.size()); }
  int32_t totalQ() const { return std::accumulate(qLens.begin(), qLens.end(), 0); }
  int32_t words() const { return (maxQ + 31) / 32; }
  size_t poolIndex(int32_t flatPage, int32_t slot, int32_t h, int32_t d) const {
    return ((size_t(flatPage) * kPage + slot) * hkv + h) * dim + d;
  }
  float* kAt(int32_t b, int32_t j, int32_t h) {
    return &pool[poolIndex(table[size_t(b) * 2 * maxPages + j / kPage], j % kPage, h, 0)];
  }
  float* vAt(int32_t b, int32_t j, int32_t h) {
    return &pool[poolIndex(table[size_t(b) * 2 * maxPages + maxPages + j / kPage], j % kPage, h,
                           0)];
  }
  float* qAt(int32_t r, int32_t h) { return &q[(size_t(r) * hq + h) * dim]; }
};

// Fills the pool and q with random values and the table with scrambled, independently permuted
// K and V pages (every logical page mapped).
void randomize(Attn& s, std::mt19937& rng) {
  s.numPages = s.batch() * s.maxPages + 2;
  std::vector<int32_t> kIds(s.numPages), vIds(s.numPages);
  std::iota(kIds.begin(), kIds.end(), 0);
  std::iota(vIds.begin(), vIds.end(), 0);
  std::shuffle(kIds.begin(), kIds.end(), rng);
  std::shuffle(vIds.begin(), vIds.end(), rng);
  s.table.assign(size_t(s.batch()) * 2 * s.maxPages, -1);
  for (int32_t b = 0; b < s.batch(); ++b) {
    for (int32_t lp = 0; lp < s.maxPages; ++lp) {
      s.table[size_t(b) * 2 * s.maxPages + lp] = kIds[size_t(b) * s.maxPages + lp];
      s.table[size_t(b) * 2 * s.maxPages + s.maxPages + lp] =
          vIds[size_t(b) * s.maxPages + lp] + s.numPages;
    }
  }
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  s.pool.resize(size_t(2) * s.numPages * kPage * s.hkv * s.dim);
  for (auto& v : s.pool) v = roundTo(s.dtype, dist(rng));
  s.q.resize(size_t(s.totalQ()) * s.hq * s.dim);
  for (auto& v : s.q) v = roundTo(s.dtype, 2.0f * dist(rng));
}

template <typename T>
std::vector<T> toStorage(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>)
      out[i] = v[i];
    else if constexpr (std::is_same_v<T, bf16>)
      out[i] = to_bf16(v[i]);
    else
      out[i] = to_fp16(v[i]);
  }
  return out;
}

template <typename T>
std::vector<double> runRefTyped(const Attn& s) {
  const std::vector<T> q = toStorage<T>(s.q), pool = toStorage<T>(s.pool);
  std::vector<T> out(q.size());
  std::memset(out.data(), test::kPoisonByte, out.size() * sizeof(T));
  std::vector<int32_t> cu(size_t(s.batch()) + 1, 0);
  for (int32_t b = 0; b < s.batch(); ++b) cu[b + 1] = cu[b] + s.qLens[b];
  kernel::PagedAttentionParams p;
  p.query.q = q.data();
  p.query.out = out.data();
  p.query.cuQSeqLens = cu.data();
  p.query.qPositions = s.positions.data();
  p.query.totalQ = s.totalQ();
  p.query.maxQSeqLen = s.maxQ;
  p.query.numQHeads = s.hq;
  p.kv.pool = pool.data();
  p.kv.pageTable = s.table.data();
  p.kv.numPages = s.numPages;
  p.kv.maxPagesPerSeq = s.maxPages;
  p.kv.numKVHeads = s.hkv;
  p.kvLengths = s.kvLens.data();
  p.mask = s.mask;
  p.packedMask = s.packed.empty() ? nullptr : s.packed.data();
  p.slidingWindow = s.window;
  p.batchSize = s.batch();
  p.headDim = s.dim;
  p.scale = s.scale;
  p.dtype = s.dtype;
  ref::pagedAttention(p);
  std::vector<double> res(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if constexpr (std::is_same_v<T, float>)
      res[i] = out[i];
    else
      res[i] = to_float(out[i]);
  }
  return res;
}

std::vector<double> runRef(const Attn& s) {
  if (s.dtype == DType::kBF16) return runRefTyped<bf16>(s);
  if (s.dtype == DType::kF16) return runRefTyped<fp16>(s);
  return runRefTyped<float>(s);
}

// Softmax attention of row r, head h over an explicit key list, in double.
std::vector<double> oracle(Attn& s, int32_t b, int32_t r, int32_t h,
                           const std::vector<int32_t>& keys) {
  const int32_t hk = h / (s.hq / s.hkv);
  std::vector<double> out(s.dim, 0.0);
  if (keys.empty()) return out;
  std::vector<double> sc;
  for (int32_t j : keys) {
    double d = 0;
    for (int32_t i = 0; i < s.dim; ++i) d += double(s.qAt(r, h)[i]) * s.kAt(b, j, hk)[i];
    sc.push_back(d * s.scale);
  }
  const double mx = *std::max_element(sc.begin(), sc.end());
  double den = 0;
  for (size_t n = 0; n < keys.size(); ++n) {
    const double w = std::exp(sc[n] - mx);
    den += w;
    for (int32_t i = 0; i < s.dim; ++i) out[i] += w * s.vAt(b, keys[n], hk)[i];
  }
  for (auto& v : out) v /= den;
  return out;
}

// The contract's visibility rule, written out independently of the reference.
std::vector<int32_t> visibleKeys(const Attn& s, int32_t b, int32_t r) {
  int32_t row0 = 0;
  for (int32_t i = 0; i < b; ++i) row0 += s.qLens[i];
  const int32_t pos = s.positions[r];
  const int32_t past = s.kvLens[b] - s.qLens[b];
  std::vector<int32_t> keys;
  if (pos < 0) return keys;
  for (int32_t j = 0; j < s.kvLens[b]; ++j) {
    bool ok = true;
    if (s.mask == AttentionMask::kCausal) ok = j <= pos;
    if (s.mask == AttentionMask::kPackedTree && j >= past) {
      const int32_t c = j - past;
      ok = (s.packed[size_t(r) * s.words() + c / 32] >> (c % 32)) & 1;
    }
    if (s.window > 0 && j <= pos - s.window) ok = false;
    const int32_t lp = j / kPage;
    if (ok && (s.table[size_t(b) * 2 * s.maxPages + lp] < 0 ||
               s.table[size_t(b) * 2 * s.maxPages + s.maxPages + lp] < s.numPages)) {
      ok = false;  // unmapped page
    }
    if (ok) keys.push_back(j);
  }
  return keys;
}

void expectMatchesOracle(Attn& s, const std::vector<double>& got, double rel, double absTol) {
  int32_t row = 0;
  for (int32_t b = 0; b < s.batch(); ++b) {
    for (int32_t i = 0; i < s.qLens[b]; ++i, ++row) {
      const auto keys = visibleKeys(s, b, row);
      for (int32_t h = 0; h < s.hq; ++h) {
        const auto want = oracle(s, b, row, h, keys);
        for (int32_t d = 0; d < s.dim; ++d) {
          const double g = got[(size_t(row) * s.hq + h) * s.dim + d];
          ASSERT_NEAR(g, want[d], rel * std::abs(want[d]) + absTol)
              << "seq " << b << " row " << row << " head " << h << " dim " << d << " keys "
              << keys.size();
        }
      }
    }
  }
}

// One sequence, one row at position 0, one key: the output is v exactly.
TEST(PagedAttentionRef, OneKeyGivesV) {
  std::mt19937 rng(1);
  Attn s;
  s.qLens = {1};
  s.kvLens = {1};
  s.positions = {0};
  s.maxQ = 1;
  randomize(s, rng);
  const auto out = runRef(s);
  for (int32_t d = 0; d < s.dim; ++d) EXPECT_EQ(out[d], s.vAt(0, 0, 0)[d]) << d;
}

// Two keys with scores 0 and 1 (scale 1, q = e0, k0 = 0, k1 = e0): weights 1/(1+e), e/(1+e);
// v0 = 1, v1 = 5 everywhere -> out = 1 + 4e/(1+e) = 3.92423...
TEST(PagedAttentionRef, TwoKeysByHand) {
  std::mt19937 rng(2);
  Attn s;
  s.qLens = {1};
  s.kvLens = {2};
  s.positions = {1};
  s.maxQ = 1;
  s.scale = 1.0f;
  randomize(s, rng);
  std::fill(s.q.begin(), s.q.end(), 0.0f);
  s.q[0] = 1.0f;
  for (int32_t d = 0; d < s.dim; ++d) {
    s.kAt(0, 0, 0)[d] = 0.0f;
    s.kAt(0, 1, 0)[d] = d == 0 ? 1.0f : 0.0f;
    s.vAt(0, 0, 0)[d] = 1.0f;
    s.vAt(0, 1, 0)[d] = 5.0f;
  }
  const auto out = runRef(s);
  const double e = std::exp(1.0);
  for (int32_t d = 0; d < s.dim; ++d) EXPECT_NEAR(out[d], 1.0 + 4.0 * e / (1.0 + e), 1e-6);
  EXPECT_NEAR(out[0], 3.9242343145200195, 1e-6);
}

// Three keys, causal prefill rows at 0, 1, 2 (and a decode row at 2 in a second sequence over
// the same keys): row i sees keys [0, i].
TEST(PagedAttentionRef, ThreeKeysCausalPrefillAndDecode) {
  std::mt19937 rng(3);
  Attn s;
  s.qLens = {3, 1};
  s.kvLens = {3, 3};
  s.positions = {0, 1, 2, 2};
  s.maxQ = 3;
  randomize(s, rng);
  // Same K/V and the same last query for the decode sequence.
  for (int32_t j = 0; j < 3; ++j) {
    std::copy_n(s.kAt(0, j, 0), s.dim, s.kAt(1, j, 0));
    std::copy_n(s.vAt(0, j, 0), s.dim, s.vAt(1, j, 0));
  }
  std::copy_n(s.qAt(2, 0), s.dim, s.qAt(3, 0));
  const auto out = runRef(s);
  const std::vector<std::vector<int32_t>> keys = {{0}, {0, 1}, {0, 1, 2}};
  for (int32_t r = 0; r < 3; ++r) {
    const auto want = oracle(s, 0, r, 0, keys[r]);
    for (int32_t d = 0; d < s.dim; ++d) EXPECT_NEAR(out[size_t(r) * s.dim + d], want[d], 1e-6);
  }
  for (int32_t d = 0; d < s.dim; ++d) {
    EXPECT_EQ(out[size_t(3) * s.dim + d], out[size_t(2) * s.dim + d]) << "decode == prefill row 2";
    EXPECT_EQ(out[d], s.vAt(0, 0, 0)[d]) << "row 0 sees only key 0";
  }
}

// Packed tree over 40 query rows (2 mask words) after 5 cached tokens, explicit key lists: row i
// attends to the cache, itself and its "parent chain" i-2, i-4, ...; row 35 only itself (a bit in
// word 1); a second sequence without cache whose row 1 has no bits at all (zeros out).
TEST(PagedAttentionRef, PackedTreeTwoWords) {
  std::mt19937 rng(4);
  Attn s;
  s.mask = AttentionMask::kPackedTree;
  s.qLens = {40, 2};
  s.kvLens = {45, 2};
  s.maxQ = 40;
  for (int32_t i = 0; i < 40; ++i) s.positions.push_back(5 + i / 2);  // tree depth positions
  s.positions.push_back(0);
  s.positions.push_back(1);
  randomize(s, rng);
  s.packed.assign(size_t(42) * 2, 0);
  std::vector<std::vector<int32_t>> keys(42);
  for (int32_t i = 0; i < 40; ++i) {
    for (int32_t j = 0; j < 5; ++j) keys[i].push_back(j);
    for (int32_t a = i % 2; a <= i; a += 2) {
      if (i == 35 && a != 35) continue;
      s.packed[size_t(i) * 2 + a / 32] |= int32_t(1u << (a % 32));
      keys[i].push_back(5 + a);
    }
  }
  s.packed[size_t(40) * 2] = 1;  // second sequence row 0 sees key 0; row 1 sees nothing
  keys[40] = {0};
  const auto out = runRef(s);
  for (int32_t r = 0; r < 42; ++r) {
    const auto want = oracle(s, r < 40 ? 0 : 1, r, 0, keys[r]);
    for (int32_t d = 0; d < s.dim; ++d) {
      ASSERT_NEAR(out[size_t(r) * s.dim + d], want[d], 1e-6) << "row " << r << " dim " << d;
    }
  }
  for (int32_t d = 0; d < s.dim; ++d) EXPECT_EQ(out[size_t(41) * s.dim + d], 0.0);
  EXPECT_EQ(keys[35].size(), 6u);
  expectMatchesOracle(s, out, 1e-6, 1e-7);
}

// DFlash proposal: 4 block rows after 130 cached tokens (crossing page 0/1) all attend to all 134
// keys regardless of their positions; with a window of 3 the rows see (p - 3, ...] of all keys,
// including later block rows.
TEST(PagedAttentionRef, BidirectionalBlockAndWindow) {
  std::mt19937 rng(5);
  Attn s;
  s.mask = AttentionMask::kBidirectional;
  s.qLens = {4};
  s.kvLens = {134};
  s.positions = {130, 131, 132, 133};
  s.maxQ = 4;
  s.maxPages = 2;
  randomize(s, rng);
  std::vector<int32_t> all(134);
  std::iota(all.begin(), all.end(), 0);
  auto out = runRef(s);
  for (int32_t r = 0; r < 4; ++r) {
    const auto want = oracle(s, 0, r, 0, all);
    for (int32_t d = 0; d < s.dim; ++d) ASSERT_NEAR(out[size_t(r) * s.dim + d], want[d], 1e-6);
  }
  s.window = 3;
  out = runRef(s);
  const auto want = oracle(s, 0, 0, 0, {128, 129, 130, 131, 132, 133});
  for (int32_t d = 0; d < s.dim; ++d) ASSERT_NEAR(out[d], want[d], 1e-6);
  expectMatchesOracle(s, out, 1e-6, 1e-7);
}

// Causal decode with a sliding window of 4 at position 300: keys 297..300 only; logical pages 0
// and 1 were released (table entries -1) and must not be read.
TEST(PagedAttentionRef, SlidingWindowSkipsReleasedPages) {
  std::mt19937 rng(6);
  Attn s;
  s.qLens = {1};
  s.kvLens = {301};
  s.positions = {300};
  s.maxQ = 1;
  s.maxPages = 3;
  s.window = 4;
  randomize(s, rng);
  const auto want = oracle(s, 0, 0, 0, {297, 298, 299, 300});
  s.table[0] = s.table[1] = -1;
  s.table[3] = s.table[4] = -1;
  const auto out = runRef(s);
  for (int32_t d = 0; d < s.dim; ++d) ASSERT_NEAR(out[d], want[d], 1e-6);
}

// Long causal prefills, as the blocked reference cuts them (tiles of 32 keys and of 32 query rows):
// a 300-row prompt after 37 cached tokens (3 scrambled pages, tiles crossing page and row-tile
// edges) beside a 45-row prompt, GQA 3, head dims 64 and 128, without and with a sliding window
// of 100, one row of padding, f32 and bf16, against the double oracle over explicit key lists;
// and rows computed alone (decode calls) equal the same rows of the prefill bit for bit.
TEST(PagedAttentionRef, LongCausalPrefillMatchesOracleAndDecodeRows) {
  std::mt19937 rng(8);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int32_t dim : {64, 128}) {
      for (const int32_t window : {0, 100}) {
        Attn s;
        s.dtype = dtype;
        s.hkv = 2;
        s.hq = 6;
        s.dim = dim;
        s.window = window;
        s.scale = 1.0f / std::sqrt(float(dim));
        s.maxPages = 3;
        s.qLens = {300, 45};
        s.kvLens = {337, 45};
        for (int32_t i = 0; i < 300; ++i) s.positions.push_back(37 + i);
        for (int32_t i = 0; i < 45; ++i) s.positions.push_back(i == 44 ? -1 : i);
        s.maxQ = 300;
        randomize(s, rng);
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dtype) << " D " << dim << " window " << window);
        const auto out = runRef(s);
        if (dtype == DType::kF32)
          expectMatchesOracle(s, out, 1e-5, 1e-6);
        else
          expectMatchesOracle(s, out, 1e-2, 1e-2);
        for (const int32_t r : {0, 31, 32, 90, 91, 127, 128, 200, 299}) {
          Attn one = s;
          one.qLens = {1};
          one.kvLens = {s.kvLens[0]};
          one.positions = {s.positions[r]};
          one.maxQ = 1;
          one.table.resize(size_t(2) * s.maxPages);
          one.q.assign(s.qAt(r, 0), s.qAt(r, 0) + size_t(s.hq) * s.dim);
          const auto alone = runRef(one);
          for (size_t i = 0; i < alone.size(); ++i) {
            ASSERT_EQ(alone[i], out[size_t(r) * s.hq * s.dim + i]) << "row " << r << " at " << i;
          }
        }
      }
    }
  }
}

// Random batches over every mask mode, windows, GQA groups and head dims; the last rows of some
// sequences are padding (-1); kv lengths 127/128/129 and page-crossing positions.
TEST(PagedAttentionRef, RandomMatchesOracle) {
  std::mt19937 rng(7);
  const int32_t groups[] = {1, 2, 3, 4, 8};
  const int32_t dims[] = {64, 128, 256};
  int n = 0;
  for (AttentionMask mask :
       {AttentionMask::kCausal, AttentionMask::kPackedTree, AttentionMask::kBidirectional}) {
    for (int32_t window : {0, 5, 130}) {
      for (int32_t g : groups) {
        ++n;
        Attn s;
        s.dtype = n % 4 == 0 ? DType::kBF16 : DType::kF32;
        s.mask = mask;
        s.window = window;
        s.hkv = 1 + n % 2;
        s.hq = s.hkv * g;
        s.dim = dims[n % 3];
        s.scale = 1.0f / std::sqrt(float(s.dim));
        s.maxPages = 3;
        const int32_t kvChoices[] = {127, 128, 129, 1, 200, 384};
        const int32_t batch = 3;
        for (int32_t b = 0; b < batch; ++b) {
          const int32_t kvLen = kvChoices[(n + b) % 6];
          const int32_t qLen = std::min(kvLen, 1 + int32_t(rng() % 6));
          s.qLens.push_back(qLen);
          s.kvLens.push_back(kvLen);
          for (int32_t i = 0; i < qLen; ++i) {
            const bool pad = i > 0 && i == qLen - 1 && b == 1;
            s.positions.push_back(pad ? -1 : kvLen - qLen + i);
          }
        }
        s.maxQ = *std::max_element(s.qLens.begin(), s.qLens.end());
        randomize(s, rng);
        if (mask == AttentionMask::kPackedTree) {
          s.packed.assign(size_t(s.totalQ()) * s.words(), 0);
          for (auto& w : s.packed) w = int32_t(rng());
        }
        SCOPED_TRACE(::testing::Message()
                     << "case " << n << " mask " << int(mask) << " window " << window << " group "
                     << g << " D " << s.dim << " " << dtype_name(s.dtype));
        const auto out = runRef(s);
        if (s.dtype == DType::kF32)
          expectMatchesOracle(s, out, 1e-5, 1e-6);
        else
          expectMatchesOracle(s, out, 1e-2, 1e-2);
      }
    }
  }
}

TEST(PagedAttentionRef, Validation) {
  std::vector<float> q(64), out(64), pool(2 * 128 * 64);
  std::vector<int32_t> cu = {0, 1}, pos = {0}, table = {0, 1}, kvl = {1}, packed = {1};
  auto make = [&] {
    kernel::PagedAttentionParams p;
    p.query.q = q.data();
    p.query.out = out.data();
    p.query.cuQSeqLens = cu.data();
    p.query.qPositions = pos.data();
    p.query.totalQ = 1;
    p.query.maxQSeqLen = 1;
    p.query.numQHeads = 1;
    p.kv.pool = pool.data();
    p.kv.pageTable = table.data();
    p.kv.numPages = 1;
    p.kv.maxPagesPerSeq = 1;
    p.kv.numKVHeads = 1;
    p.kvLengths = kvl.data();
    p.batchSize = 1;
    p.headDim = 64;
    p.scale = 0.125f;
    p.dtype = DType::kF32;
    return p;
  };
  EXPECT_TRUE(kernel::validate(make()));
  auto p = make();
  p.batchSize = 0;
  p.query.totalQ = 0;
  p.query.q = nullptr;
  EXPECT_FALSE(kernel::validate(p));
  using P = kernel::PagedAttentionParams;
  auto bad = [&](auto mutate, const char* arg) {
    auto pp = make();
    mutate(pp);
    test::expectInvalidArgument([&] { ref::pagedAttention(pp); }, arg);
  };
  bad([](P& x) { x.batchSize = -1; }, "batchSize");
  bad([](P& x) { x.query.totalQ = -1; }, "query.totalQ");
  bad([](P& x) { x.query.maxQSeqLen = -1; }, "query.maxQSeqLen");
  bad([](P& x) { x.query.numQHeads = 0; }, "query.numQHeads");
  bad([](P& x) { x.kv.numKVHeads = 0; }, "kv.numKVHeads");
  bad(
      [](P& x) {
        x.query.numQHeads = 9;
        x.kv.numKVHeads = 2;
      },
      "query.numQHeads");
  bad([](P& x) { x.headDim = 80; }, "headDim");
  bad([](P& x) { x.kv.numPages = 0; }, "kv.numPages");
  bad([](P& x) { x.kv.maxPagesPerSeq = 0; }, "kv.maxPagesPerSeq");
  bad([](P& x) { x.slidingWindow = -1; }, "slidingWindow");
  bad([](P& x) { x.scale = 0.0f; }, "scale");
  bad([](P& x) { x.mask = static_cast<AttentionMask>(7); }, "mask");
  bad([](P& x) { x.dtype = DType::kI32; }, "dtype");
  bad([](P& x) { x.query.q = nullptr; }, "query.q");
  bad([](P& x) { x.query.out = nullptr; }, "query.out");
  bad([&](P& x) { x.query.out = q.data(); }, "query.out");
  bad([](P& x) { x.query.cuQSeqLens = nullptr; }, "query.cuQSeqLens");
  bad([](P& x) { x.query.qPositions = nullptr; }, "query.qPositions");
  bad([](P& x) { x.kv.pool = nullptr; }, "kv.pool");
  bad([](P& x) { x.kv.pageTable = nullptr; }, "kv.pageTable");
  bad([](P& x) { x.kvLengths = nullptr; }, "kvLengths");
  bad([](P& x) { x.mask = AttentionMask::kPackedTree; }, "packedMask");
  bad(
      [](P& x) {
        x.mask = AttentionMask::kPackedTree;
        x.packedMask = nullptr;
        x.query.maxQSeqLen = 0;
      },
      "query.maxQSeqLen");
  // Split-KV planning fields (checked even for an empty call: they are plain host values).
  bad([](P& x) { x.maxKvLength = -1; }, "maxKvLength");
  bad([](P& x) { x.workspaceBytes = -1; }, "workspaceBytes");
  bad([](P& x) { x.workspaceBytes = 64; }, "workspace");
  bad(
      [&](P& x) {
        x.workspace = reinterpret_cast<char*>(pool.data()) + 4;
        x.workspaceBytes = 64;
      },
      "workspace");
  bad(
      [](P& x) {
        x.batchSize = 0;
        x.query.totalQ = 0;
        x.maxKvLength = -5;
      },
      "maxKvLength");
  auto ok = make();
  ok.maxKvLength = 1;
  ok.workspace = pool.data();
  ok.workspaceBytes = 0;  // a workspace of 0 bytes is allowed (one split needs none)
  EXPECT_TRUE(kernel::validate(ok));
}

// The split-KV plan is a pure function of host values (no device memory is touched here).
struct PlanShape {
  std::vector<uint8_t> storage = std::vector<uint8_t>(4096 + 64);
  std::vector<int32_t> ints = std::vector<int32_t>(64, 0);
  kernel::PagedAttentionParams p;
  PlanShape(int32_t batch, int32_t qLen, int32_t hq, int32_t hkv, int32_t dim, int32_t maxKv) {
    void* base = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) % 16) % 16;
    p.query.q = base;
    p.query.out = static_cast<char*>(base) + 1024;
    p.kv.pool = static_cast<char*>(base) + 2048;
    p.query.cuQSeqLens = ints.data();
    p.query.qPositions = ints.data();
    p.kvLengths = ints.data();
    p.kv.pageTable = ints.data();
    p.query.totalQ = batch * qLen;
    p.query.maxQSeqLen = qLen;
    p.query.numQHeads = hq;
    p.kv.numKVHeads = hkv;
    p.kv.numPages = 1 << 20;
    p.kv.maxPagesPerSeq = (std::max(maxKv, 1) + kPage - 1) / kPage;
    p.batchSize = batch;
    p.headDim = dim;
    p.scale = 0.1f;
    p.dtype = DType::kBF16;
    p.maxKvLength = maxKv;
    p.workspace = static_cast<char*>(base) + 3072;  // never dereferenced by the plan
    p.workspaceBytes = int64_t{1} << 40;
  }
};

int64_t partialBytes(int64_t splits, int64_t rows, int64_t hq, int64_t dim) {
  return splits < 2 ? 0 : splits * rows * hq * (dim + 2) * 4;
}

TEST(PagedAttentionPlan, DecodeSplitCounts) {
  // Qwen3-8B-like decode: 32 q / 8 kv heads, D 128. 132 SMs x 2 CTAs = 264 slots.
  {  // B 1, 32k: 8 (seq, head) pairs -> 33 splits wanted, 512 tiles of 64 keys -> 16 per split ->
     // 32
    PlanShape s(1, 1, 32, 8, 128, 32768);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_TRUE(plan.splitKv) << plan.reason;
    EXPECT_EQ(plan.numSplits, 32);
    EXPECT_EQ(plan.tilesPerSplit, 16);
    EXPECT_EQ(plan.warpsM, 1);
    EXPECT_EQ(plan.rowBlocks, 1);
    EXPECT_EQ(plan.workspaceBytes, partialBytes(32, 1, 32, 128));
  }
  {  // B 1, 4k: 64 tiles -> 2 per split would do, but at least 4 -> 16 splits
    PlanShape s(1, 1, 32, 8, 128, 4096);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_EQ(plan.numSplits, 16);
    EXPECT_EQ(plan.tilesPerSplit, kernel::kSplitKvMinTilesPerSplit);
  }
  {  // B 16, 32k: 128 pairs -> 2 splits (a third would start a second wave)
    PlanShape s(16, 1, 32, 8, 128, 32768);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_TRUE(plan.splitKv);
    EXPECT_EQ(plan.numSplits, 2);
    EXPECT_EQ(plan.workspaceBytes, partialBytes(2, 16, 32, 128));
  }
  {  // B 64: 512 pairs fill the GPU alone: one split, the CTAs write the output, no workspace
    PlanShape s(64, 1, 32, 8, 128, 32768);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_TRUE(plan.splitKv);
    EXPECT_EQ(plan.numSplits, 1);
    EXPECT_EQ(plan.workspaceBytes, 0);
  }
  {  // short context: 129 keys = 3 tiles, one per split (fewer than 8 splits of 4)
    PlanShape s(1, 1, 32, 8, 128, 129);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_EQ(plan.numSplits, 3);
    EXPECT_EQ(plan.tilesPerSplit, 1);
  }
  {  // 384 keys = 6 tiles: 6 splits of 1; 1536 keys = 24 tiles: 8 splits of 3
    PlanShape s(1, 1, 32, 8, 128, 384);
    EXPECT_EQ(kernel::planPagedAttention(s.p).numSplits, 6);
    PlanShape m(1, 1, 32, 8, 128, 1536);
    EXPECT_EQ(kernel::planPagedAttention(m.p).numSplits, 8);
    EXPECT_EQ(kernel::planPagedAttention(m.p).tilesPerSplit, 3);
  }
  {  // a sliding window bounds the keys one row block sees (W 256 + 15 more rows = 5 tiles, + 1
     // tile of misalignment = 6); 1 tile per split, and one split more for the window's offset
     // against the fixed boundaries (no more than it needs here: 6)
    PlanShape s(1, 1, 32, 8, 128, 32768);
    s.p.slidingWindow = 256;
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_EQ(plan.numSplits, 6);
    EXPECT_EQ(plan.tilesPerSplit, 1);
  }
  {  // W 4000: 4015 keys = 63 tiles, + 1 = 64 -> 4 per split (33 wanted) -> 16 + 1 splits
    PlanShape s(1, 1, 32, 8, 128, 32768);
    s.p.slidingWindow = 4000;
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_EQ(plan.tilesPerSplit, 4);
    EXPECT_EQ(plan.numSplits, 17);
  }
}

// The split boundaries depend on the batch, heads and key bound only: a verify call (16 rows per
// sequence) splits every row's keys exactly as the decode call (1 row) does.
TEST(PagedAttentionPlan, SplitBoundariesDoNotDependOnTheQueryRows) {
  for (const auto& [hq, hkv] : {std::pair{32, 8}, std::pair{9, 3}, std::pair{16, 16}}) {
    for (const int32_t dim : {64, 128, 256}) {
      for (const int32_t batch : {1, 2, 7, 64}) {
        for (const int32_t kv : {1, 100, 4096, 32768}) {
          for (const int32_t window : {0, 200}) {
            PlanShape one(batch, 1, hq, hkv, dim, kv);
            one.p.slidingWindow = window;
            const auto decode = kernel::planPagedAttention(one.p);
            for (const int32_t qLen : {2, 5, 16}) {
              PlanShape many(batch, qLen, hq, hkv, dim, kv);
              many.p.slidingWindow = window;
              const auto verify = kernel::planPagedAttention(many.p);
              ASSERT_TRUE(verify.splitKv && decode.splitKv);
              EXPECT_EQ(verify.numSplits, decode.numSplits) << batch << " " << kv << " " << qLen;
              EXPECT_EQ(verify.tilesPerSplit, decode.tilesPerSplit)
                  << batch << " " << kv << " " << qLen;
            }
          }
        }
      }
    }
  }
}

// Prefill (more than 16 rows per sequence, causal or bidirectional): the split path with one
// split at any batch, no workspace needed; 4 row tiles per CTA with one tile per warp
// (maxRowTiles 1), the wgmma kernel's 8 (warpsM 4 x rowTiles 2) at D 128 otherwise.
TEST(PagedAttentionPlan, PrefillTakesOneSplit) {
  for (const int32_t batch : {1, 3}) {
    for (const int32_t rt : {1, 2}) {
      PlanShape s(batch, 4096, 32, 8, 128, 32768);
      s.p.workspace = nullptr;
      s.p.workspaceBytes = 0;
      const auto plan = kernel::planPagedAttention(s.p, 0, rt);
      EXPECT_TRUE(plan.splitKv) << plan.reason;
      EXPECT_EQ(plan.numSplits, 1);
      EXPECT_EQ(plan.warpsM, 4);
      EXPECT_EQ(plan.rowTiles, rt);
      EXPECT_EQ(plan.rowBlocks, 4096 * 4 / (64 * rt));
      EXPECT_EQ(plan.workspaceBytes, 0);
    }
  }
  PlanShape s(1, 17, 9, 3, 64, 1000);  // 51 packed rows: 4 tiles, one CTA
  s.p.mask = kernel::AttentionMask::kBidirectional;
  const auto plan = kernel::planPagedAttention(s.p);
  EXPECT_TRUE(plan.splitKv) << plan.reason;
  EXPECT_EQ(plan.warpsM, 4);
  EXPECT_EQ(plan.rowTiles, 1);
  EXPECT_EQ(plan.rowBlocks, 1);
}

// Which prefill calls take the wgmma kernel's 128-row CTAs (paged_attention.h, "Row tiles";
// reported as warpsM 4 x rowTiles 2): prefill (maxQSeqLen > 16) at head dim 128 with at least 128
// packed rows per sequence, with one split, however few CTAs that makes; everything else keeps one
// tile per warp row, decode and batch > 1 verify in particular (the batch-1 verify's two tiles per
// CTA at warpsM 1: VerifyRowTiles below).
TEST(PagedAttentionPlan, PrefillRowTiles) {
  struct Want {
    int32_t batch, qLen, hq, hkv, dim, rowTiles, warpsM, rowBlocks;
  };
  for (const Want w : {
           Want{1, 4096, 32, 8, 128, 2, 4, 128},  // Qwen3-8B 4k prompt: 1,024 CTAs
           Want{1, 4096, 64, 8, 128, 2, 4, 256},  // GQA 8
           Want{2, 600, 16, 4, 128, 2, 4, 19},    // the GPU test's shapes: 2 x 4 x 19 = 152 CTAs
           Want{2, 600, 16, 2, 128, 2, 4, 38},    //   GQA 8: 2 x 2 x 38 = 152
           Want{2, 400, 32, 8, 128, 2, 4, 13},    //   400 x 4 = 1,600 rows, 13 blocks: 208 CTAs
           Want{2, 300, 16, 4, 128, 2, 4, 10},    // 2 x 4 x 10 = 80 CTAs of 128 rows
           Want{1, 128, 32, 8, 128, 2, 4, 4},     // 128-row suffix: 32 CTAs of 128 rows
           Want{17, 32, 32, 8, 128, 2, 4, 1},     // exactly 128 packed rows, 136 CTAs
           Want{16, 32, 32, 8, 128, 2, 4, 1},     //   128 CTAs
           Want{64, 31, 32, 8, 128, 1, 4, 2},     // 124 packed rows: no full 128-row block
           Want{16, 17, 64, 8, 128, 2, 4, 2},     // 17 rows x GQA 8 = 136 packed rows, 256 CTAs
           Want{1, 4096, 32, 8, 64, 1, 4, 256},   // D 64 and 256: the split-KV kernel
           Want{1, 4096, 16, 2, 256, 1, 4, 512},
           Want{16, 16, 64, 8, 128, 1, 4, 2},  // verify shapes at batch > 1: never
           Want{64, 1, 32, 8, 128, 1, 1, 1},   // decode
       }) {
    PlanShape s(w.batch, w.qLen, w.hq, w.hkv, w.dim, 8192);
    const auto plan = kernel::planPagedAttention(s.p);
    const std::string what = "B " + std::to_string(w.batch) + " qLen " + std::to_string(w.qLen) +
                             " " + std::to_string(w.hq) + "/" + std::to_string(w.hkv) + " D " +
                             std::to_string(w.dim);
    ASSERT_TRUE(plan.splitKv) << plan.reason << " " << what;
    EXPECT_EQ(plan.rowTiles, w.rowTiles) << what;
    EXPECT_EQ(plan.warpsM, w.warpsM) << what;
    EXPECT_EQ(plan.rowBlocks, w.rowBlocks) << what;
    // maxRowTiles 2 is the same plan here (it only changes the batch-1 verify's choice).
    const auto two = kernel::planPagedAttention(s.p, 0, 2);
    EXPECT_EQ(two.rowTiles, plan.rowTiles) << what;
    EXPECT_EQ(two.rowBlocks, plan.rowBlocks) << what;
    // The wgmma prefill kernel takes exactly the one-split prefill plans of two row tiles at D 128.
    EXPECT_EQ(kernel::detail::prefillWgmmaApplies(s.p, plan),
              w.rowTiles == 2 && w.dim == 128 && w.qLen > kernel::kSplitKvMaxQSeqLen)
        << what;
    // maxRowTiles 1: one tile per warp row, the split-KV kernel.
    const auto one = kernel::planPagedAttention(s.p, 0, 1);
    EXPECT_EQ(one.rowTiles, 1) << what;
    EXPECT_FALSE(kernel::detail::prefillWgmmaApplies(s.p, one)) << what;
    if (w.rowTiles == 2) {
      EXPECT_EQ(one.warpsM, 4) << what;
      EXPECT_EQ(one.rowBlocks, (w.qLen * (w.hq / w.hkv) + 63) / 64) << what;
    } else {
      EXPECT_EQ(one.warpsM, plan.warpsM) << what;
      EXPECT_EQ(one.rowBlocks, plan.rowBlocks) << what;
    }
    EXPECT_EQ(one.numSplits, plan.numSplits) << what;
    EXPECT_EQ(one.tilesPerSplit, plan.tilesPerSplit) << what;
  }
  {  // a sliding window and a bidirectional prefill take it too; a forced split count of 1 keeps
     // it, more splits take the split-KV kernel's one tile per warp row
    PlanShape s(1, 4096, 32, 8, 128, 8192);
    s.p.slidingWindow = 1024;
    EXPECT_EQ(kernel::planPagedAttention(s.p).rowTiles, 2);
    s.p.mask = kernel::AttentionMask::kBidirectional;
    EXPECT_EQ(kernel::planPagedAttention(s.p).rowTiles, 2);
    const auto single = kernel::planPagedAttention(s.p, 1);
    EXPECT_EQ(single.rowTiles, 2);
    EXPECT_TRUE(kernel::detail::prefillWgmmaApplies(s.p, single));
    const auto forced = kernel::planPagedAttention(s.p, 3, 2);
    EXPECT_TRUE(forced.splitKv) << forced.reason;
    EXPECT_EQ(forced.numSplits, 3);
    EXPECT_EQ(forced.rowTiles, 1);
    EXPECT_EQ(forced.warpsM, 4);
    EXPECT_EQ(forced.rowBlocks, 4096 * 4 / 64);
    EXPECT_FALSE(kernel::detail::prefillWgmmaApplies(s.p, forced));
  }
  PlanShape s(1, 4096, 32, 8, 128, 8192);
  test::expectInvalidArgument([&] { kernel::planPagedAttention(s.p, 0, 3); }, "maxRowTiles");
  test::expectInvalidArgument([&] { kernel::planPagedAttention(s.p, 0, -1); }, "maxRowTiles");
}

TEST(PagedAttentionPlan, RowTiles) {
  struct Want {
    int32_t qLen, hq, hkv, warpsM, rowBlocks;
  };
  // Batch 2: up to 4 row tiles per CTA.
  for (const Want w : {Want{1, 32, 8, 1, 1}, Want{1, 64, 8, 1, 1}, Want{16, 8, 8, 1, 1},
                       Want{16, 16, 8, 2, 1}, Want{16, 24, 8, 4, 1}, Want{16, 32, 8, 4, 1},
                       Want{16, 64, 8, 4, 2}, Want{16, 9, 3, 4, 1}, Want{5, 64, 1, 4, 5}}) {
    PlanShape s(2, w.qLen, w.hq, w.hkv, 128, 4096);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_TRUE(plan.splitKv) << plan.reason;
    EXPECT_EQ(plan.rowTiles, 1);
    EXPECT_EQ(plan.warpsM, w.warpsM) << w.qLen << " x " << w.hq / w.hkv;
    EXPECT_EQ(plan.rowBlocks, w.rowBlocks) << w.qLen << " x " << w.hq / w.hkv;
  }
  // Batch 1 with maxRowTiles 1: one row tile per CTA (row invariance: decode and verify rows sum
  // alike; the two-tile verify variant keeps that, VerifyRowTiles below).
  for (const Want w : {Want{1, 32, 8, 1, 1}, Want{16, 16, 8, 1, 2}, Want{16, 32, 8, 1, 4},
                       Want{16, 9, 3, 1, 3}, Want{5, 64, 1, 1, 20}}) {
    PlanShape s(1, w.qLen, w.hq, w.hkv, 128, 4096);
    const auto plan = kernel::planPagedAttention(s.p, 0, 1);
    EXPECT_TRUE(plan.splitKv) << plan.reason;
    EXPECT_EQ(plan.rowTiles, 1);
    EXPECT_EQ(plan.warpsM, w.warpsM) << w.qLen << " x " << w.hq / w.hkv;
    EXPECT_EQ(plan.rowBlocks, w.rowBlocks) << w.qLen << " x " << w.hq / w.hkv;
  }
}

// The batch-1 verify variant (paged_attention.h, "Verify row tiles"): batch-1 calls of <= 16 rows
// per sequence at head dim 128 whose packed rows need >= 2 tiles take 2 tiles per CTA at warpsM
// 1, any mask; 1 tile, D 64 / 256, batch > 1 and maxRowTiles 1 keep one tile per CTA. The split
// geometry is the decode call's either way.
TEST(PagedAttentionPlan, VerifyRowTiles) {
  using M = kernel::AttentionMask;
  struct Want {
    int32_t batch, qLen, hq, hkv, dim;
    M mask;
    int32_t rowTiles, warpsM, rowBlocks;
  };
  for (const Want w : {
           Want{1, 16, 32, 8, 128, M::kCausal, 2, 1, 2},  // Qwen3-8B 16-row verify: 4 tiles
           Want{1, 13, 32, 8, 128, M::kCausal, 2, 1, 2},  // 52 packed rows: 4 tiles
           Want{1, 9, 32, 8, 128, M::kCausal, 2, 1, 2},   // 36: 3 tiles (odd: the 2nd CTA has 1)
           Want{1, 5, 32, 8, 128, M::kCausal, 2, 1, 1},   // 20: 2 tiles, one CTA
           Want{1, 8, 32, 8, 128, M::kCausal, 2, 1, 1},   // 32: 2 tiles
           Want{1, 4, 32, 8, 128, M::kCausal, 1, 1, 1},   // 16: one tile (decode's kernel)
           Want{1, 2, 32, 8, 128, M::kCausal, 1, 1, 1},
           Want{1, 1, 32, 8, 128, M::kCausal, 1, 1, 1},          // decode
           Want{1, 16, 16, 8, 128, M::kCausal, 2, 1, 1},         // GQA 2: 32 rows, 2 tiles
           Want{1, 9, 16, 8, 128, M::kCausal, 2, 1, 1},          //   18 rows: 2 tiles
           Want{1, 8, 16, 8, 128, M::kCausal, 1, 1, 1},          //   16 rows: 1 tile
           Want{1, 16, 64, 8, 128, M::kCausal, 2, 1, 4},         // GQA 8: 8 tiles
           Want{1, 5, 64, 8, 128, M::kCausal, 2, 1, 2},          //   40 rows: 3 tiles
           Want{1, 16, 16, 16, 128, M::kCausal, 1, 1, 1},        // GQA 1: 16 rows, 1 tile
           Want{1, 16, 32, 8, 128, M::kPackedTree, 2, 1, 2},     // tree verify (DFlash / EAGLE)
           Want{1, 16, 32, 8, 128, M::kBidirectional, 2, 1, 2},  // DFlash proposal block
           Want{1, 16, 9, 3, 64, M::kCausal, 1, 1, 3},           // D 64 and 256: not built
           Want{1, 16, 16, 2, 256, M::kCausal, 1, 1, 8},
           Want{2, 16, 32, 8, 128, M::kCausal, 1, 4, 1},  // batch 2: 4 tiles per CTA, warpsM 4
       }) {
    for (const int32_t maxKv : {300, 4096, 32768}) {
      PlanShape s(w.batch, w.qLen, w.hq, w.hkv, w.dim, maxKv);
      s.p.mask = w.mask;
      if (w.mask == M::kPackedTree) s.p.packedMask = s.ints.data();
      const std::string what = "B " + std::to_string(w.batch) + " qLen " + std::to_string(w.qLen) +
                               " " + std::to_string(w.hq) + "/" + std::to_string(w.hkv) + " D " +
                               std::to_string(w.dim) + " mask " + std::to_string(int(w.mask)) +
                               " maxKv " + std::to_string(maxKv);
      const auto plan = kernel::planPagedAttention(s.p, 0, 2);
      ASSERT_TRUE(plan.splitKv) << plan.reason << " " << what;
      EXPECT_EQ(plan.rowTiles, w.rowTiles) << what;
      EXPECT_EQ(plan.warpsM, w.warpsM) << what;
      EXPECT_EQ(plan.rowBlocks, w.rowBlocks) << what;
      // maxRowTiles 1: one tile per CTA at batch 1.
      const auto one = kernel::planPagedAttention(s.p, 0, 1);
      const int32_t tiles = (w.qLen * (w.hq / w.hkv) + 15) / 16;
      EXPECT_EQ(one.rowTiles, 1) << what;
      EXPECT_EQ(one.warpsM, w.warpsM) << what;
      EXPECT_EQ(one.rowBlocks, w.batch == 1 ? tiles : w.rowBlocks) << what;
      // The plan's rule: two tiles only where one tile per CTA needs more than one wave of
      // 132 x 2 CTAs.
      const bool twoWaves = int64_t{w.batch} * w.hkv * one.rowBlocks * one.numSplits > 264;
      EXPECT_EQ(kernel::planPagedAttention(s.p).rowTiles, twoWaves ? w.rowTiles : 1) << what;
      // Same split geometry as the one-tile plan and as the decode call of the same sequence.
      PlanShape d(w.batch, 1, w.hq, w.hkv, w.dim, maxKv);
      const auto decode = kernel::planPagedAttention(d.p, 0, 2);
      for (const auto& x : {one, decode}) {
        EXPECT_EQ(plan.numSplits, x.numSplits) << what;
        EXPECT_EQ(plan.tilesPerSplit, x.tilesPerSplit) << what;
      }
      EXPECT_EQ(decode.rowTiles, 1) << what;
      if (maxKv == 4096 && w.hkv == 8 && w.batch == 1) {
        EXPECT_EQ(plan.numSplits, 16) << what;  // 4k, 8 KV heads: 16 splits of 4 tiles
      }
      // Forced split counts keep the two tiles (tests and benchmarks run them).
      const auto forced = kernel::planPagedAttention(s.p, 3, 2);
      EXPECT_TRUE(forced.splitKv) << forced.reason << " " << what;
      EXPECT_EQ(forced.rowTiles, w.rowTiles) << what;
    }
  }
  {  // a sliding window keeps it, with the decode call's split geometry
    PlanShape s(1, 16, 32, 8, 128, 32768), d(1, 1, 32, 8, 128, 32768);
    s.p.slidingWindow = d.p.slidingWindow = 1000;
    const auto plan = kernel::planPagedAttention(s.p, 0, 2);
    const auto decode = kernel::planPagedAttention(d.p, 0, 2);
    EXPECT_EQ(plan.rowTiles, 2);
    EXPECT_EQ(plan.rowBlocks, 2);
    EXPECT_EQ(plan.numSplits, decode.numSplits);
    EXPECT_EQ(plan.tilesPerSplit, decode.tilesPerSplit);
  }
  {  // the Qwen3-8B 16-row verify at 4k: 8 x 2 x 16 = 256 CTAs (one wave of 264), 4 before
    PlanShape s(1, 16, 32, 8, 128, 4096);
    const auto plan = kernel::planPagedAttention(s.p, 0, 2);
    EXPECT_EQ(8 * plan.rowBlocks * plan.numSplits, 256);
    const auto one = kernel::planPagedAttention(s.p, 0, 1);
    EXPECT_EQ(8 * one.rowBlocks * one.numSplits, 512);
  }
  // The rule by hand (paged_attention.h, "Verify row tiles"): Qwen3-8B (32 / 8 heads: 4 tiles) at
  // 4k has 8 x 4 x 16 = 512 one-tile CTAs (two tiles), at 300 keys 8 x 4 x 5 = 160 (one);
  // Qwen3-0.6B (16 / 8: 2 tiles) at 4k 8 x 2 x 16 = 256 (one), at 32k 8 x 2 x 32 = 512 (two).
  {
    struct Want {
      int32_t hq, maxKv, splits, rowTiles;
    };
    for (const Want w : {Want{32, 4096, 16, 2}, Want{32, 300, 5, 1}, Want{32, 2048, 8, 1},
                         Want{16, 4096, 16, 1}, Want{16, 32768, 32, 2}}) {
      PlanShape s(1, 16, w.hq, 8, 128, w.maxKv);
      const auto plan = kernel::planPagedAttention(s.p);
      ASSERT_TRUE(plan.splitKv) << plan.reason;
      EXPECT_EQ(plan.numSplits, w.splits) << w.hq << " heads, " << w.maxKv << " keys";
      EXPECT_EQ(plan.rowTiles, w.rowTiles) << w.hq << " heads, " << w.maxKv << " keys";
      EXPECT_EQ(plan.rowBlocks, (w.hq / 8 + w.rowTiles - 1) / w.rowTiles) << w.hq << " heads";
      // The decode call of the same sequence (one tile) keeps the same split geometry.
      PlanShape d(1, 1, w.hq, 8, 128, w.maxKv);
      EXPECT_EQ(kernel::planPagedAttention(d.p).numSplits, plan.numSplits);
    }
  }
}

TEST(PagedAttentionPlan, FallbacksToTheSimpleKernel) {
  auto reason = [](auto mutate) {
    PlanShape s(1, 1, 32, 8, 128, 32768);
    mutate(s.p);
    const auto plan = kernel::planPagedAttention(s.p);
    EXPECT_FALSE(plan.splitKv);
    return std::string(plan.reason);
  };
  using P = kernel::PagedAttentionParams;
  EXPECT_NE(reason([](P& p) { p.maxKvLength = 0; }).find("maxKvLength"), std::string::npos);
  EXPECT_NE(reason([](P& p) {
              p.workspace = nullptr;
              p.workspaceBytes = 0;
            }).find("workspace"),
            std::string::npos);
  EXPECT_NE(reason([](P& p) { p.dtype = DType::kF32; }).find("dtype"), std::string::npos);
  EXPECT_NE(reason([](P& p) {
              p.query.maxQSeqLen = 17;
              p.mask = kernel::AttentionMask::kPackedTree;
              p.packedMask = static_cast<const int32_t*>(p.kvLengths);
            }).find("tree"),
            std::string::npos);
  EXPECT_NE(reason([](P& p) { p.query.maxQSeqLen = 0; }).find("maxQSeqLen"), std::string::npos);
  EXPECT_NE(
      reason([](P& p) { p.query.q = static_cast<const char*>(p.query.q) + 2; }).find("aligned"),
      std::string::npos);
  EXPECT_NE(
      reason([](P& p) { p.kv.pool = static_cast<const char*>(p.kv.pool) + 8; }).find("aligned"),
      std::string::npos);
  // Too small by one byte for the planned 32 splits: simple kernel (never a smaller plan).
  EXPECT_NE(reason([](P& p) { p.workspaceBytes = partialBytes(32, 1, 32, 128) - 1; }).find("small"),
            std::string::npos);
  PlanShape s(1, 1, 32, 8, 128, 32768);
  s.p.workspaceBytes = partialBytes(32, 1, 32, 128);
  EXPECT_TRUE(kernel::planPagedAttention(s.p).splitKv);
  // f16 takes the split path like bf16.
  s.p.dtype = DType::kF16;
  EXPECT_TRUE(kernel::planPagedAttention(s.p).splitKv);
  // An empty call plans nothing.
  s.p.batchSize = 0;
  s.p.query.totalQ = 0;
  EXPECT_FALSE(kernel::planPagedAttention(s.p).splitKv);
}

TEST(PagedAttentionPlan, ForcedSplits) {
  PlanShape s(4, 16, 32, 8, 64, 1000);
  auto plan = kernel::planPagedAttention(s.p, 7);
  EXPECT_TRUE(plan.splitKv);
  EXPECT_EQ(plan.numSplits, 7);
  EXPECT_EQ(plan.tilesPerSplit, 2);  // 16 tiles / 7 (the last split takes the rest)
  EXPECT_EQ(plan.workspaceBytes, partialBytes(7, 64, 32, 64));
  plan = kernel::planPagedAttention(s.p, 100000);
  EXPECT_EQ(plan.numSplits, kernel::kSplitKvMaxSplits);
  EXPECT_EQ(plan.tilesPerSplit, 1);
  s.p.workspaceBytes = partialBytes(7, 64, 32, 64) - 1;
  EXPECT_FALSE(kernel::planPagedAttention(s.p, 7).splitKv);
  EXPECT_TRUE(kernel::planPagedAttention(s.p, 1).splitKv);  // one split needs no workspace
}

// pagedAttentionWorkspaceBytes covers every call within its bounds.
TEST(PagedAttentionPlan, WorkspaceBoundCoversEveryCall) {
  EXPECT_EQ(kernel::pagedAttentionWorkspaceBytes(1, 1, 32, 8, 128, 32768),
            partialBytes(34, 1, 32, 128));  // 33 splits wanted, + 1 for a window's offset
  EXPECT_EQ(kernel::pagedAttentionWorkspaceBytes(8, 16, 32, 8, 128, 0), 0);
  for (const int32_t dim : {64, 128, 256}) {
    for (const auto& [hq, hkv] : {std::pair{32, 8}, std::pair{9, 3}, std::pair{16, 1}}) {
      const int32_t maxBatch = 24, maxQ = 16, maxKv = 20000;
      const int64_t bound =
          kernel::pagedAttentionWorkspaceBytes(maxBatch, maxQ, hq, hkv, dim, maxKv);
      for (int32_t b = 1; b <= maxBatch; b += 3) {
        for (int32_t ql : {1, 2, 5, 16}) {
          for (int32_t kv : {1, 64, 65, 1000, 4096, 19999, 20000}) {
            for (int32_t window : {0, 1, 100, 700, 5000}) {  // any window: the bound knows none
              PlanShape s(b, ql, hq, hkv, dim, kv);
              s.p.query.totalQ = b * ql;
              s.p.slidingWindow = window;
              const auto plan = kernel::planPagedAttention(s.p);
              ASSERT_TRUE(plan.splitKv) << plan.reason;
              EXPECT_LE(plan.workspaceBytes, bound)
                  << "B " << b << " qLen " << ql << " kv " << kv << " W " << window << " D " << dim
                  << " " << hq << "/" << hkv;
              s.p.workspaceBytes = bound;
              EXPECT_TRUE(kernel::planPagedAttention(s.p).splitKv);
            }
          }
        }
      }
    }
  }
  // Padded totalQ: with maxTotalQ the bound holds for any totalQ <= maxTotalQ at any batch.
  {
    const int64_t bound = kernel::pagedAttentionWorkspaceBytes(8, 16, 32, 8, 128, 32768, 256);
    EXPECT_EQ(bound, partialBytes(34, 256, 32, 128));  // batch 1 (33 + 1 splits) with 256 rows
    for (int32_t b = 1; b <= 8; ++b) {
      PlanShape s(b, 1, 32, 8, 128, 32768);
      s.p.query.totalQ = 256;
      EXPECT_LE(kernel::planPagedAttention(s.p).workspaceBytes, bound) << b;
    }
  }
  // A bound for maxQSeqLen > 16 covers the calls that can take the split path (qLen <= 16).
  EXPECT_EQ(kernel::pagedAttentionWorkspaceBytes(2, 40, 32, 8, 128, 4096),
            kernel::pagedAttentionWorkspaceBytes(2, 16, 32, 8, 128, 4096));
  test::expectInvalidArgument([] { kernel::pagedAttentionWorkspaceBytes(0, 1, 32, 8, 128, 10); },
                              "maxBatchSize");
  test::expectInvalidArgument([] { kernel::pagedAttentionWorkspaceBytes(1, 0, 32, 8, 128, 10); },
                              "maxQSeqLen");
  test::expectInvalidArgument([] { kernel::pagedAttentionWorkspaceBytes(1, 1, 30, 8, 128, 10); },
                              "numQHeads");
  test::expectInvalidArgument([] { kernel::pagedAttentionWorkspaceBytes(1, 1, 32, 0, 128, 10); },
                              "numKVHeads");
  test::expectInvalidArgument([] { kernel::pagedAttentionWorkspaceBytes(1, 1, 32, 8, 96, 10); },
                              "headDim");
  test::expectInvalidArgument([] { kernel::pagedAttentionWorkspaceBytes(1, 1, 32, 8, 128, -1); },
                              "maxKvLength");
  test::expectInvalidArgument(
      [] { kernel::pagedAttentionWorkspaceBytes(1, 1, 32, 8, 128, 10, -1); }, "maxTotalQ");
}

}  // namespace
}  // namespace es
