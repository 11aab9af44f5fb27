// GPU parity of launchPagedAttention with the CPU reference over random ragged batches (prefill
// rows up to 260 per sequence, which the split path takes with one split): masks
// causal / packed tree (several mask words) / bidirectional, sliding windows (with released
// pages of -1 outside the window), GQA groups 1/2/3/4/8, head dims 64/128/256, f32/f16/bf16,
// kv lengths 127/128/129 and longer, padding rows, an empty sequence, scrambled page tables,
// poisoned output (every row, padding included, must be written); tolerance table in
// forward_ops_gpu_test_util.h. Each random case runs on the simple kernel and again with
// maxKvLength + workspace (the split-KV path where it applies).
//
// Prefill row tiles (PrefillRowTilesMatchReference): prefill shapes that the plan gives the wgmma
// prefill kernel (paged_attention_prefill.h; checked), each also run on the split-KV kernel with
// one tile per warp (maxRowTiles 1) and with forced split counts. Verify row tiles
// (VerifyRowTilesMatchReference, VerifyRowsEqualDecodeRowsBitForBit): batch-1 calls of 2-16 rows
// at D 128 that take two 16-row tiles per CTA at warpsM 1, against the reference and bit for bit
// against one-row decode calls, with rowTiles 1 and 2 forced in the same process.
//
// Split-KV (SplitKv* tests): the split path forced on (planned split count and forced counts 1,
// 2, 3, 7, 64, so splits past a sequence's real length and the one-split direct write are both
// exercised): batch 1 and 4, context lengths 1/127/128/129/1000/5000 with kv lengths below
// maxKvLength, qLen 1 and 16 causal, GQA 4 and 8, head dims 64/128/256, bf16 and f16; then
// tree / bidirectional / sliding-window masks, padding rows, rows in no sequence, unmapped and
// out-of-range page ids, a kv length above maxKvLength. The comparison there is tighter than the
// table: |got - want| <= rel |want| + c * rms(want) (c = 2e-2 bf16, 5e-3 f16: ~4x the P-rounding
// error), so a lost or doubled split is caught even where long-context outputs are small, and
// rows that must be zero are compared bit-exact (a bf16 poison is a tiny finite number).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "forward_ops_gpu_test_util.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_prefill.h"
#include "kv/page_geometry.h"

namespace es {
namespace {

using namespace fwdtest;
using kernel::AttentionMask;
constexpr int32_t kPage = kv::kTokensPerPage;

// NaN in every pool slot that no key range reaches: the slots at or past a sequence's kv length
// in its mapped pages, and the pages no sequence maps. A kernel must never let them into a
// result (the tiles it loads whole are zero-filled outside the keys its rows see), so a read
// that leaks one turns outputs into NaN and fails the comparison. `row`: Hkv * D elements a slot.
template <typename T>
void poisonUnreachableSlots(std::vector<T>& pool, const std::vector<int32_t>& table,
                            const std::vector<int32_t>& kvLens, int32_t maxPages, int32_t numPages,
                            int32_t row) {
  const T nan = cast<T>(std::numeric_limits<float>::quiet_NaN());
  std::vector<int32_t> reached(size_t(2) * numPages, 0);  // per page id: slots [0, n) reachable
  for (size_t b = 0; b < kvLens.size(); ++b) {
    for (int32_t lp = 0; lp < maxPages; ++lp) {
      const int32_t n = std::clamp(kvLens[b] - lp * kPage, 0, kPage);
      for (const int32_t id :
           {table[b * 2 * maxPages + lp], table[b * 2 * maxPages + maxPages + lp]}) {
        if (id >= 0 && id < 2 * numPages) reached[size_t(id)] = std::max(reached[size_t(id)], n);
      }
    }
  }
  for (int32_t id = 0; id < 2 * numPages; ++id) {
    for (int32_t slot = reached[size_t(id)]; slot < kPage; ++slot) {
      std::fill_n(pool.begin() + (int64_t{id} * kPage + slot) * row, row, nan);
    }
  }
}

struct Case {
  AttentionMask mask;
  int32_t window, hq, hkv, dim, batch, maxQ, maxKv;
};

// Device workspace of at least `bytes` (16-byte aligned by cudaMalloc).
test::DeviceArray<float> workspaceFor(int64_t bytes) {
  return test::DeviceArray<float>(size_t(std::max<int64_t>(bytes, 16) + 3) / 4);
}

// The plan's row tiles for a batch-1 verify call p whose two-tile variant has `variant` tiles per
// CTA (paged_attention.h, "Verify row tiles"): the variant only where one tile per CTA needs more
// than one wave of 132 x 2 CTAs.
int32_t defaultVerifyRowTiles(const kernel::PagedAttentionParams& p, int32_t variant) {
  const kernel::PagedAttentionPlan one = kernel::planPagedAttention(p, 0, 1);
  return int64_t{p.batchSize} * p.kv.numKVHeads * one.rowBlocks * one.numSplits > 264 ? variant : 1;
}

template <typename T>
void run(const Case& c, std::mt19937& rng, bool split) {
  SCOPED_TRACE(::testing::Message()
               << (split ? "split-KV allowed " : "") << "mask " << int(c.mask) << " W " << c.window
               << " Hq " << c.hq << " Hkv " << c.hkv << " D " << c.dim << " B " << c.batch
               << " maxQ " << c.maxQ << " maxKV " << c.maxKv << " " << dtype_name(dtype_of<T>));
  const int32_t maxPages = (c.maxKv + kPage - 1) / kPage;
  const int32_t numPages = c.batch * maxPages + 3;
  const int32_t kvChoices[] = {127, 128, 129, 1, c.maxKv, 257, 64};
  std::vector<int32_t> qLens, kvLens, cu = {0}, positions;
  for (int32_t b = 0; b < c.batch; ++b) {
    int32_t kv = std::min(kvChoices[std::uniform_int_distribution<int>(0, 6)(rng)], c.maxKv);
    int32_t q = std::min(kv, std::uniform_int_distribution<int32_t>(1, c.maxQ)(rng));
    if (b == 2) q = 0;  // an empty sequence (no rows); its kv length is irrelevant
    qLens.push_back(q);
    kvLens.push_back(std::max(kv, q));
    cu.push_back(cu.back() + q);
    for (int32_t i = 0; i < q; ++i) {
      const bool pad = q > 1 && i == q - 1 && (b % 2 == 1);
      positions.push_back(pad ? -1 : kvLens.back() - q + i);
    }
  }
  const int32_t totalQ = cu.back();
  const int32_t maxQ = std::max(1, *std::max_element(qLens.begin(), qLens.end()));
  const int32_t words = (maxQ + 31) / 32;

  std::vector<int32_t> kIds(numPages), vIds(numPages);
  std::iota(kIds.begin(), kIds.end(), 0);
  std::iota(vIds.begin(), vIds.end(), 0);
  std::shuffle(kIds.begin(), kIds.end(), rng);
  std::shuffle(vIds.begin(), vIds.end(), rng);
  std::vector<int32_t> table(size_t(c.batch) * 2 * maxPages);
  for (int32_t b = 0; b < c.batch; ++b) {
    for (int32_t lp = 0; lp < maxPages; ++lp) {
      int32_t k = kIds[size_t(b) * maxPages + lp], v = vIds[size_t(b) * maxPages + lp] + numPages;
      // With a window, pages wholly before the window of the sequence's first row are released.
      if (c.window > 0 && qLens[b] > 0) {
        const int32_t firstPos = kvLens[b] - qLens[b];
        if ((lp + 1) * kPage <= firstPos - c.window + 1) k = v = -1;
      }
      table[size_t(b) * 2 * maxPages + lp] = k;
      table[size_t(b) * 2 * maxPages + maxPages + lp] = v;
    }
  }
  std::vector<int32_t> packed;
  if (c.mask == AttentionMask::kPackedTree) {
    packed.resize(size_t(std::max(totalQ, 1)) * words);
    for (auto& w : packed) w = int32_t(rng());
  }
  std::vector<T> q(size_t(std::max(totalQ, 1)) * c.hq * c.dim);
  std::vector<T> pool(size_t(2) * numPages * kPage * c.hkv * c.dim);
  fill(q, rng, -2.0f, 2.0f);
  fill(pool, rng, -1.0f, 1.0f);
  poisonUnreachableSlots(pool, table, kvLens, maxPages, numPages, c.hkv * c.dim);
  std::vector<T> want(q.size());
  std::memset(want.data(), test::kPoisonByte, want.size() * sizeof(T));

  kernel::PagedAttentionParams p;
  p.query.q = q.data();
  p.query.out = want.data();
  p.query.cuQSeqLens = cu.data();
  p.query.qPositions = positions.data();
  p.query.totalQ = totalQ;
  p.query.maxQSeqLen = maxQ;
  p.query.numQHeads = c.hq;
  p.kv.pool = pool.data();
  p.kv.pageTable = table.data();
  p.kv.numPages = numPages;
  p.kv.maxPagesPerSeq = maxPages;
  p.kv.numKVHeads = c.hkv;
  p.kvLengths = kvLens.data();
  p.mask = c.mask;
  p.packedMask = packed.empty() ? nullptr : packed.data();
  p.slidingWindow = c.window;
  p.batchSize = c.batch;
  p.headDim = c.dim;
  p.scale = 1.0f / std::sqrt(float(c.dim));
  p.dtype = dtype_of<T>;
  ref::pagedAttention(p);

  test::DeviceArray<T> dQ(q), dPool(pool), dOut(want.size());
  test::DeviceArray<int32_t> dCu(cu),
      dPos(positions.empty() ? std::vector<int32_t>{-1} : positions), dTable(table), dKv(kvLens),
      dPacked(packed.empty() ? std::vector<int32_t>{0} : packed);
  p.query.q = dQ.get();
  p.query.out = dOut.get();
  p.query.cuQSeqLens = dCu.get();
  p.query.qPositions = dPos.get();
  p.kv.pool = dPool.get();
  p.kv.pageTable = dTable.get();
  p.kvLengths = dKv.get();
  p.packedMask = packed.empty() ? nullptr : dPacked.get();
  test::DeviceArray<float> ws = workspaceFor(
      split ? kernel::pagedAttentionWorkspaceBytes(c.batch, maxQ, c.hq, c.hkv, c.dim, c.maxKv) : 0);
  if (split) {
    p.maxKvLength = c.maxKv;
    p.workspace = ws.get();
    p.workspaceBytes = int64_t(ws.size() * sizeof(float));
    if constexpr (!std::is_same_v<T, float>) {
      // Decode, verify and DFlash blocks split the keys; prefill rows (maxQ > 16) take the
      // split path with one split, except under a packed tree mask.
      if (maxQ <= kernel::kSplitKvMaxQSeqLen || c.mask != AttentionMask::kPackedTree) {
        EXPECT_TRUE(kernel::planPagedAttention(p).splitKv) << kernel::planPagedAttention(p).reason;
      }
    }
  }
  kernel::launchPagedAttention(p, nullptr);
  std::vector<T> got = dOut.download();
  got.resize(size_t(totalQ) * c.hq * c.dim);
  want.resize(got.size());
  expect_close(got, want, tol_for<T>(), "out");
}

TEST(PagedAttentionGpu, MatchesReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(23);
  const int32_t groups[] = {1, 2, 3, 4, 8};
  const int32_t dims[] = {64, 128, 256};
  int n = 0;
  for (AttentionMask mask :
       {AttentionMask::kCausal, AttentionMask::kPackedTree, AttentionMask::kBidirectional}) {
    for (int32_t window : {0, 7, 130}) {
      for (int32_t g : groups) {
        ++n;
        const int32_t hkv = 1 + n % 3;
        const Case c{mask, window, hkv * g, hkv, dims[n % 3], 4, n % 2 ? 40 : 6, 300};
        for (const bool split : {false, true}) {
          run<float>(c, rng, split);
          run<bf16>(c, rng, split);
          run<fp16>(c, rng, split);
        }
      }
    }
  }
}

TEST(PagedAttentionGpu, PrefillAndDecodeShapes) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(29);
  // Prefill: long ragged prompts, causal. Decode: one row per sequence, long contexts.
  for (const bool split : {false, true}) {
    run<bf16>({AttentionMask::kCausal, 0, 9, 3, 64, 3, 260, 260}, rng, split);
    run<bf16>({AttentionMask::kCausal, 0, 32, 8, 128, 8, 1, 1000}, rng, split);
    run<fp16>({AttentionMask::kCausal, 0, 16, 2, 256, 5, 1, 600}, rng, split);
    run<float>({AttentionMask::kCausal, 64, 14, 2, 64, 4, 1, 700}, rng, split);
    // DFlash proposal block of 16 rows over long context.
    run<bf16>({AttentionMask::kBidirectional, 0, 16, 8, 128, 4, 16, 900}, rng, split);
  }
}

// ---- split-KV forced on -------------------------------------------------------------------------

struct SplitCase {
  AttentionMask mask = AttentionMask::kCausal;
  int32_t window = 0, hq = 8, hkv = 2, dim = 128;
  std::vector<int32_t> kvLens;  // per sequence (batch = size)
  int32_t qLen = 1;             // rows per sequence (min with its kv length); maxQSeqLen
  int32_t maxKv = 0;            // maxKvLength passed to the launcher
  bool padRows = false;         // last row of odd sequences (qLen > 1) is padding (-1)
  int32_t extraRows = 0;        // rows after the last sequence (in no sequence: zeros)
  bool badPages = false;        // a K id >= numPages and a V id < numPages (masked pages)
  int32_t rowTiles = 0;         // > 0: the plan must give this rowTiles (verify: where it
                                // pays), and maxRowTiles 1 and 2 are run explicitly
  int32_t padRow = -1;          // >= 0: this row of sequence 0 is padding too (batch 1)
};

// |got - want| <= rel |want| + c rms(want) on rows that see keys; bit-exact on zero rows.
template <typename T>
void expectSplitClose(const std::vector<T>& got, const std::vector<T>& want,
                      const std::vector<bool>& zeroRow, int64_t rowElems) {
  ASSERT_EQ(got.size(), want.size());
  double sum2 = 0;
  size_t n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (zeroRow[i / size_t(rowElems)]) continue;
    sum2 += to_d(want[i]) * to_d(want[i]);
    ++n;
  }
  const double rms = n ? std::sqrt(sum2 / double(n)) : 0.0;
  const double c = std::is_same_v<T, bf16> ? 2e-2 : 5e-3;
  const double rel = tol_for<T>().rel;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_d(got[i]), w = to_d(want[i]);
    const bool ok = zeroRow[i / size_t(rowElems)]
                        ? same_bits(got[i], want[i])
                        : std::isfinite(g) && std::abs(g - w) <= rel * std::abs(w) + c * rms + 1e-6;
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << "out[" << i << "] (row " << i / size_t(rowElems) << "): got " << g
                    << " want " << w << " (rms " << rms << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << bad << " of " << got.size() << " elements differ";
}

template <typename T>
void runSplit(const SplitCase& c, std::mt19937& rng) {
  const int32_t batch = int32_t(c.kvLens.size());
  SCOPED_TRACE(::testing::Message()
               << "split-KV mask " << int(c.mask) << " W " << c.window << " Hq " << c.hq << " Hkv "
               << c.hkv << " D " << c.dim << " B " << batch << " qLen " << c.qLen << " maxKv "
               << c.maxKv << " kv0 " << c.kvLens[0] << " " << dtype_name(dtype_of<T>));
  const int32_t kvMax = *std::max_element(c.kvLens.begin(), c.kvLens.end());
  const int32_t maxPages = (std::max(c.maxKv, kvMax) + kPage - 1) / kPage;
  const int32_t numPages = batch * maxPages + 3;
  std::vector<int32_t> qLens, cu = {0}, positions;
  std::vector<bool> zeroRow;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t q = std::min(c.qLen, c.kvLens[b]);
    qLens.push_back(q);
    cu.push_back(cu.back() + q);
    for (int32_t i = 0; i < q; ++i) {
      const bool pad =
          (c.padRows && q > 1 && i == q - 1 && b % 2 == 1) || (b == 0 && i == c.padRow);
      positions.push_back(pad ? -1 : c.kvLens[b] - q + i);
      zeroRow.push_back(pad);
    }
  }
  for (int32_t i = 0; i < c.extraRows; ++i) {
    positions.push_back(3 + i);  // a valid-looking position, but the row is in no sequence
    zeroRow.push_back(true);
  }
  const int32_t totalQ = int32_t(positions.size());
  const int32_t words = (c.qLen + 31) / 32;

  std::vector<int32_t> kIds(numPages), vIds(numPages);
  std::iota(kIds.begin(), kIds.end(), 0);
  std::iota(vIds.begin(), vIds.end(), 0);
  std::shuffle(kIds.begin(), kIds.end(), rng);
  std::shuffle(vIds.begin(), vIds.end(), rng);
  std::vector<int32_t> table(size_t(batch) * 2 * maxPages);
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t lp = 0; lp < maxPages; ++lp) {
      int32_t k = kIds[size_t(b) * maxPages + lp], v = vIds[size_t(b) * maxPages + lp] + numPages;
      const int32_t firstPos = c.kvLens[b] - qLens[b];
      if (c.window > 0 && (lp + 1) * kPage <= firstPos - c.window + 1) k = v = -1;  // released
      table[size_t(b) * 2 * maxPages + lp] = k;
      table[size_t(b) * 2 * maxPages + maxPages + lp] = v;
    }
  }
  if (c.badPages) {  // sequence 0: logical page 1 has a K id past the pool, page 2 a V id in K's
                     // range
    if (maxPages > 1) table[1] = numPages + 7;
    if (maxPages > 2) table[size_t(maxPages) + 2] = 5;
  }
  std::vector<int32_t> packed;
  if (c.mask == AttentionMask::kPackedTree) {
    packed.resize(size_t(std::max(totalQ, 1)) * words);
    for (auto& w : packed) w = int32_t(rng());
  }
  std::vector<T> q(size_t(std::max(totalQ, 1)) * c.hq * c.dim);
  std::vector<T> pool(size_t(2) * numPages * kPage * c.hkv * c.dim);
  fill(q, rng, -2.0f, 2.0f);
  fill(pool, rng, -1.0f, 1.0f);
  poisonUnreachableSlots(pool, table, c.kvLens, maxPages, numPages, c.hkv * c.dim);
  std::vector<T> want(q.size());
  std::memset(want.data(), test::kPoisonByte, want.size() * sizeof(T));

  kernel::PagedAttentionParams p;
  p.query.q = q.data();
  p.query.out = want.data();
  p.query.cuQSeqLens = cu.data();
  p.query.qPositions = positions.data();
  p.query.totalQ = totalQ;
  p.query.maxQSeqLen = c.qLen;
  p.query.numQHeads = c.hq;
  p.kv.pool = pool.data();
  p.kv.pageTable = table.data();
  p.kv.numPages = numPages;
  p.kv.maxPagesPerSeq = maxPages;
  p.kv.numKVHeads = c.hkv;
  p.kvLengths = c.kvLens.data();
  p.mask = c.mask;
  p.packedMask = packed.empty() ? nullptr : packed.data();
  p.slidingWindow = c.window;
  p.batchSize = batch;
  p.headDim = c.dim;
  p.scale = 1.0f / std::sqrt(float(c.dim));
  p.dtype = dtype_of<T>;
  ref::pagedAttention(p);
  want.resize(size_t(totalQ) * c.hq * c.dim);

  test::DeviceArray<T> dQ(q), dPool(pool), dOut(q.size());
  test::DeviceArray<int32_t> dCu(cu), dPos(positions), dTable(table), dKv(c.kvLens),
      dPacked(packed.empty() ? std::vector<int32_t>{0} : packed);
  p.query.q = dQ.get();
  p.query.out = dOut.get();
  p.query.cuQSeqLens = dCu.get();
  p.query.qPositions = dPos.get();
  p.kv.pool = dPool.get();
  p.kv.pageTable = dTable.get();
  p.kvLengths = dKv.get();
  p.packedMask = packed.empty() ? nullptr : dPacked.get();
  p.maxKvLength = c.maxKv;

  // The start-up size must suffice (rows in no sequence pad totalQ: maxTotalQ covers them).
  const int64_t plannedBytes = kernel::pagedAttentionWorkspaceBytes(
      batch, c.qLen, c.hq, c.hkv, c.dim, c.maxKv, c.extraRows > 0 ? totalQ : 0);
  const int64_t forcedBytes = int64_t{64} * totalQ * c.hq * (c.dim + 2) * 4;
  test::DeviceArray<float> ws = workspaceFor(std::max(plannedBytes, forcedBytes));
  p.workspace = ws.get();
  p.workspaceBytes = std::max<int64_t>(plannedBytes, 16);
  const kernel::PagedAttentionPlan plan = kernel::planPagedAttention(p);
  ASSERT_TRUE(plan.splitKv) << plan.reason;
  if (c.rowTiles > 0) {
    // Prefill: the wgmma kernel's row tiles; verify: the two-tile variant where one tile per
    // CTA would need two waves.
    const int32_t defaultRt =
        c.qLen > kernel::kSplitKvMaxQSeqLen ? c.rowTiles : defaultVerifyRowTiles(p, c.rowTiles);
    EXPECT_EQ(plan.rowTiles, defaultRt);
    EXPECT_EQ(kernel::planPagedAttention(p, 0, 2).rowTiles, c.rowTiles);
    EXPECT_EQ(kernel::planPagedAttention(p, 0, 1).rowTiles, 1);
    // The planned prefill call (and the rowTiles-2 run below) is the wgmma kernel's
    // (paged_attention_prefill.h).
    if (c.qLen > kernel::kSplitKvMaxQSeqLen && c.mask != kernel::AttentionMask::kPackedTree) {
      const kernel::PagedAttentionPlan two = kernel::planPagedAttention(p, 0, 2);
      EXPECT_EQ(kernel::detail::prefillWgmmaApplies(p, two), c.dim == 128 && two.numSplits == 1);
    }
  }
  // 12 and 24 splits take the combine's 16- and 32-split batches on decode rows, 64 its batches
  // one after another.
  for (int32_t forced : {0, 1, 2, 3, 7, 12, 24, 64}) {
    // Forced counts run with the plan's rowTiles (a prefill call with more than one split takes
    // the split-KV kernel); with c.rowTiles the planned count runs again with rowTiles 1 and 2
    // (maxRowTiles).
    for (const int32_t rt :
         c.rowTiles > 0 && forced == 0 ? std::vector<int32_t>{0, 1, 2} : std::vector<int32_t>{0}) {
      SCOPED_TRACE(::testing::Message()
                   << "splits " << (forced ? forced : plan.numSplits)
                   << (forced ? " (forced)" : " (planned)") << " maxRowTiles " << rt);
      dOut.poison();
      if (forced == 0 && rt == 0) {
        kernel::launchPagedAttention(p, nullptr);
      } else {
        kernel::PagedAttentionParams pf = p;
        pf.workspaceBytes = forcedBytes;
        kernel::launchPagedAttentionSplitKv(pf, forced ? forced : plan.numSplits, nullptr, rt);
      }
      std::vector<T> got = dOut.download();
      got.resize(want.size());
      expectSplitClose(got, want, zeroRow, int64_t{c.hq} * c.dim);
    }
  }
  // The combine letting the next kernel in after its stores (nextFillsSms) gives the same output.
  SCOPED_TRACE("nextFillsSms");
  kernel::PagedAttentionParams late = p;
  late.nextFillsSms = true;
  dOut.poison();
  kernel::launchPagedAttention(late, nullptr);
  std::vector<T> got = dOut.download();
  got.resize(want.size());
  expectSplitClose(got, want, zeroRow, int64_t{c.hq} * c.dim);
}

// runSplit in the storage type the case list gives (the lists alternate bf16 and f16).
void runSplitIn(DType t, const SplitCase& c, std::mt19937& rng) {
  if (t == DType::kBF16) {
    runSplit<bf16>(c, rng);
  } else {
    runSplit<fp16>(c, rng);
  }
}

TEST(PagedAttentionGpu, SplitKvDecodeAndVerifyShapes) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(31);
  const int32_t dims[] = {64, 128, 256};
  int n = 0;
  for (int32_t ctx : {1, 127, 128, 129, 1000, 5000}) {
    for (int32_t batch : {1, 4}) {
      for (int32_t qLen : {1, 16}) {
        ++n;
        SplitCase c;
        c.hkv = 2;
        c.hq = c.hkv * (n % 2 ? 4 : 8);
        c.dim = dims[n % 3];
        c.qLen = qLen;
        c.maxKv = ctx + 300;  // every kv length below the bound: splits past it exit early
        c.kvLens = {ctx};
        if (batch == 4) c.kvLens = {ctx, std::max(1, ctx / 2), 1, std::max(1, ctx - 1)};
        runSplitIn(n % 2 ? DType::kBF16 : DType::kF16, c, rng);
      }
    }
  }
}

TEST(PagedAttentionGpu, SplitKvMasksAndEdges) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(37);
  SplitCase c;
  c.hq = 16;
  c.hkv = 4;
  c.dim = 128;
  // Packed tree (verify of 16) and bidirectional (DFlash proposal block), with padding rows.
  c.kvLens = {700, 300, 16, 1000};
  c.qLen = 16;
  c.maxKv = 1024;
  c.padRows = true;
  for (AttentionMask mask : {AttentionMask::kPackedTree, AttentionMask::kBidirectional}) {
    c.mask = mask;
    runSplit<bf16>(c, rng);
    runSplit<fp16>(c, rng);
  }
  // Sliding windows (pages before the window released), decode and verify, GQA 8.
  c.mask = AttentionMask::kCausal;
  c.hq = 16;
  c.hkv = 2;
  c.padRows = false;
  for (int32_t window : {7, 130, 600}) {
    for (int32_t qLen : {1, 16}) {
      c.window = window;
      c.qLen = qLen;
      c.dim = window == 130 ? 64 : 256;
      runSplit<bf16>(c, rng);
    }
  }
  c.window = 0;
  // Rows in no sequence after the last one; unmapped / out-of-range page ids; tree + window.
  c.dim = 128;
  c.qLen = 16;
  c.extraRows = 5;
  c.badPages = true;
  runSplit<bf16>(c, rng);
  c.qLen = 1;
  runSplit<fp16>(c, rng);
  c.mask = AttentionMask::kPackedTree;
  c.qLen = 16;
  c.window = 40;
  runSplit<bf16>(c, rng);
  // GQA groups 1 and 3 (SmolLM2: 9 q / 3 kv heads, D 64) and 16; kv lengths above the bound
  // maxKvLength (a wrong bound only changes the fill, never the result).
  c = SplitCase{};
  c.kvLens = {2000, 129, 1};
  c.maxKv = 1500;
  for (int32_t g : {1, 3, 16}) {
    c.hkv = 3;
    c.hq = 3 * g;
    c.dim = 64;
    for (int32_t qLen : {1, 16}) {
      c.qLen = qLen;
      runSplit<bf16>(c, rng);
    }
  }
}

// Prefill of the wgmma kernel (paged_attention_prefill.h; the plan's rowTiles 2 at warpsM 4: D 128,
// at least 128 packed rows per sequence): 300-600 rows per sequence, batch 2 with different
// lengths (one with a cached prefix before its rows, one without), GQA 4 and 8, causal and sliding
// windows (pages before the window released), bf16 and f16, shuffled pages; then padding rows,
// rows in no sequence and unmapped / out-of-range pages; a bidirectional block. Each case checks
// that the plan takes rowTiles 2 and runs the planned call, the split-KV kernel with rowTiles 1,
// and split counts 1-64 (more than one split: the split-KV kernel's fp32 partials), all against
// the CPU reference.
TEST(PagedAttentionGpu, PrefillRowTilesMatchReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(43);
  struct P {
    int32_t hq, hkv, qLen, window;
    std::vector<int32_t> kvLens;
  };
  int n = 0;
  for (const P& x : {
           P{16, 4, 600, 0, {800, 450}},     // GQA 4: 2 x 4 x 19 = 152 CTAs of 128 rows
           P{16, 2, 600, 0, {600, 517}},     // GQA 8: 2 x 2 x 38 = 152
           P{32, 8, 400, 0, {1000, 333}},    // GQA 4, 8 KV heads: 2 x 8 x 13 = 208; 600-key prefix
           P{16, 4, 600, 257, {1100, 600}},  // sliding windows: a row block's tiles start inside
           P{16, 2, 560, 100, {1200, 560}},  //   the sequence; pages 0 (W 257) and 0-3 (W 100) of
                                             //   sequence 0 released; GQA 8: 140 CTAs
       }) {
    SplitCase c;
    c.hq = x.hq;
    c.hkv = x.hkv;
    c.dim = 128;
    c.qLen = x.qLen;
    c.kvLens = x.kvLens;
    c.window = x.window;
    c.maxKv = *std::max_element(x.kvLens.begin(), x.kvLens.end());
    c.rowTiles = 2;
    runSplitIn(n++ % 2 == 0 ? DType::kBF16 : DType::kF16, c, rng);
  }
  // Padding rows, rows after the last sequence, unmapped and out-of-range page ids.
  SplitCase c;
  c.hq = 16;
  c.hkv = 4;
  c.dim = 128;
  c.qLen = 600;
  c.kvLens = {700, 600};
  c.maxKv = 1000;  // above every kv length
  c.padRows = true;
  c.extraRows = 3;
  c.badPages = true;
  c.rowTiles = 2;
  runSplit<bf16>(c, rng);
  // A bidirectional block of 600 rows (every tile of a warp unmasked but the last, partial one).
  c = SplitCase{};
  c.mask = AttentionMask::kBidirectional;
  c.hq = 16;
  c.hkv = 2;
  c.dim = 128;
  c.qLen = 600;
  c.kvLens = {650, 600};
  c.maxKv = 650;
  c.rowTiles = 2;
  runSplit<fp16>(c, rng);
}

// The batch-1 verify variant (paged_attention_split.h: two 16-row tiles per CTA at warpsM 1,
// D 128) against the CPU reference: 2-16 rows at GQA 2 / 4 / 8 (one, two, three and more tiles,
// odd tile counts leaving the last CTA one tile of real rows), short and long contexts (one
// split; 16 splits at 4k; kv lengths below the bound), causal, packed tree, bidirectional and a
// sliding window, a padding row, rows in no sequence and unmapped / out-of-range pages. Each
// case checks the plan (rowTiles 2 by default, 1 with maxRowTiles 1) and runs rowTiles 1 and 2
// and forced split counts 1-64.
TEST(PagedAttentionGpu, VerifyRowTilesMatchReference) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(47);
  struct V {
    int32_t hq, hkv, qLen, ctx, maxKv;
  };
  int n = 0;
  for (const V& x : {
           V{32, 8, 16, 4096, 4096},  // Qwen3-8B: 4 tiles, 2 CTAs per (head, split), 16 splits
           V{32, 8, 16, 40, 300},     //   short context: the rows start at key 24
           V{32, 8, 9, 3000, 4096},   //   36 packed rows: 3 tiles (odd)
           V{32, 8, 5, 700, 1000},    //   20 rows: 2 tiles, one CTA
           V{32, 8, 4, 700, 1000},    //   16 rows: 1 tile (the decode kernel)
           V{16, 8, 16, 4096, 4096},  // GQA 2: 32 rows, 2 tiles
           V{16, 8, 9, 129, 200},     //   18 rows: 2 tiles, one split
           V{64, 8, 16, 5000, 8192},  // GQA 8: 8 tiles, 4 CTAs
           V{64, 8, 5, 1000, 1024},   //   40 rows: 3 tiles
           V{24, 8, 11, 2000, 4096},  // GQA 3: 33 rows: 3 tiles, one real row in the last
       }) {
    SplitCase c;
    c.hq = x.hq;
    c.hkv = x.hkv;
    c.dim = 128;
    c.qLen = x.qLen;
    c.kvLens = {x.ctx};
    c.maxKv = x.maxKv;
    c.rowTiles = (x.qLen * (x.hq / x.hkv) + 15) / 16 >= 2 ? 2 : 1;
    runSplitIn(n++ % 2 == 0 ? DType::kBF16 : DType::kF16, c, rng);
  }
  // Masks and edges on the 16-row Qwen3-8B-shaped verify (4 tiles).
  SplitCase c;
  c.hq = 32;
  c.hkv = 8;
  c.dim = 128;
  c.qLen = 16;
  c.kvLens = {1500};
  c.maxKv = 2048;
  c.rowTiles = 2;
  for (AttentionMask mask : {AttentionMask::kPackedTree, AttentionMask::kBidirectional}) {
    c.mask = mask;
    runSplit<bf16>(c, rng);
    runSplit<fp16>(c, rng);
  }
  c.mask = AttentionMask::kCausal;
  c.window = 300;  // pages before the window released
  runSplit<bf16>(c, rng);
  c.mask = AttentionMask::kPackedTree;  // tree + window
  c.window = 100;
  runSplit<fp16>(c, rng);
  c.mask = AttentionMask::kCausal;
  c.window = 0;
  c.padRow = 6;     // a padding row inside the block
  c.extraRows = 5;  // rows in no sequence after it
  c.badPages = true;
  c.maxKv = 1500;
  runSplit<bf16>(c, rng);
}

// Row invariance (paged_attention.h, "Split boundaries"): at batch 1, a verify of `rows` causal
// rows gives, row for row, the same bits as `rows` one-row decode calls at those positions with
// the same K/V and key bound. This is what makes greedy speculative decoding equal plain greedy
// decoding on the GPU. The verify runs with the default plan (rowTiles 2 at D 128 where the
// packed rows need two tiles or more, the verify variant) and with rowTiles 1 and 2 forced
// (maxRowTiles, the planned split count); every one must equal the decode rows bit for bit and
// (the default) the CPU reference. `tree`: the verify takes a packed-tree mask whose bits are the
// causal chain (row i sees block keys 0..i), which must give the causal rows' bits too.
// Contexts that cross split boundaries inside the block, GQA 2 / 3 / 4 / 8, a sliding window.
template <typename T>
void expectVerifyRowsEqualDecodeRows(int32_t hq, int32_t hkv, int32_t dim, int32_t window,
                                     int32_t maxKv, const std::vector<int32_t>& kvEnds,
                                     std::mt19937& rng, int32_t rows = 16, bool tree = false) {
  const int32_t batch = int32_t(kvEnds.size());
  SCOPED_TRACE(::testing::Message()
               << "Hq " << hq << " Hkv " << hkv << " D " << dim << " W " << window << " maxKv "
               << maxKv << " kv0 " << kvEnds[0] << " rows " << rows << (tree ? " tree" : "") << " "
               << dtype_name(dtype_of<T>));
  const int32_t maxPages = (maxKv + kPage - 1) / kPage;
  const int32_t numPages = batch * maxPages;
  std::vector<int32_t> ids(size_t(2) * numPages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.begin() + numPages, rng);
  std::shuffle(ids.begin() + numPages, ids.end(), rng);
  std::vector<int32_t> table(size_t(batch) * 2 * maxPages);
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t lp = 0; lp < maxPages; ++lp) {
      table[size_t(b) * 2 * maxPages + lp] = ids[size_t(b) * maxPages + lp];
      table[size_t(b) * 2 * maxPages + maxPages + lp] = ids[numPages + size_t(b) * maxPages + lp];
    }
  }
  std::vector<T> q(size_t(batch) * rows * hq * dim), pool(size_t(2) * numPages * kPage * hkv * dim);
  fill(q, rng, -3.0f, 3.0f);
  fill(pool, rng, -1.0f, 1.0f);
  const size_t rowElems = size_t(hq) * dim;
  test::DeviceArray<T> dQ(q), dPool(pool), dOut(q.size()), dQ1(batch * rowElems),
      dOut1(batch * rowElems);
  test::DeviceArray<int32_t> dTable(table);
  const int64_t wsBytes = kernel::pagedAttentionWorkspaceBytes(batch, rows, hq, hkv, dim, maxKv);
  test::DeviceArray<float> ws = workspaceFor(wsBytes);
  // The causal chain as tree bits: row i of a block sees block keys 0..i.
  std::vector<int32_t> chain(size_t(batch) * rows);
  for (size_t r = 0; r < chain.size(); ++r) {
    chain[r] = int32_t(uint32_t(uint64_t{2} << (r % size_t(rows))) - 1u);
  }
  test::DeviceArray<int32_t> dChain(chain);

  auto params = [&](const void* qp, void* out, const int32_t* cu, const int32_t* pos,
                    const int32_t* kv, int32_t qLen) {
    kernel::PagedAttentionParams p;
    p.query = {.q = qp,
               .out = out,
               .cuQSeqLens = cu,
               .qPositions = pos,
               .totalQ = batch * qLen,
               .maxQSeqLen = qLen,
               .numQHeads = hq};
    p.kv = {.pool = dPool.get(),
            .pageTable = dTable.get(),
            .numPages = numPages,
            .maxPagesPerSeq = maxPages,
            .numKVHeads = hkv};
    p.kvLengths = kv;
    p.slidingWindow = window;
    p.batchSize = batch;
    p.headDim = dim;
    p.scale = 1.0f / std::sqrt(float(dim));
    p.dtype = dtype_of<T>;
    p.maxKvLength = maxKv;
    p.workspace = ws.get();
    p.workspaceBytes = std::max<int64_t>(wsBytes, 16);
    return p;
  };
  // The verify: rows kv_end - rows ... kv_end - 1 of every sequence.
  std::vector<int32_t> cu = {0}, pos, cu1 = {0};
  for (int32_t b = 0; b < batch; ++b) {
    cu.push_back(cu.back() + rows);
    cu1.push_back(b + 1);
    for (int32_t i = 0; i < rows; ++i) pos.push_back(kvEnds[b] - rows + i);
  }
  test::DeviceArray<int32_t> dCu(cu), dPos(pos), dKv(kvEnds), dCu1(cu1);
  test::DeviceArray<int32_t> dPos1{static_cast<size_t>(batch)}, dKv1{static_cast<size_t>(batch)};
  kernel::PagedAttentionParams pv =
      params(dQ.get(), dOut.get(), dCu.get(), dPos.get(), dKv.get(), rows);
  if (tree) {
    pv.mask = AttentionMask::kPackedTree;
    pv.packedMask = dChain.get();
  }
  const kernel::PagedAttentionPlan plan = kernel::planPagedAttention(pv);
  ASSERT_TRUE(plan.splitKv) << plan.reason;
  // The plan: two row tiles per CTA at warpsM 1 where the variant is built (D 128) and the
  // packed rows need two tiles; one tile per CTA with maxRowTiles 1 (decodeKernel).
  const int32_t tiles = (rows * (hq / hkv) + 15) / 16;
  const int32_t wantRt = batch == 1 && dim == 128 && tiles >= 2 ? 2 : 1;
  const kernel::PagedAttentionPlan plan2 = kernel::planPagedAttention(pv, 0, 2);
  const kernel::PagedAttentionPlan plan1 = kernel::planPagedAttention(pv, 0, 1);
  EXPECT_EQ(plan2.rowTiles, wantRt);
  EXPECT_EQ(plan.rowTiles, defaultVerifyRowTiles(pv, wantRt));
  EXPECT_EQ(plan1.rowTiles, 1);
  if (batch == 1) {
    EXPECT_EQ(plan2.warpsM, 1);
    EXPECT_EQ(plan1.warpsM, 1);
    EXPECT_EQ(plan2.rowBlocks, (tiles + wantRt - 1) / wantRt);
    EXPECT_EQ(plan1.rowBlocks, tiles);
  }
  EXPECT_EQ(plan1.numSplits, plan2.numSplits);
  EXPECT_EQ(plan1.tilesPerSplit, plan2.tilesPerSplit);
  // The forced runs pass the planned split count; it must give the planned boundaries.
  const kernel::PagedAttentionPlan forced = kernel::planPagedAttention(pv, plan2.numSplits, 2);
  ASSERT_EQ(forced.tilesPerSplit, plan2.tilesPerSplit) << "pick a key bound whose forced split "
                                                          "count keeps the planned boundaries";
  // Default plan, then rowTiles 1 and 2 forced.
  std::vector<std::vector<T>> verify;
  for (const int32_t rt : {0, 1, 2}) {
    dOut.poison();
    if (rt == 0) {
      kernel::launchPagedAttention(pv, nullptr);
    } else {
      kernel::launchPagedAttentionSplitKv(pv, plan2.numSplits, nullptr, rt);
    }
    verify.push_back(dOut.download());
  }

  // The default plan's verify against the CPU reference (the split-KV tolerance).
  {
    std::vector<T> want(q.size());
    std::memset(want.data(), test::kPoisonByte, want.size() * sizeof(T));
    kernel::PagedAttentionParams ph = pv;
    ph.query.q = q.data();
    ph.query.out = want.data();
    ph.query.cuQSeqLens = cu.data();
    ph.query.qPositions = pos.data();
    ph.kv.pool = pool.data();
    ph.kv.pageTable = table.data();
    ph.kvLengths = kvEnds.data();
    ph.packedMask = tree ? chain.data() : nullptr;
    ph.workspace = nullptr;
    ph.workspaceBytes = 0;
    ph.maxKvLength = 0;
    ref::pagedAttention(ph);
    expectSplitClose(verify[0], want, std::vector<bool>(size_t(batch) * rows, false),
                     int64_t{hq} * dim);
  }

  size_t bad = 0;
  for (int32_t i = 0; i < rows; ++i) {
    std::vector<T> q1(size_t(batch) * rowElems);
    std::vector<int32_t> pos1, kv1;
    for (int32_t b = 0; b < batch; ++b) {
      std::copy_n(q.begin() + (size_t(b) * rows + i) * rowElems, rowElems,
                  q1.begin() + b * rowElems);
      pos1.push_back(kvEnds[b] - rows + i);
      kv1.push_back(kvEnds[b] - rows + i + 1);
    }
    dQ1.upload(q1);
    dPos1.upload(pos1);
    dKv1.upload(kv1);
    dOut1.poison();
    kernel::launchPagedAttention(
        params(dQ1.get(), dOut1.get(), dCu1.get(), dPos1.get(), dKv1.get(), 1), nullptr);
    const std::vector<T> decode = dOut1.download();
    for (int32_t v = 0; v < 3; ++v) {
      for (int32_t b = 0; b < batch; ++b) {
        for (size_t e = 0; e < rowElems; ++e) {
          const T& want = decode[b * rowElems + e];
          const T& got = verify[v][(size_t(b) * rows + i) * rowElems + e];
          if (!same_bits(got, want) && ++bad <= 5) {
            ADD_FAILURE() << (v == 0   ? "plan"
                              : v == 1 ? "rowTiles 1"
                                       : "rowTiles 2")
                          << ": sequence " << b << " row " << i << " element " << e << ": verify "
                          << to_d(got) << " decode " << to_d(want);
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << bad << " elements differ between the verify and the decode rows";
}

TEST(PagedAttentionGpu, VerifyRowsEqualDecodeRowsBitForBit) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(41);
  // Qwen3-8B heads, 4k bound (4 tiles = 256 keys per split): blocks across 256 and 512 keys,
  // inside one split, at the end of the bound.
  for (const int32_t end : {16, 265, 520, 3000, 4096}) {
    expectVerifyRowsEqualDecodeRows<bf16>(32, 8, 128, 0, 4096, {end}, rng);
  }
  expectVerifyRowsEqualDecodeRows<fp16>(32, 8, 128, 0, 4096, {700}, rng);
  // The verify variant's row counts (D 128): GQA 4 with 2-16 rows (1, 2, 3 and 4 tiles: 5, 9 and
  // 13 rows leave the last CTA's second tile partly or wholly without real rows), GQA 2 (up to
  // 2 tiles), GQA 8 (3 and 8 tiles) and GQA 3 (33 rows: 3 tiles), at 4,096 keys (16 splits)
  // and short contexts (one or a few splits), bf16 and f16.
  for (const int32_t rows : {2, 4, 5, 8, 9, 12, 13, 16}) {
    expectVerifyRowsEqualDecodeRows<bf16>(32, 8, 128, 0, 4096, {4096 - rows % 3}, rng, rows);
    expectVerifyRowsEqualDecodeRows<fp16>(32, 8, 128, 0, 300, {20 + 17 * rows}, rng, rows);
  }
  for (const int32_t rows : {3, 8, 9, 16}) {
    expectVerifyRowsEqualDecodeRows<bf16>(16, 8, 128, 0, 4096, {3000 + rows}, rng, rows);
    expectVerifyRowsEqualDecodeRows<fp16>(16, 8, 128, 0, 200, {rows + 1}, rng, rows);
  }
  expectVerifyRowsEqualDecodeRows<bf16>(64, 8, 128, 0, 4096, {4000}, rng, 5);
  expectVerifyRowsEqualDecodeRows<bf16>(64, 8, 128, 0, 4096, {2500}, rng, 16);
  expectVerifyRowsEqualDecodeRows<fp16>(24, 8, 128, 0, 4096, {1111}, rng, 11);
  // Packed-tree verify (DFlash / EAGLE tree verify) with the causal chain's bits, and a sliding
  // window at D 128.
  expectVerifyRowsEqualDecodeRows<bf16>(32, 8, 128, 0, 4096, {4096}, rng, 16, true);
  expectVerifyRowsEqualDecodeRows<fp16>(16, 8, 128, 0, 300, {150}, rng, 9, true);
  expectVerifyRowsEqualDecodeRows<bf16>(32, 8, 128, 300, 4096, {1000}, rng);
  // SmolLM2 heads (9 q / 3 kv, D 64: 48 packed verify rows, 3 row blocks), 8k bound.
  expectVerifyRowsEqualDecodeRows<bf16>(9, 3, 64, 0, 8192, {1030}, rng);
  expectVerifyRowsEqualDecodeRows<bf16>(9, 3, 64, 0, 8192, {8000}, rng);
  // GQA 8 with a sliding window (fixed boundaries offset by the window's start), D 256.
  expectVerifyRowsEqualDecodeRows<bf16>(16, 2, 256, 300, 4096, {1000}, rng);
  expectVerifyRowsEqualDecodeRows<bf16>(16, 2, 256, 300, 4096, {2100}, rng);
}

}  // namespace
}  // namespace es
