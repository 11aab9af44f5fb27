// GPU parity of launchPagedAttention with the CPU reference over random ragged batches: masks
// causal / packed tree (several mask words) / bidirectional, sliding windows (with released
// pages of -1 outside the window), GQA groups 1/2/3/4/8, head dims 64/128/256, f32/f16/bf16,
// kv lengths 127/128/129 and longer, padding rows, an empty sequence, scrambled page tables,
// poisoned output (every row, padding included, must be written); tolerance table in
// forward_ops_gpu_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"
#include "kv/page_geometry.h"
#include "forward_ops_gpu_test_util.h"

namespace es {
namespace {

using namespace fwdtest;
using kernel::AttentionMask;
constexpr int32_t kPage = kv::kTokensPerPage;

struct Case {
  AttentionMask mask;
  int32_t window, hq, hkv, dim, batch, max_q, max_kv;
};

template <typename T>
void run(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "mask " << int(c.mask) << " W " << c.window << " Hq "
                                    << c.hq << " Hkv " << c.hkv << " D " << c.dim << " B "
                                    << c.batch << " maxQ " << c.max_q << " maxKV " << c.max_kv
                                    << " " << dtype_name(dtype_of<T>));
  const int32_t max_pages = (c.max_kv + kPage - 1) / kPage;
  const int32_t num_pages = c.batch * max_pages + 3;
  const int32_t kv_choices[] = {127, 128, 129, 1, c.max_kv, 257, 64};
  std::vector<int32_t> q_lens, kv_lens, cu = {0}, positions;
  for (int32_t b = 0; b < c.batch; ++b) {
    int32_t kv = std::min(kv_choices[std::uniform_int_distribution<int>(0, 6)(rng)], c.max_kv);
    int32_t q = std::min(kv, std::uniform_int_distribution<int32_t>(1, c.max_q)(rng));
    if (b == 2) q = 0;  // an empty sequence (no rows); its kv length is irrelevant
    q_lens.push_back(q);
    kv_lens.push_back(std::max(kv, q));
    cu.push_back(cu.back() + q);
    for (int32_t i = 0; i < q; ++i) {
      const bool pad = q > 1 && i == q - 1 && (b % 2 == 1);
      positions.push_back(pad ? -1 : kv_lens.back() - q + i);
    }
  }
  const int32_t total_q = cu.back();
  const int32_t max_q = std::max(1, *std::max_element(q_lens.begin(), q_lens.end()));
  const int32_t words = (max_q + 31) / 32;

  std::vector<int32_t> k_ids(num_pages), v_ids(num_pages);
  std::iota(k_ids.begin(), k_ids.end(), 0);
  std::iota(v_ids.begin(), v_ids.end(), 0);
  std::shuffle(k_ids.begin(), k_ids.end(), rng);
  std::shuffle(v_ids.begin(), v_ids.end(), rng);
  std::vector<int32_t> table(size_t(c.batch) * 2 * max_pages);
  for (int32_t b = 0; b < c.batch; ++b) {
    for (int32_t lp = 0; lp < max_pages; ++lp) {
      int32_t k = k_ids[size_t(b) * max_pages + lp], v = v_ids[size_t(b) * max_pages + lp] + num_pages;
      // With a window, pages wholly before the window of the sequence's first row are released.
      if (c.window > 0 && q_lens[b] > 0) {
        const int32_t first_pos = kv_lens[b] - q_lens[b];
        if ((lp + 1) * kPage <= first_pos - c.window + 1) k = v = -1;
      }
      table[size_t(b) * 2 * max_pages + lp] = k;
      table[size_t(b) * 2 * max_pages + max_pages + lp] = v;
    }
  }
  std::vector<int32_t> packed;
  if (c.mask == AttentionMask::kPackedTree) {
    packed.resize(size_t(std::max(total_q, 1)) * words);
    for (auto& w : packed) w = int32_t(rng());
  }
  std::vector<T> q(size_t(std::max(total_q, 1)) * c.hq * c.dim);
  std::vector<T> pool(size_t(2) * num_pages * kPage * c.hkv * c.dim);
  fill(q, rng, -2.0f, 2.0f);
  fill(pool, rng, -1.0f, 1.0f);
  std::vector<T> want(q.size());
  std::memset(want.data(), test::kPoisonByte, want.size() * sizeof(T));

  kernel::PagedAttentionParams p;
  p.query.q = q.data();
  p.query.out = want.data();
  p.query.cuQSeqLens = cu.data();
  p.query.qPositions = positions.data();
  p.query.totalQ = total_q;
  p.query.maxQSeqLen = max_q;
  p.query.numQHeads = c.hq;
  p.kv.pool = pool.data();
  p.kv.pageTable = table.data();
  p.kv.numPages = num_pages;
  p.kv.maxPagesPerSeq = max_pages;
  p.kv.numKVHeads = c.hkv;
  p.kvLengths = kv_lens.data();
  p.mask = c.mask;
  p.packedMask = packed.empty() ? nullptr : packed.data();
  p.slidingWindow = c.window;
  p.batchSize = c.batch;
  p.headDim = c.dim;
  p.scale = 1.0f / std::sqrt(float(c.dim));
  p.dtype = dtype_of<T>;
  ref::pagedAttention(p);

  test::DeviceArray<T> d_q(q), d_pool(pool), d_out(want.size());
  test::DeviceArray<int32_t> d_cu(cu), d_pos(positions.empty() ? std::vector<int32_t>{-1} : positions),
      d_table(table), d_kv(kv_lens), d_packed(packed.empty() ? std::vector<int32_t>{0} : packed);
  p.query.q = d_q.get();
  p.query.out = d_out.get();
  p.query.cuQSeqLens = d_cu.get();
  p.query.qPositions = d_pos.get();
  p.kv.pool = d_pool.get();
  p.kv.pageTable = d_table.get();
  p.kvLengths = d_kv.get();
  p.packedMask = packed.empty() ? nullptr : d_packed.get();
  kernel::launchPagedAttention(p, nullptr);
  std::vector<T> got = d_out.download();
  got.resize(size_t(total_q) * c.hq * c.dim);
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
        run<float>(c, rng);
        run<bf16>(c, rng);
        run<fp16>(c, rng);
      }
    }
  }
}

TEST(PagedAttentionGpu, PrefillAndDecodeShapes) {
  ES_SKIP_IF_NO_GPU();
  std::mt19937 rng(29);
  // Prefill: long ragged prompts, causal. Decode: one row per sequence, long contexts.
  run<bf16>({AttentionMask::kCausal, 0, 9, 3, 64, 3, 260, 260}, rng);
  run<bf16>({AttentionMask::kCausal, 0, 32, 8, 128, 8, 1, 1000}, rng);
  run<fp16>({AttentionMask::kCausal, 0, 16, 2, 256, 5, 1, 600}, rng);
  run<float>({AttentionMask::kCausal, 64, 14, 2, 64, 4, 1, 700}, rng);
  // DFlash proposal block of 16 rows over long context.
  run<bf16>({AttentionMask::kBidirectional, 0, 16, 8, 128, 4, 16, 900}, rng);
}

}  // namespace
}  // namespace es
