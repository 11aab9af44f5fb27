// CPU reference of paged attention (kernels/paged_attention.h), blocked like flash attention so
// that a long prefill stays cheap: fp32 scores, a softmax with a running max (online softmax) and
// the output rounded once to dtype.
//
// The work is one task per (sequence, KV head, tile of up to kRowTile consecutive query rows).
// A task walks the keys in tiles of kKeyTile (tiles start at multiples of kKeyTile, so a tile
// lies inside one page); each tile's K (transposed) and V are gathered from the pool into
// contiguous fp32 buffers once and used by every query vector of the task: its rows times the
// KV head's GQA query heads. Per query vector and tile: scores for the tile's keys, the visible
// ones folded into the running max m, sum l and unnormalised output acc:
//   m' = max(m, max_j s_j),  c = exp(m - m'),  p_j = exp(s_j - m'),
//   l' = c * l + sum_j p_j,  acc' = c * acc + sum_j p_j * v_j,  out = acc / l (0 if no key).
// A tile none of whose keys a query sees leaves its state untouched, and tiles are fixed by key
// position, so a query row's output depends only on its own q, position and mask row: a decode
// row equals the same row inside a prefill bit for bit.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "common/kv_page.h"
#include "kernels/paged_attention.h"
#include "ref/forward_ref_util.h"

namespace es::ref {
namespace {

constexpr int32_t kPage = kv::kTokensPerPage;
constexpr int32_t kKeyTile = 32;  // keys per tile; divides kPage
constexpr int32_t kRowTile = 32;  // query rows per task
static_assert(kPage % kKeyTile == 0);

// Eight fp32 or int32 lanes (GCC vector extensions): the softmax steps below are written on
// them, so they compile to vector instructions on every target.
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef float F8At __attribute__((vector_size(32), aligned(4), may_alias));
constexpr int32_t kLanes = 8;
static_assert(kKeyTile % kLanes == 0);

// exp(x) for x <= 0 (Cephes' expf: 2^k * e^r, |r| <= ln2 / 2, a degree-6 polynomial for e^r;
// about 1 ulp); 0 below -87 (e^-87 < 2^-125: nothing next to the tile's largest weight, 1) and
// for -inf (a masked key). exp(0) is exactly 1. Vectors by reference: a 32-byte vector passed
// or returned by value has a different ABI with and without AVX.
__attribute__((always_inline)) inline void expNonPositive(const F8& x, F8& out) {
  const I8 under = x < -87.0f;
  const F8 xc = under ? F8{} - 87.0f : x;
  const F8 fk = xc * 1.44269504088896341f + 0.5f;
  I8 ki = __builtin_convertvector(fk, I8);     // toward 0; fk in (-126, 1)
  ki += __builtin_convertvector(ki, F8) > fk;  // floor (a true comparison lane is -1)
  const F8 k = __builtin_convertvector(ki, F8);
  const F8 r = (xc - k * 0.693359375f) + k * 2.12194440e-4f;  // x - k ln2, ln2 in two parts
  F8 e = F8{} + 1.9875691500e-4f;
  e = e * r + 1.3981999507e-3f;
  e = e * r + 8.3334519073e-3f;
  e = e * r + 4.1665795894e-2f;
  e = e * r + 1.6666665459e-1f;
  e = e * r + 5.0000001201e-1f;
  e = e * (r * r) + r + 1.0f;
  const F8 pow2k = (F8)((ki + 127) << 23);  // 2^k (a vector cast reinterprets the bits)
  out = under ? F8{} : e * pow2k;
}

// The rows one task computes: `rows` consecutive query rows from row0, all of sequence b, for
// the query heads of KV head hk.
struct Task {
  int32_t b, hk, row0, rows;
  int64_t cost;  // visible-key bound x rows: tasks run largest first
};

// One tile's keys, gathered: kT[d][j] and v[j][d] in fp32 for the tile's n keys, zeros after.
template <int32_t kDim>
struct KeyTile {
  float kT[kDim][kKeyTile];
  float v[kKeyTile][kDim];
};

// Running softmax state of one query vector.
template <int32_t kDim>
struct QueryState {
  float q[kDim];
  float acc[kDim];
  float max, sum;
};

// Folds one gathered tile into a query's state. bias[j]: 0 where the query sees key j of the
// tile, -inf where it does not. A key the query does not see takes no part at all: its score is
// -inf whatever its K holds and its V is skipped, so a non-finite row the query cannot see (a
// later row of a verify block, a rejected draft's stale row) cannot reach its output, while a
// non-finite row it does see makes the output NaN, as the math says.
template <int32_t kDim>
__attribute__((always_inline)) inline void foldTile(QueryState<kDim>& st, const KeyTile<kDim>& t,
                                                    const float (&bias)[kKeyTile], float scale) {
  constexpr int32_t kKeyVecs = kKeyTile / kLanes, kDimVecs = kDim / kLanes;
  // Scores: s[j] = q . k_j, kLanes keys per vector.
  F8 s[kKeyVecs] = {};
  for (int32_t d = 0; d < kDim; ++d) {
    const F8 qd = F8{} + st.q[d];
    for (int32_t v = 0; v < kKeyVecs; ++v)
      s[v] += qd * *reinterpret_cast<const F8At*>(&t.kT[d][v * kLanes]);
  }
  // Scaled and masked, their max, and the weights p_j.
  F8 laneMax = F8{} + st.max;
  for (int32_t v = 0; v < kKeyVecs; ++v) {
    const F8 b = *reinterpret_cast<const F8At*>(bias + v * kLanes);
    s[v] = b == 0.0f ? s[v] * scale : b;
    laneMax = laneMax > s[v] ? laneMax : s[v];
  }
  float newMax = laneMax[0];
  for (int32_t l = 1; l < kLanes; ++l) newMax = std::max(newMax, laneMax[l]);
  // The state's rescale factor: 0 while it is empty (max -inf), 1 when the max did not move.
  F8 cv;
  expNonPositive(F8{} + (st.max - newMax), cv);
  float p[kKeyTile];
  F8 sumLanes = {};
  for (int32_t v = 0; v < kKeyVecs; ++v) {
    F8 pv;
    expNonPositive(s[v] - newMax, pv);
    *reinterpret_cast<F8At*>(p + v * kLanes) = pv;
    sumLanes += pv;
  }
  float tileSum = 0.0f;
  for (int32_t l = 0; l < kLanes; ++l) tileSum += sumLanes[l];
  st.max = newMax;
  st.sum = st.sum * cv[0] + tileSum;
  // acc = c * acc + sum_j p_j v_j, kLanes dimensions per vector.
  F8 acc[kDimVecs];
  for (int32_t v = 0; v < kDimVecs; ++v)
    acc[v] = *reinterpret_cast<const F8At*>(st.acc + v * kLanes) * cv;
  for (int32_t j = 0; j < kKeyTile; ++j) {
    if (bias[j] != 0.0f) continue;  // not seen: 0 * V would be NaN for an infinite V
    const F8 pj = F8{} + p[j];
    for (int32_t v = 0; v < kDimVecs; ++v)
      acc[v] += pj * *reinterpret_cast<const F8At*>(&t.v[j][v * kLanes]);
  }
  for (int32_t v = 0; v < kDimVecs; ++v) *reinterpret_cast<F8At*>(st.acc + v * kLanes) = acc[v];
}

// Everything a task reads, shared by all tasks of a call.
struct Call {
  const kernel::PagedAttentionParams& p;
  int32_t group, words;
};

// Key j (of sequence b, query row r at position pos >= 0) is visible by the mask and window
// rules; the page rules are checked per tile.
inline bool maskAllows(const Call& c, int32_t r, int32_t pos, int32_t past, int32_t j) {
  const auto& p = c.p;
  bool visible = true;
  switch (p.mask) {
    case kernel::AttentionMask::kCausal:
      visible = j <= pos;
      break;
    case kernel::AttentionMask::kPackedTree:
      if (j >= past) {
        const int32_t col = j - past;
        visible =
            col < c.words * 32 &&
            ((static_cast<uint32_t>(p.packedMask[int64_t{r} * c.words + col / 32]) >> (col % 32)) &
             1u);
      }
      break;
    case kernel::AttentionMask::kBidirectional:
      break;
  }
  if (p.slidingWindow > 0 && !(int64_t{j} > int64_t{pos} - p.slidingWindow)) visible = false;
  return visible;
}

template <int32_t kDim>
ES_X86_CLONES void runTask(const Call& c, const Task& task) {
  const auto& p = c.p;
  const auto& q = p.query;
  const auto& kv = p.kv;
  const int32_t hq = q.numQHeads, hkv = kv.numKVHeads;
  const int32_t qLen = q.cuQSeqLens[task.b + 1] - q.cuQSeqLens[task.b];
  const int32_t kvLen = p.kvLengths[task.b];
  const int32_t past = kvLen - qLen;
  const int32_t* tableRow = kv.pageTable + int64_t{task.b} * 2 * kv.maxPagesPerSeq;

  // The keys any row of the task can see: [lo, hi).
  int32_t minPos = std::numeric_limits<int32_t>::max(), maxPos = -1;
  for (int32_t i = 0; i < task.rows; ++i) {
    const int32_t pos = q.qPositions[task.row0 + i];
    if (pos < 0) continue;
    minPos = std::min(minPos, pos);
    maxPos = std::max(maxPos, pos);
  }
  int64_t hi = std::min<int64_t>(kvLen, int64_t{kv.maxPagesPerSeq} * kPage);
  if (p.mask == kernel::AttentionMask::kCausal) hi = std::min<int64_t>(hi, int64_t{maxPos} + 1);
  int64_t lo = 0;
  if (p.slidingWindow > 0 && maxPos >= 0) {
    lo = std::max<int64_t>(0, int64_t{minPos} - p.slidingWindow + 1);
  }

  std::vector<QueryState<kDim>> states(static_cast<size_t>(task.rows * c.group));
  for (int32_t i = 0; i < task.rows; ++i) {
    for (int32_t g = 0; g < c.group; ++g) {
      QueryState<kDim>& st = states[static_cast<size_t>(i * c.group + g)];
      const int32_t h = task.hk * c.group + g;
      loadFloats(q.q, p.dtype, (int64_t{task.row0 + i} * hq + h) * kDim, kDim, st.q);
      std::fill(st.acc, st.acc + kDim, 0.0f);
      st.max = -std::numeric_limits<float>::infinity();
      st.sum = 0.0f;
    }
  }

  auto tile = std::make_unique<KeyTile<kDim>>();
  float row[kDim];
  for (int64_t t0 = lo / kKeyTile * kKeyTile; t0 < hi; t0 += kKeyTile) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(kKeyTile, hi - t0));
    const int32_t lp = static_cast<int32_t>(t0 / kPage);
    const int32_t kp = tableRow[lp], vp = tableRow[kv.maxPagesPerSeq + lp];
    if (kp < 0 || kp >= kv.numPages) continue;  // unmapped page: its keys are masked
    if (vp < kv.numPages || int64_t{vp} >= 2 * int64_t{kv.numPages}) continue;
    for (int32_t j = 0; j < kKeyTile; ++j) {
      const int64_t slot = (t0 + j) % kPage;
      if (j < n) {
        loadFloats(kv.pool, p.dtype, ((int64_t{kp} * kPage + slot) * hkv + task.hk) * kDim, kDim,
                   row);
        loadFloats(kv.pool, p.dtype, ((int64_t{vp} * kPage + slot) * hkv + task.hk) * kDim, kDim,
                   tile->v[j]);
      } else {
        std::fill(row, row + kDim, 0.0f);
        std::fill(tile->v[j], tile->v[j] + kDim, 0.0f);
      }
      for (int32_t d = 0; d < kDim; ++d) tile->kT[d][j] = row[d];
    }
    for (int32_t i = 0; i < task.rows; ++i) {
      const int32_t r = task.row0 + i;
      const int32_t pos = q.qPositions[r];
      if (pos < 0) continue;
      float bias[kKeyTile];
      bool any = false;
      for (int32_t j = 0; j < kKeyTile; ++j) {
        const bool visible = j < n && maskAllows(c, r, pos, past, static_cast<int32_t>(t0 + j));
        bias[j] = visible ? 0.0f : -std::numeric_limits<float>::infinity();
        any = any || visible;
      }
      if (!any) continue;
      for (int32_t g = 0; g < c.group; ++g) {
        foldTile(states[static_cast<size_t>(i * c.group + g)], *tile, bias, p.scale);
      }
    }
  }

  for (int32_t i = 0; i < task.rows; ++i) {
    const bool padding = q.qPositions[task.row0 + i] < 0;
    for (int32_t g = 0; g < c.group; ++g) {
      const QueryState<kDim>& st = states[static_cast<size_t>(i * c.group + g)];
      const int64_t first = (int64_t{task.row0 + i} * hq + task.hk * c.group + g) * kDim;
      const bool none = padding || !(st.sum > 0.0f);
      for (int32_t d = 0; d < kDim; ++d) {
        storeFromFloat(q.out, p.dtype, first + d, none ? 0.0f : st.acc[d] / st.sum);
      }
    }
  }
}

template <int32_t kDim>
void runTasks(const Call& c, const std::vector<Task>& tasks) {
  int64_t work = 0;
  for (const Task& t : tasks) work += t.cost;
  auto one = [&](int64_t i) { runTask<kDim>(c, tasks[static_cast<size_t>(i)]); };
  // Tasks are handed out one at a time (their costs differ: causal rows late in a prompt see
  // more keys); small calls run inline rather than waking the workers.
  constexpr int64_t kMinParallelWork = int64_t{1} << 17;
  if (work * c.group * kDim * 4 < kMinParallelWork) {
    for (size_t i = 0; i < tasks.size(); ++i) one(static_cast<int64_t>(i));
    return;
  }
  detail::WorkerPool::instance().run(static_cast<int64_t>(tasks.size()), one);
}

}  // namespace

void pagedAttention(const kernel::PagedAttentionParams& p) {
  if (!kernel::validate(p)) return;
  const auto& q = p.query;
  const Call c{.p = p, .group = q.numQHeads / p.kv.numKVHeads, .words = (q.maxQSeqLen + 31) / 32};

  // Owner of each row (-1: not inside any sequence, treated as padding).
  std::vector<int32_t> owner(static_cast<size_t>(q.totalQ), -1);
  for (int32_t b = 0; b < p.batchSize; ++b) {
    for (int32_t r = std::max(q.cuQSeqLens[b], 0); r < q.cuQSeqLens[b + 1] && r < q.totalQ; ++r) {
      owner[static_cast<size_t>(r)] = b;
    }
  }

  // Rows of no sequence get zeros here; the others are cut into tasks of consecutive rows of
  // one sequence.
  std::vector<Task> tasks;
  const int64_t rowElems = int64_t{q.numQHeads} * p.headDim;
  for (int32_t r = 0; r < q.totalQ;) {
    const int32_t b = owner[static_cast<size_t>(r)];
    if (b < 0) {
      for (int64_t i = 0; i < rowElems; ++i) storeFromFloat(q.out, p.dtype, r * rowElems + i, 0.0f);
      ++r;
      continue;
    }
    int32_t rows = 1;
    while (rows < kRowTile && r + rows < q.totalQ && owner[static_cast<size_t>(r + rows)] == b) {
      ++rows;
    }
    int32_t maxPos = -1;
    for (int32_t i = 0; i < rows; ++i) maxPos = std::max(maxPos, q.qPositions[r + i]);
    const int64_t keys = p.mask == kernel::AttentionMask::kCausal
                             ? std::min<int64_t>(p.kvLengths[b], int64_t{maxPos} + 1)
                             : p.kvLengths[b];
    for (int32_t hk = 0; hk < p.kv.numKVHeads; ++hk) {
      tasks.push_back({.b = b, .hk = hk, .row0 = r, .rows = rows, .cost = keys * rows});
    }
    r += rows;
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& a, const Task& b) { return a.cost > b.cost; });

  switch (p.headDim) {
    case 64:
      runTasks<64>(c, tasks);
      break;
    case 128:
      runTasks<128>(c, tasks);
      break;
    default:
      runTasks<256>(c, tasks);
      break;
  }
}

}  // namespace es::ref
