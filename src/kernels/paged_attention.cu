// Paged attention, two kernels behind one launcher (paged_attention.h says which call takes which).
//
// Simple kernel: one CTA of kWarps warps per (query row, query head). Each warp walks the visible
// keys j = lo + warp, lo + warp + kWarps, ... (keys read through the page table; each lane owns
// D/32 consecutive dims, so a key row is one coalesced access), keeps an online softmax in fp32
// (running max, sum, weighted V), and the warps are merged through shared memory at the end.
// Masks, windows, unmapped pages and padding rows as paged_attention.h; the mask decision depends
// on the key only, so it is warp-uniform.
//
// Split-KV kernels (flash-decoding; shape constants in paged_attention_split.h): one CTA of 4
// warps per (sequence b, KV head, row block, split). Its rows are the packed (query row i, GQA
// head g) pairs m = i * group + g, 16 per tensor-core tile (mma.sync m16n8k16, fp32 accumulate),
// so each K/V row is read from memory once per KV head. Three entry kernels share one body
// (splitKvAttention) and its steps:
//   decodeKernel    one row tile per CTA, the 4 warps split each tile's keys (decode rows and
//                   batch-1 blocks of one tile per CTA);
//   verifyKernel    two row tiles per CTA with decodeKernel's per-row arithmetic (batch-1 verify
//                   at head dim 128 where one tile per CTA would need two waves);
//   rowBlockKernel  2 or 4 row tiles per CTA, one per warp row (batch > 1 blocks, and prefill
//                   that the wgmma kernel of paged_attention_prefill.cu does not take).
// Prologue: every row's visible key range [lo, hi) (causal bound, window) -> the CTA's union
// range, cut into 64-key tiles; the split takes the tiles of that range inside its fixed
// boundaries (paged_attention.h; a split outside the range gets none and writes a neutral
// partial). A row outside a tile's keys adds exact zeros there (its running max, sum and output
// do not change), so with warpsM = 1 (the 4 warps split every tile's keys the same way, whatever
// the row tiles per CTA) the other rows of a call never change a row's result.
// Main loop: a ring of 2-3 shared-memory stages filled by 16-byte cp.async (zero-filled outside
// the range; tiles on unmapped/out-of-range pages are not loaded and skipped), the page ids of the
// next tile prefetched into registers; per tile (attendTile) S = Q K^T, the per-row mask, an
// online softmax in the exp2 domain, O += P V with P rounded to the storage type. Epilogue
// (mergeWarpsAndWrite): the warps that split a tile's keys are merged through shared memory; with
// one split the CTA writes the normalised output, otherwise (max, sum, unnormalised O) partials
// for combineKernel, which is launched with programmatic dependent launch and merges the splits
// of each (row, head).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/kv_page.h"
#include "kernels/attention_math.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/forward_ops_device.cuh"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_prefill.h"
#include "kernels/paged_attention_rows.cuh"
#include "kernels/paged_attention_split.h"
#include "kernels/pdl.cuh"

namespace es::kernel {
namespace {

constexpr int kWarps = 4;
constexpr int32_t kPage = kv::kTokensPerPage;

struct Args {
  const void* q;
  void* out;
  const int32_t* cuQ;
  const int32_t* qPos;
  int32_t totalQ;
  int32_t words;
  int32_t hq;
  const void* pool;
  const int32_t* table;
  int32_t numPages, maxPages, hkv;
  const int32_t* kvLens;
  int32_t mask;
  const int32_t* packed;
  int32_t window;
  int32_t batch;
  float scale;
};

// The sequence that owns query row r: the largest b < batch with cuQ[b] <= r, -1 if none (the
// row is still outside it when r >= cuQ[b + 1], i.e. past every sequence).
__device__ __forceinline__ int32_t owningSequence(const int32_t* cuQ, int32_t batch, int32_t r) {
  int32_t lo = 0, hi = batch - 1, b = -1;
  while (lo <= hi) {
    const int32_t mid = (lo + hi) >> 1;
    if (cuQ[mid] <= r) {
      b = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return b;
}

template <typename T, int D, bool ALIGNED>
__global__ void __launch_bounds__(kWarps * 32) attentionKernel(Args a) {
  pdl::enter();
  constexpr int kEpt = D / 32;  // dims per lane
  __shared__ float sM[kWarps], sL[kWarps];
  __shared__ float sAcc[kWarps][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t r = blockIdx.x;
  const int32_t h = blockIdx.y;
  T* out = static_cast<T*>(a.out) + (int64_t{r} * a.hq + h) * D;

  const int32_t b = owningSequence(a.cuQ, a.batch, r);
  const int32_t pos = a.qPos[r];
  if (b < 0 || r >= a.cuQ[b + 1] || pos < 0) {
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = fwd::fromF<T>(0.0f);
    return;
  }
  const int32_t qLen = a.cuQ[b + 1] - a.cuQ[b];
  const int32_t kvLen = a.kvLens[b];
  const int32_t past = kvLen - qLen;
  const int32_t hk = h / (a.hq / a.hkv);

  float q[kEpt];
  fwd::loadSpan<T, kEpt, ALIGNED>(
      static_cast<const T*>(a.q) + (int64_t{r} * a.hq + h) * D + lane * kEpt, q);
  int64_t lo = 0, hi = kvLen;
  if (a.mask == static_cast<int32_t>(AttentionMask::kCausal)) hi = min(hi, int64_t{pos} + 1);
  if (a.window > 0) lo = max(lo, int64_t{pos} - a.window + 1);
  const bool tree = a.mask == static_cast<int32_t>(AttentionMask::kPackedTree);
  const int32_t* trow = a.table + int64_t{b} * 2 * a.maxPages;
  const int32_t* mrow = tree ? a.packed + int64_t{r} * a.words : nullptr;
  const T* pool = static_cast<const T*>(a.pool);

  float m = -INFINITY, l = 0.0f, acc[kEpt];
#pragma unroll
  for (int e = 0; e < kEpt; ++e) acc[e] = 0.0f;
  for (int64_t j64 = lo + warp; j64 < hi; j64 += kWarps) {
    const int32_t j = static_cast<int32_t>(j64);
    if (tree && j >= past) {
      const int32_t c = j - past;
      if (c >= a.words * 32) continue;
      if (((static_cast<uint32_t>(mrow[c >> 5]) >> (c & 31)) & 1u) == 0) continue;
    }
    const int32_t lp = j / kPage;
    if (lp >= a.maxPages) continue;
    const int32_t kp = trow[lp], vp = trow[a.maxPages + lp];
    if (!attn::pagePairValid(kp, vp, a.numPages)) continue;
    const int32_t slot = j - lp * kPage;
    float k[kEpt], v[kEpt];
    fwd::loadSpan<T, kEpt, ALIGNED>(
        pool + ((int64_t{kp} * kPage + slot) * a.hkv + hk) * D + lane * kEpt, k);
    fwd::loadSpan<T, kEpt, ALIGNED>(
        pool + ((int64_t{vp} * kPage + slot) * a.hkv + hk) * D + lane * kEpt, v);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kEpt; ++e) dot += q[e] * k[e];
    const float s = fwd::warpSum(dot) * a.scale;
    const float mNew = fmaxf(m, s);
    const float corr = expf(m - mNew);
    const float p = expf(s - mNew);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < kEpt; ++e) acc[e] = acc[e] * corr + p * v[e];
    m = mNew;
  }
  if (lane == 0) {
    sM[warp] = m;
    sL[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kEpt; ++e) sAcc[warp][lane * kEpt + e] = acc[e];
  __syncthreads();
  float mAll = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mAll = fmaxf(mAll, sM[w]);
  if (mAll == -INFINITY) {  // no visible key
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = fwd::fromF<T>(0.0f);
    return;
  }
  float weight[kWarps], denom = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = sM[w] == -INFINITY ? 0.0f : expf(sM[w] - mAll);
    denom += sL[w] * weight[w];
  }
  for (int32_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += sAcc[w][d] * weight[w];
    out[d] = fwd::fromF<T>(o / denom);
  }
}

template <typename T, int D>
void launch(const Args& a, bool aligned, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.totalQ), static_cast<unsigned>(a.hq));
  if (aligned) {
    pdl::launch(attentionKernel<T, D, true>, grid, dim3(kWarps * 32), 0, stream, a);
  } else {
    pdl::launch(attentionKernel<T, D, false>, grid, dim3(kWarps * 32), 0, stream, a);
  }
}

// ---- split-KV path ------------------------------------------------------------------------------
namespace sk = splitkv;

// One packed row of a split-KV CTA (shared memory).
struct RowInfo {
  int64_t rh;      // r * Hq + h of a row this CTA owns (q/out row-head index); -1: not its row
  int32_t lo, hi;  // visible keys [lo, hi) before the tree bits; hi <= lo: none (padding, ...)
  uint32_t word;   // kPackedTree: the row's mask word (bit c <-> key past + c)
  int32_t pad;
};
static_assert(sizeof(RowInfo) == 24, "kMiscBytes in paged_attention_split.h counts 24 bytes");

// SplitArgs::combineTrigger.
inline constexpr int32_t kTriggerAfterWait = 0, kTriggerFirst = 1, kTriggerLast = 2;

struct SplitArgs {
  const void* q;
  void* out;
  const int32_t* cuQ;
  const int32_t* qPos;
  int32_t totalQ, maxQ, hq, group, words;
  const void* pool;
  const int32_t* table;
  int32_t numPages, maxPages, hkv;
  const int32_t* kvLens;
  const int32_t* packed;
  int32_t mask, window, batch;
  float scaleLog2;  // scale * log2(e): the softmax runs in the exp2 domain
  int32_t splits, tilesPerSplit, rowBlocks;
  int32_t earlyReads;  // 1: metadata and page table read before the PDL wait (pdl.cuh)
  // When the combine kernel lets its dependent in: kTriggerAfterWait (pdl::enter),
  // kTriggerFirst (before its wait) or kTriggerLast (after its stores).
  int32_t combineTrigger;
  float* partO;    // [splits, totalQ, Hq, D] f32 unnormalised outputs (splits > 1)
  float2* partMl;  // [splits, totalQ, Hq] (running max in the exp2 domain, sum)
};

__device__ __forceinline__ uint32_t smemU32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d += a (16x16, row) * b (16x8, col), fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
using attn::exp2Ftz;
using attn::pack2;

// Compile-time shape of a split-KV kernel instance (paged_attention_split.h): WM warp rows of RT
// 16-row tiles each; the 4 / WM warps of a warp row split every 64-key tile's keys between them.
template <int D, int WM, int RT>
struct SplitShape {
  static constexpr int kWarpCols = 4 / WM;                    // warps sharing one warp row
  static constexpr int kWarpRowRows = 16 * RT;                // packed rows per warp row
  static constexpr int kCtaRows = kWarpRowRows * WM;          // packed rows per CTA
  static constexpr int kTileKeys = sk::kTileKeys;             // keys per K/V tile
  static constexpr int kWarpKeys = kTileKeys / kWarpCols;     // keys per warp and tile
  static constexpr int kScoreTiles = kWarpKeys / 8;           // S n-tiles per warp, row tile
  static constexpr int kRowChunks = D / 8;                    // 16-byte chunks per Q/K/V row
  static constexpr int kOutTiles = D / 8;                     // O n-tiles
  static constexpr int kStages = sk::stages(D, WM, RT);       // K/V ring depth
  static constexpr bool kQInRegisters = D <= 128 && RT == 1;  // else re-read from smem
  static constexpr int kMergeStride = D + 4;  // floats per row of the 4-warp merge buffer
  static_assert(sk::rowTilesBuilt(D, WM, RT));
  static_assert(RT * sk::mergeBytes(D) <= kStages * sk::kvStageBytes(D),
                "the merge buffers of all row tiles fit in the K/V ring");
  static_assert(kScoreTiles % 2 == 0 && kCtaRows <= sk::maxRowsPerCta(RT) &&
                kCtaRows <= sk::kThreads && (kTileKeys * kRowChunks) % sk::kThreads == 0);
  static_assert(kPage % kTileKeys == 0);
};

// The (sequence, KV head, row block, split) of this CTA. KV head fastest: the CTAs of one
// (sequence, split) read the same pages (each its 2*D bytes of every token row) at about the same
// time; then row blocks (same K/V, from L2), then splits.
struct SplitCta {
  int32_t seq, kvHead, rowBlock, split;
};
__device__ __forceinline__ SplitCta splitCtaOf(const SplitArgs& a) {
  int32_t bid = blockIdx.x;
  SplitCta c;
  c.kvHead = bid % a.hkv;
  bid /= a.hkv;
  c.rowBlock = bid % a.rowBlocks;
  bid /= a.rowBlocks;
  c.split = bid % a.splits;
  c.seq = bid / a.splits;
  return c;
}

// This split's 64-key tiles [first, end) of the CTA's rows' union key range `keys`: the tiles
// inside the fixed boundaries (s0 + split) * per ... (s0 + split + 1) * per (per =
// tilesPerSplit, s0 the first range the keys touch); the last split also takes any tiles past
// them. With one split under a causal mask this is the row block's causal bound: tiles past its
// last row's position are never loaded.
struct TileRange {
  int32_t first, end;
};
__device__ __forceinline__ TileRange splitTiles(attn::KeyRange keys, int32_t tilesPerSplit,
                                                int32_t split, int32_t splits) {
  constexpr int kTileKeys = sk::kTileKeys;
  TileRange r{0, 0};
  if (keys.hi > 0) {
    const int64_t tb = keys.lo / kTileKeys, te = (keys.hi - 1) / kTileKeys + 1, per = tilesPerSplit;
    const int64_t first = (tb / per + split) * per;
    r.first = static_cast<int32_t>(max(tb, first));
    r.end = static_cast<int32_t>(split == splits - 1 ? te : min(te, first + per));
  }
  return r;
}

// Loads 64-key K/V tiles of one (sequence, KV head) into a shared-memory stage: tile u holds keys
// [64 u, 64 u + 64), rows [key][16-byte chunk] with the chunk index XORed with (key & 7) so that
// the 8 rows of one ldmatrix hit 8 different bank groups.
// The pool geometry (maxPages, numPages) is read from the kernel's arguments where it is used.
template <typename T, int D>
struct KvTileLoader {
  const SplitArgs& a;
  const int32_t* tableRow;  // the sequence's page-table row: K ids, then V ids
  const T* pool;
  int64_t rowStride;  // elements per token row of the pool (all KV heads)
  int32_t kvHead;
  int32_t tileEnd;       // tiles >= tileEnd are not this CTA's
  int32_t keyLo, keyHi;  // keys outside [keyLo, keyHi) are zero-filled, never read

  // Page ids of tile u; false when u is not one of this CTA's tiles or its page is unmapped or
  // out of range (the tile is then neither loaded nor computed: its keys count as masked).
  __device__ __forceinline__ bool lookup(int32_t u, int32_t& kp, int32_t& vp) const {
    if (u >= tileEnd) return false;
    const int32_t lp = u / (kPage / sk::kTileKeys);
    if (lp >= a.maxPages) return false;
    kp = __ldg(tableRow + lp);
    vp = __ldg(tableRow + a.maxPages + lp);
    return attn::pagePairValid(kp, vp, a.numPages);
  }

  // Issues tile u's cp.async copies (K then V, each kTileKeys x D) into the stage at shared
  // address kStage, from pages kp and vp; every thread of the CTA takes its share.
  __device__ __forceinline__ void issue(int32_t u, uint32_t kStage, int32_t kp, int32_t vp) const {
    constexpr int kTileKeys = sk::kTileKeys, kRowChunks = D / 8;
    const int32_t key0 = u * kTileKeys;
    const int32_t slot0 = key0 % kPage;
    const uint32_t vStage = kStage + kTileKeys * D * static_cast<uint32_t>(sizeof(T));
    const T* kBase = pool + (int64_t{kp} * kPage + slot0) * rowStride + int64_t{kvHead} * D;
    const T* vBase = pool + (int64_t{vp} * kPage + slot0) * rowStride + int64_t{kvHead} * D;
#pragma unroll
    for (int it = 0; it < kTileKeys * kRowChunks / sk::kThreads; ++it) {
      const int idx = it * sk::kThreads + static_cast<int>(threadIdx.x);
      const int k = idx / kRowChunks, c = idx % kRowChunks;
      const int32_t j = key0 + k;
      const bool in = j >= keyLo && j < keyHi;  // outside: zeros (never NaN garbage in P*V)
      const uint32_t off = static_cast<uint32_t>((k * D + ((c ^ (k & 7)) << 3)) * sizeof(T));
      cpAsync16Shared(kStage + off, kBase + k * rowStride + c * 8, in ? 16 : 0);
      cpAsync16Shared(vStage + off, vBase + k * rowStride + c * 8, in ? 16 : 0);
    }
  }
};

// The visible key ranges [lo, hi) and tree words of this lane's rows (rows g and g + 8 of each
// row tile), in registers.
template <int RT>
struct LaneRows {
  int32_t lo[RT][2], hi[RT][2];
  uint32_t word[RT][2];
};

// One warp's running attention state: O accumulators (fp32 mma fragments, row tiles x D / 8
// n-tiles) and per row (g and g + 8 of each row tile) the running max in the exp2 domain and the
// running sum of this lane's columns.
template <int D, int RT>
struct WarpState {
  float o[RT][D / 8][4];
  float mRun[RT][2], lRun[RT][2];
};

// One K/V tile of the main loop for this warp's rows and its kWarpKeys-key slice of the tile:
// S = Q K^T on the tensor cores, the mask, the online softmax in the exp2 domain, O += P V.
// qFrags: Q's A fragments when kQInRegisters, else Q is re-read from sQ at rows qLaneRow.
template <typename T, int D, int WM, int RT>
__device__ __forceinline__ void attendTile(
    WarpState<D, RT>& w, const LaneRows<RT>& rows,
    const uint32_t (&qFrags)[D <= 128 && RT == 1 ? D / 16 : 1][4], const uint32_t (&qLaneRow)[RT],
    const T* sQ, uint32_t kStage, int32_t key0, int32_t treePast, const SplitArgs& a, int lane,
    int warpCol) {
  using S = SplitShape<D, WM, RT>;
  constexpr int kScoreTiles = S::kScoreTiles, kOutTiles = S::kOutTiles;
  const int tq = lane & 3;  // mma fragment column pair of this lane
  const uint32_t vStage = kStage + S::kTileKeys * D * static_cast<uint32_t>(sizeof(T));
  // S = Q K^T for this warp's RT x 16 rows x kWarpKeys keys.
  float s[RT][kScoreTiles][4];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n)
      s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[RT][4];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
      if constexpr (S::kQInRegisters) {
        af[mt][0] = qFrags[kk][0], af[mt][1] = qFrags[kk][1], af[mt][2] = qFrags[kk][2],
        af[mt][3] = qFrags[kk][3];
      } else {
        const uint32_t chunk = kk * 2 + (lane >> 4);
        ldmatrixX4(af[mt], smemU32(sQ + qLaneRow[mt] * D + ((chunk ^ (qLaneRow[mt] & 7)) << 3)));
      }
    }
#pragma unroll
    for (int np = 0; np < kScoreTiles / 2; ++np) {
      const int krow = warpCol * S::kWarpKeys + np * 16 + (lane & 7) + ((lane >> 4) << 3);
      const int chunk = kk * 2 + ((lane >> 3) & 1);
      uint32_t bf[4];
      ldmatrixX4(
          bf, kStage + static_cast<uint32_t>((krow * D + ((chunk ^ (krow & 7)) << 3)) * sizeof(T)));
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {  // one K fragment, RT mma
        mma16816<T>(s[mt][2 * np], af[mt], bf[0], bf[1]);
        mma16816<T>(s[mt][2 * np + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
  // Mask, online softmax in the exp2 domain. Fragment element e of n-tile n of row tile mt:
  // row g + 8 * (e >> 1) of the tile, key keyBase + n * 8 + (e & 1). Masked logits are -inf,
  // visible ones s * scaleLog2; then p = exp2f(s - m).
  const int32_t keyBase = key0 + warpCol * S::kWarpKeys + 2 * tq;
  float mx[RT][2];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) mx[mt][0] = mx[mt][1] = -INFINITY;
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ri = e >> 1;
        const int32_t j = keyBase + n * 8 + (e & 1);
        bool vis = j >= rows.lo[mt][ri] && j < rows.hi[mt][ri];
        if (j >= treePast) {  // kPackedTree, a current row: its mask bit
          const int64_t c = int64_t{j} - treePast;
          vis = vis && c < 32 && ((rows.word[mt][ri] >> c) & 1u) != 0;
        }
        s[mt][n][e] = vis ? s[mt][n][e] * a.scaleLog2 : -INFINITY;
        mx[mt][ri] = fmaxf(mx[mt][ri], s[mt][n][e]);
      }
    }
  }
  float corr[RT][2], mUse[RT][2];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      mx[mt][ri] = fmaxf(mx[mt][ri], __shfl_xor_sync(0xffffffffu, mx[mt][ri], 1));
      mx[mt][ri] = fmaxf(mx[mt][ri], __shfl_xor_sync(0xffffffffu, mx[mt][ri], 2));
      const float mNew = fmaxf(w.mRun[mt][ri], mx[mt][ri]);
      mUse[mt][ri] = mNew == -INFINITY ? 0.0f : mNew;  // all masked so far: keep exp2 finite
      corr[mt][ri] = exp2f(w.mRun[mt][ri] - mUse[mt][ri]);
      w.mRun[mt][ri] = mNew;
      w.lRun[mt][ri] *= corr[mt][ri];
    }
  }
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int n = 0; n < kScoreTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[mt][n][e] - mUse[mt][e >> 1]);
        s[mt][n][e] = p;
        w.lRun[mt][e >> 1] += p;
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kOutTiles; ++dt) {
      w.o[mt][dt][0] *= corr[mt][0];
      w.o[mt][dt][1] *= corr[mt][0];
      w.o[mt][dt][2] *= corr[mt][1];
      w.o[mt][dt][3] *= corr[mt][1];
    }
  }
  // O += P V: P (fp32 accumulator layout) is the A fragment of 16-key steps.
#pragma unroll
  for (int ks = 0; ks < kScoreTiles / 2; ++ks) {
    uint32_t pa[RT][4];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
      pa[mt][0] = pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
      pa[mt][1] = pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
      pa[mt][2] = pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
      pa[mt][3] = pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
    }
    const int vrow = warpCol * S::kWarpKeys + ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
    for (int dp = 0; dp < kOutTiles / 2; ++dp) {
      const int chunk = dp * 2 + (lane >> 4);
      uint32_t vf[4];
      ldmatrixX4Trans(
          vf, vStage + static_cast<uint32_t>((vrow * D + ((chunk ^ (vrow & 7)) << 3)) * sizeof(T)));
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {  // one V fragment, RT mma
        mma16816<T>(w.o[mt][2 * dp], pa[mt], vf[0], vf[1]);
        mma16816<T>(w.o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
      }
    }
  }
}

// Epilogue: merges the kWarpCols warps that share each row tile's keys through shared memory and
// writes the normalised rows (one split) or the split's fp32 partials. Slot (mt, warp) =
// mt * 4 + warp of the merge buffer and of sMl holds this warp's part of row tile mt: with RT 1
// the slot is the warp (its tile is its warp row); the verify variant (WM 1, RT 2) lays out both
// tiles' 4 warps, slots 0-3 (tile 0) and 4-7 (tile 1). Row lr of the CTA is in tile lr >> 4
// either way, whose kWarpCols warps hold slots (lr >> 4) * kWarpCols ... + kWarpCols - 1.
// The caller has passed a barrier after the last reads of the K/V ring (sMerge reuses it).
template <typename T, int D, int WM, int RT>
__device__ __forceinline__ void mergeWarpsAndWrite(const SplitArgs& a, WarpState<D, RT>& w,
                                                   const RowInfo* sRow, float2* sMl, float* sMerge,
                                                   int32_t split) {
  using S = SplitShape<D, WM, RT>;
  constexpr int kWarpCols = S::kWarpCols, kStride = S::kMergeStride;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  // The row sums over the 4 lanes (tq) that hold a row's columns.
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      w.lRun[mt][ri] += __shfl_xor_sync(0xffffffffu, w.lRun[mt][ri], 1);
      w.lRun[mt][ri] += __shfl_xor_sync(0xffffffffu, w.lRun[mt][ri], 2);
    }
  }
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
    const int slot = mt * (sk::kThreads / 32) + warp;
    float* mw = sMerge + slot * 16 * kStride;
#pragma unroll
    for (int dt = 0; dt < S::kOutTiles; ++dt) {
      *reinterpret_cast<float2*>(mw + g * kStride + dt * 8 + 2 * tq) =
          make_float2(w.o[mt][dt][0], w.o[mt][dt][1]);
      *reinterpret_cast<float2*>(mw + (g + 8) * kStride + dt * 8 + 2 * tq) =
          make_float2(w.o[mt][dt][2], w.o[mt][dt][3]);
    }
    if (tq == 0) {
      sMl[slot * 16 + g] = make_float2(w.mRun[mt][0], w.lRun[mt][0]);
      sMl[slot * 16 + g + 8] = make_float2(w.mRun[mt][1], w.lRun[mt][1]);
    }
  }
  __syncthreads();
  const bool direct = a.splits == 1;
  const int64_t partStride = int64_t{a.totalQ} * a.hq;
  T* out = static_cast<T*>(a.out);
  constexpr int kQuads = D / 4;
  for (int idx = tid; idx < S::kCtaRows * kQuads; idx += sk::kThreads) {
    const int lr = idx / kQuads, d = (idx % kQuads) * 4;
    const int64_t rh = sRow[lr].rh;
    if (rh < 0) continue;
    const int w0 = (lr >> 4) * kWarpCols, rr = lr & 15;  // first slot of the row's tile, its row
    float mMax = -INFINITY;
#pragma unroll
    for (int k = 0; k < kWarpCols; ++k) mMax = fmaxf(mMax, sMl[(w0 + k) * 16 + rr].x);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lSum = 0.0f;
    if (mMax != -INFINITY) {
#pragma unroll
      for (int k = 0; k < kWarpCols; ++k) {
        const float2 ml = sMl[(w0 + k) * 16 + rr];
        const float wt = exp2f(ml.x - mMax);  // a warp that saw nothing: exp2(-inf) = 0
        lSum += wt * ml.y;
        const float4 v =
            *reinterpret_cast<const float4*>(sMerge + ((w0 + k) * 16 + rr) * kStride + d);
        acc[0] += wt * v.x;
        acc[1] += wt * v.y;
        acc[2] += wt * v.z;
        acc[3] += wt * v.w;
      }
    }
    if (direct) {
      const float inv = lSum > 0.0f ? 1.0f / lSum : 0.0f;  // no visible key: zeros
      const float res[4] = {acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv};
      fwd::storeSpan<T, 4, true>(out + rh * D + d, res);
    } else {
      const int64_t slot = split * partStride + rh;
      if (mMax != -INFINITY) {
        *reinterpret_cast<float4*>(a.partO + slot * D + d) =
            make_float4(acc[0], acc[1], acc[2], acc[3]);
      }
      if (d == 0) a.partMl[slot] = make_float2(mMax, lSum);  // (-inf, 0): neutral
    }
  }
}

// The split-KV attention of one CTA (paged_attention.h; the shape in paged_attention_split.h):
// rows and key ranges, this split's tiles, the K/V pipeline with attendTile per tile, and
// mergeWarpsAndWrite. The __global__ kernels below instantiate it.
template <typename T, int D, int WM, int RT>
__device__ __forceinline__ void splitKvAttention(const SplitArgs& a) {
  using S = SplitShape<D, WM, RT>;
  constexpr int kStages = S::kStages, kTileKeys = S::kTileKeys, kRowChunks = S::kRowChunks;
  constexpr int kCtaRows = S::kCtaRows;

  extern __shared__ __align__(16) unsigned char smem[];
  T* sKv = reinterpret_cast<T*>(smem);                                    // [stage][K|V][key][D]
  T* sQ = sKv + kStages * 2 * kTileKeys * D;                              // [kCtaRows][D]
  RowInfo* sRow = reinterpret_cast<RowInfo*>(sQ + kCtaRows * D);          // [maxRowsPerCta]
  float2* sMl = reinterpret_cast<float2*>(sRow + sk::maxRowsPerCta(RT));  // [RT][4 warps][16]
  float* sMerge = reinterpret_cast<float*>(smem);  // [RT][4 warps][16][D + 4], after the loop
  // Q rows are [row][16-byte chunk] with the chunk index XORed with (row & 7), as the K/V tiles.
  auto stageAddr = [&](int st) { return smemU32(sKv + st * 2 * kTileKeys * D); };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warpRow = warp / S::kWarpCols, warpCol = warp % S::kWarpCols;
  const int g = lane >> 2;  // mma fragment row of this lane
  const SplitCta cta = splitCtaOf(a);
  const bool tree = a.mask == static_cast<int32_t>(AttentionMask::kPackedTree);
  // Launched as a programmatic dependent (pdl.cuh): the previous kernel wrote q and the new rows'
  // K/V. With early reads the rows' metadata (cuQ, kvLens, qPos, the tree mask) and the page
  // table, which it does not write, are read and the first tiles' pages looked up before waiting
  // for it. Its own dependents (the combine kernel, or the next layer's kernel) are let in at the
  // epilogue.
  if (!a.earlyReads) pdl::wait();

  // ---- rows and key ranges
  const int32_t q0 = a.cuQ[cta.seq];
  const int32_t qLen = a.cuQ[cta.seq + 1] - q0;
  const int32_t kvLen = a.kvLens[cta.seq];
  const int32_t treePast = tree ? kvLen - qLen : INT32_MAX;  // tree bits apply to keys >= it
  if (tid < kCtaRows) {
    const attn::PackedRowKeys k = attn::packedRowKeys(
        cta.rowBlock * kCtaRows + tid, q0, qLen, kvLen, cta.kvHead, a.qPos, a.totalQ, a.maxQ, a.hq,
        a.group, a.maxPages, a.mask == static_cast<int32_t>(AttentionMask::kCausal), a.window);
    RowInfo ri{k.rh, k.lo, k.hi, 0u, 0};
    if (tree && k.hi > k.lo) ri.word = static_cast<uint32_t>(a.packed[int64_t{k.r} * a.words]);
    sRow[tid] = ri;
  }
  __syncthreads();
  // The union of the rows' ranges (every warp computes it) and this split's tiles of it.
  const attn::KeyRange keys = attn::rowsKeyUnion(sRow, kCtaRows, lane);
  const TileRange tiles = splitTiles(keys, a.tilesPerSplit, cta.split, a.splits);
  const int32_t t0 = tiles.first, t1 = tiles.end;
  LaneRows<RT> rows;
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const RowInfo& x = sRow[warpRow * S::kWarpRowRows + mt * 16 + g + 8 * ri];
      rows.lo[mt][ri] = x.lo;
      rows.hi[mt][ri] = x.hi;
      rows.word[mt][ri] = x.word;
    }
  }

  // ---- K/V pipeline
  const KvTileLoader<T, D> loader{a,
                                  a.table + int64_t{cta.seq} * 2 * a.maxPages,
                                  static_cast<const T*>(a.pool),
                                  int64_t{a.hkv} * D,
                                  cta.kvHead,
                                  t1,
                                  keys.lo,
                                  keys.hi};
  // Pages of the prologue's tiles and of the next one to issue (false past t1: none when
  // t0 == t1). The page table is not the previous kernel's output: looked up before the wait.
  int32_t pkp[kStages - 1], pvp[kStages - 1];
  bool pok[kStages - 1];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    pkp[s] = pvp[s] = 0;
    pok[s] = loader.lookup(t0 + s, pkp[s], pvp[s]);
  }
  int32_t nkp = 0, nvp = 0;
  bool nok = loader.lookup(t0 + kStages - 1, nkp, nvp);  // the next tile to issue, prefetched

  if (a.earlyReads) pdl::wait();  // q and the new rows' K/V are read from here on
  // With one split, rows that lie in no sequence are written by CTA 0 (the other CTAs write only
  // rows of their own sequence).
  if (a.splits == 1 && blockIdx.x == 0) {
    attn::zeroRowsOutsideSequences(static_cast<T*>(a.out), a.cuQ, a.batch, a.totalQ,
                                   int64_t{a.hq} * D);
  }

  // cp.async groups: every thread commits the same sequence of groups, one per tile slot, empty
  // when the tile is not loaded. The prologue commits kStages - 1 groups (tiles t0 .. t0 +
  // kStages - 2, Q in the first); iteration t commits one more (tile t + kStages - 1). At the top
  // of iteration t the groups of tiles t .. t + kStages - 2 may be pending, so
  // wait_group(kStages - 2) leaves exactly the kStages - 2 newest pending and tile t (and Q)
  // landed; the barrier after it publishes every thread's copies and ends all reads of tile
  // t - 1's stage, which iteration t then refills.
  uint32_t loadedStages = 0;  // bit st: the tile in stage st is loaded (computed)
  if (t0 < t1) {
    const T* qg = static_cast<const T*>(a.q);
    for (int idx = tid; idx < kCtaRows * kRowChunks; idx += sk::kThreads) {
      const int m = idx / kRowChunks, c = idx % kRowChunks;
      const bool in = sRow[m].hi > sRow[m].lo;
      const T* src = in ? qg + sRow[m].rh * D + c * 8 : qg;
      cpAsync16Shared(smemU32(sQ + m * D + ((c ^ (m & 7)) << 3)), src, in ? 16 : 0);
    }
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {  // group s = tile t0 + s (group 0 also holds Q)
      if (pok[s]) {
        loader.issue(t0 + s, stageAddr(s), pkp[s], pvp[s]);
        loadedStages |= 1u << s;
      }
      cpAsyncCommit();
    }
  }

  // ---- main loop
  WarpState<D, RT> state;
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < S::kOutTiles; ++dt)
      state.o[mt][dt][0] = state.o[mt][dt][1] = state.o[mt][dt][2] = state.o[mt][dt][3] = 0.0f;
  }
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
    state.mRun[mt][0] = state.mRun[mt][1] = -INFINITY;
    state.lRun[mt][0] = state.lRun[mt][1] = 0.0f;
  }
  uint32_t qFrags[S::kQInRegisters ? D / 16 : 1][4];
  uint32_t qLaneRow[RT];  // the Q row this lane addresses in ldmatrix, per row tile
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) qLaneRow[mt] = warpRow * S::kWarpRowRows + mt * 16 + (lane & 15);

  for (int32_t t = t0; t < t1; ++t) {
    cpAsyncWait<kStages - 2>();  // tile t (and Q) landed for this thread ...
    __syncthreads();             // ... for all; and every warp is done with tile t - 1's stage
    const int st = (t - t0) % kStages;
    {
      const int ns = (st + kStages - 1) % kStages;  // stage of tile t + kStages - 1 (t - 1's)
      loadedStages &= ~(1u << ns);
      if (nok) {
        loader.issue(t + kStages - 1, stageAddr(ns), nkp, nvp);
        loadedStages |= 1u << ns;
      }
      cpAsyncCommit();
      nok = loader.lookup(t + kStages, nkp, nvp);
    }
    if constexpr (S::kQInRegisters) {
      if (t == t0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          const uint32_t chunk = kk * 2 + (lane >> 4);
          ldmatrixX4(qFrags[kk],
                     smemU32(sQ + qLaneRow[0] * D + ((chunk ^ (qLaneRow[0] & 7)) << 3)));
        }
      }
    }
    // Warp-uniform skips only from here on: every thread has passed this iteration's barrier and
    // committed its group.
    if (((loadedStages >> st) & 1u) == 0) continue;
    attendTile<T, D, WM, RT>(state, rows, qFrags, qLaneRow, sQ, stageAddr(st), t * kTileKeys,
                             treePast, a, lane, warpCol);
  }

  // ---- epilogue
  // Every group committed so far is empty or landed (the last real tile was waited for in its
  // iteration); waiting for all anyway keeps the buffers below free of in-flight copies.
  cpAsyncWait<0>();
  __syncthreads();  // the K/V ring becomes the merge buffer
  pdl::trigger();
  mergeWarpsAndWrite<T, D, WM, RT>(a, state, sRow, sMl, sMerge, cta.split);
}

// Decode rows, and batch-1 calls of <= 16 rows per sequence that take one row tile per CTA
// (verify and DFlash blocks whose one-tile grid fits one wave): warpsM 1, the 4 warps split
// every 64-key tile's keys, so a row's result does not depend on the other rows of its call.
template <typename T, int D>
__global__ void __launch_bounds__(sk::kThreads, sk::minBlocks(D)) decodeKernel(const SplitArgs a) {
  splitKvAttention<T, D, 1, 1>(a);
}

// Batch-1 verify of two row tiles per CTA at head dim 128 (paged_attention.h, "Verify row
// tiles"): each warp computes its 16-key slice of every 64-key tile for both tiles, with
// decodeKernel's per-row arithmetic (the same mma sequence over the same keys, the same mask and
// softmax, the same 4-warp merge, both tiles' merge buffers laid out in the K/V ring at once), so
// a verify row equals the decode row bit for bit while the CTAs halve. Q is re-read from shared
// memory (16 Q + 8 K + 8 V fragments for 64 mma per warp and tile).
template <typename T>
__global__ void __launch_bounds__(sk::kThreads, sk::minBlocks(128))
    verifyKernel(const SplitArgs a) {
  splitKvAttention<T, 128, 1, sk::kVerifyRowTiles>(a);
}

// Row blocks of WM (2 or 4) row tiles per CTA, one per warp row: verify and DFlash blocks at
// batch > 1, and prefill calls that the wgmma kernel does not take (head dim 64 / 256, fewer than
// 128 packed rows a sequence, forced split counts). Per 64-key tile and warp it loads 32 K + 32 V
// fragments for 128 mma (Q fragments stay in registers up to D 128); each K/V tile serves WM x 16
// rows.
template <typename T, int D, int WM>
__global__ void __launch_bounds__(sk::kThreads, sk::minBlocks(D))
    rowBlockKernel(const SplitArgs a) {
  splitKvAttention<T, D, WM, 1>(a);
}

// Merges the splits of one (row, head) per warp: out = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M)
// l_s. Rows in no sequence, padding rows and rows that saw no key get zeros. Launched as a
// programmatic dependent of the split-KV kernel: griddepcontrol.wait orders it after its writes.
// Latency, not bytes, bounds it: loading a split's (m, l) and then its O (only where m is finite)
// would make a decode's 4-16 splits 8-32 dependent round trips to L2. So the row's owner is found
// before the wait (cuQ and qPos: not written by the split kernel, pdl.cuh "early reads"), and the
// partials are loaded B splits at a time, (m, l) and O together. B is 8, or for decode rows 16 or
// 32, the smallest holding every split (launchSplitDim; 8 at head dim 256), so a decode is one
// round trip after the wait (a 32k-token decode's 32 splits would be four with B = 8) and the max
// comes from the batch's own (m, l) when it holds every split, with no separate pass. With more
// splits than B, a max pass reads every split's m beside the first batch and the batches follow one
// another. The sums are the same operations in the same split order whatever B is (the output does
// not depend on it); neutral partials (m = -inf) are loaded too (their O was never written) and
// skipped.
template <typename T, int D, int B>
__global__ void __launch_bounds__(128) combineKernel(const SplitArgs a) {
  constexpr int E = D / 32;  // dims per lane
  // Where the next kernel (the o projection) is let in (a.combineTrigger, paged_attention.h).
  // kTriggerFirst: before this kernel even waits, i.e. while the split kernel still runs, so its
  // early reads (W, the residual it adds to) overlap the attention. Safe only because that kernel
  // reads nothing the split kernel writes before its own wait, and its wait (this grid complete)
  // implies the split grid complete; pdl.cuh's one-kernel-ahead rule does not hold here.
  // kTriggerLast: after the stores, so no CTA of this kernel holds registers the next one's CTAs
  // need. kTriggerAfterWait: pdl::enter, as every other kernel.
  if (a.combineTrigger == kTriggerFirst) pdl::trigger();
  auto waitForSplit = [&] {
    if (a.combineTrigger == kTriggerAfterWait) {
      pdl::enter();
    } else {
      pdl::wait();
    }
  };
  if (!a.earlyReads) waitForSplit();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t item = int64_t{blockIdx.x} * 4 + warp;  // r * Hq + h
  const int64_t stride = int64_t{a.totalQ} * a.hq;
  if (item >= stride) return;
  const int32_t r = static_cast<int32_t>(item / a.hq);
  const int32_t b = owningSequence(a.cuQ, a.batch, r);
  const bool valid = b >= 0 && r < a.cuQ[b + 1] && r - a.cuQ[b] < a.maxQ && a.qPos[r] >= 0;
  if (a.earlyReads) waitForSplit();  // the partials are read from here on
  float acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
  float lsum = 0.0f;
  if (valid) {  // warp-uniform
    const int32_t splits = a.splits;
    float2 ml[B];
    float v[B][E];
    auto loadBatch = [&](int32_t s0) {
#pragma unroll
      for (int j = 0; j < B; ++j) {
        const int64_t s = s0 + j;
        ml[j] = make_float2(-INFINITY, 0.0f);
        if (s < splits) {
          ml[j] = a.partMl[s * stride + item];
          fwd::loadSpan<float, E, true>(a.partO + (s * stride + item) * D + lane * E, v[j]);
        }
      }
    };
    loadBatch(0);
    float mmax = -INFINITY;
    if (splits <= B) {
#pragma unroll
      for (int j = 0; j < B; ++j) mmax = fmaxf(mmax, ml[j].x);
    } else {
      for (int32_t s = lane; s < splits; s += 32) mmax = fmaxf(mmax, a.partMl[s * stride + item].x);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
    }
    if (mmax != -INFINITY) {
      for (int32_t s0 = 0; s0 < splits; s0 += B) {
        if (s0 > 0) loadBatch(s0);
#pragma unroll
        for (int j = 0; j < B; ++j) {
          if (ml[j].x == -INFINITY) continue;  // neutral partial (or past the last split)
          const float wt = exp2f(ml[j].x - mmax);
          lsum += wt * ml[j].y;
#pragma unroll
          for (int e = 0; e < E; ++e) acc[e] += wt * v[j][e];
        }
      }
    }
  }
  const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] *= inv;
  fwd::storeSpan<T, E, true>(static_cast<T*>(a.out) + item * D + lane * E, acc);
  if (a.combineTrigger == kTriggerLast) pdl::trigger();
}

// Launches split-KV kernel instance Kernel of shape (D, WM, RT) with its dynamic shared memory.
template <auto Kernel, int D, int WM, int RT>
void launchSplitKernel(const SplitArgs& a, int64_t ctas, cudaStream_t stream) {
  constexpr int kSmem = static_cast<int>(sk::smemBytes(D, WM, RT));
  attn::raiseDynamicSmemOnce<Kernel>(kSmem);
  pdl::launch(Kernel, dim3(static_cast<unsigned>(ctas)), dim3(sk::kThreads), kSmem, stream, a);
  ES_CUDA_CHECK_LAUNCH();
}

// The split-KV kernel of the plan's shape, then the combine kernel when there are several splits.
template <typename T, int D>
void launchSplitDim(const SplitArgs& a, const PagedAttentionPlan& plan, cudaStream_t stream) {
  const int64_t ctas = plan.splitCtas;
  constexpr int kRt2 = sk::kVerifyRowTiles;
  if (plan.rowTiles == kRt2) {
    // The plan gives the split-KV kernel rowTiles 2 only where rowTilesBuilt: warpsM 1 (verify).
    // Its rowTiles-2 warpsM-4 plans (prefill) run the wgmma kernel (launchSplit).
    if constexpr (sk::rowTilesBuilt(D, 1, kRt2)) {
      ES_CHECK_ARG(plan.warpsM == 1, "launchPagedAttention", "plan.warpsM", plan.warpsM,
                   "must be 1 with rowTiles 2 on the split-KV kernel");
      launchSplitKernel<verifyKernel<T>, D, 1, kRt2>(a, ctas, stream);
    } else {
      ES_THROW(InvalidArgument, "launchPagedAttention: rowTiles 2 is not built for head dim ", D);
    }
  } else {
    switch (plan.warpsM) {
      case 1:
        launchSplitKernel<decodeKernel<T, D>, D, 1, 1>(a, ctas, stream);
        break;
      case 2:
        launchSplitKernel<rowBlockKernel<T, D, 2>, D, 2, 1>(a, ctas, stream);
        break;
      default:
        launchSplitKernel<rowBlockKernel<T, D, 4>, D, 4, 1>(a, ctas, stream);
        break;
    }
  }
  if (plan.numSplits > 1) {
    const int64_t ctas = (int64_t{a.totalQ} * a.hq + 3) / 4;
    // The batch B (combineKernel): 8, or for decode rows (maxQSeqLen 1) up to 32. At head dim
    // 256 a split's O is 8 floats a lane, so 8 splits already hold 80 registers. Decode rows take
    // the larger batches (a 32k-token batch-1 decode's attention is about 3 % faster with all 32
    // splits in one batch); verify rows keep B 8: a combine CTA of B 16 holds 128 registers a
    // thread, which can keep a CTA of the next kernel (the o projection) off its SM.
    auto combine = combineKernel<T, D, 8>;
    if constexpr (D <= 128) {
      if (a.maxQ == 1 && plan.numSplits > 16) {
        combine = combineKernel<T, D, 32>;
      } else if (a.maxQ == 1 && plan.numSplits > 8) {
        combine = combineKernel<T, D, 16>;
      }
    }
    pdl::launch(combine, dim3(static_cast<unsigned>(ctas)), dim3(128), 0, stream, a);
  }
}

void launchSplit(const PagedAttentionParams& p, const PagedAttentionPlan& plan,
                 cudaStream_t stream) {
  if (detail::prefillWgmmaApplies(p, plan)) {  // the wgmma kernel (paged_attention_prefill.h)
    detail::launchPrefillWgmma(p, plan, stream);
    return;
  }
  const RaggedQueryArgs& q = p.query;
  // When the combine lets the next kernel in (paged_attention.h).
  int32_t combineTrigger = kTriggerAfterWait;
  if (p.nextFillsSms) {
    combineTrigger = kTriggerLast;
  } else if (pdl::enabled() && q.maxQSeqLen == 1) {
    combineTrigger = kTriggerFirst;
  }
  float* partO = static_cast<float*>(p.workspace);
  const SplitArgs a{
      .q = q.q,
      .out = q.out,
      .cuQ = q.cuQSeqLens,
      .qPos = q.qPositions,
      .totalQ = q.totalQ,
      .maxQ = q.maxQSeqLen,
      .hq = q.numQHeads,
      .group = q.numQHeads / p.kv.numKVHeads,
      .words = (q.maxQSeqLen + 31) / 32,
      .pool = p.kv.pool,
      .table = p.kv.pageTable,
      .numPages = p.kv.numPages,
      .maxPages = p.kv.maxPagesPerSeq,
      .hkv = p.kv.numKVHeads,
      .kvLens = p.kvLengths,
      .packed = p.packedMask,
      .mask = static_cast<int32_t>(p.mask),
      .window = p.slidingWindow,
      .batch = p.batchSize,
      .scaleLog2 = p.scale * 1.4426950408889634f,
      .splits = plan.numSplits,
      .tilesPerSplit = plan.tilesPerSplit,
      .rowBlocks = plan.rowBlocks,
      .earlyReads = pdl::earlyReads() ? 1 : 0,
      .combineTrigger = combineTrigger,
      .partO = partO,
      .partMl = reinterpret_cast<float2*>(partO + int64_t{plan.numSplits} * q.totalQ * q.numQHeads *
                                                      p.headDim),
  };
  fwd::dispatchDtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      switch (p.headDim) {
        case 64:
          launchSplitDim<T, 64>(a, plan, stream);
          break;
        case 128:
          launchSplitDim<T, 128>(a, plan, stream);
          break;
        default:
          launchSplitDim<T, 256>(a, plan, stream);
          break;
      }
    }
  });
}

}  // namespace

void launchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  const PagedAttentionPlan plan = planPagedAttention(p);
  if (plan.splitKv) {
    launchSplit(p, plan, stream);
    return;
  }
  ES_CHECK_ARG(p.query.numQHeads <= 65535, "launchPagedAttention", "query.numQHeads",
               p.query.numQHeads, "must be <= 65535 (grid y)");
  const Args a{
      .q = p.query.q,
      .out = p.query.out,
      .cuQ = p.query.cuQSeqLens,
      .qPos = p.query.qPositions,
      .totalQ = p.query.totalQ,
      .words = (p.query.maxQSeqLen + 31) / 32,
      .hq = p.query.numQHeads,
      .pool = p.kv.pool,
      .table = p.kv.pageTable,
      .numPages = p.kv.numPages,
      .maxPages = p.kv.maxPagesPerSeq,
      .hkv = p.kv.numKVHeads,
      .kvLens = p.kvLengths,
      .mask = static_cast<int32_t>(p.mask),
      .packed = p.packedMask,
      .window = p.slidingWindow,
      .batch = p.batchSize,
      .scale = p.scale,
  };
  const bool aligned =
      fwd::aligned16(p.query.q) && fwd::aligned16(p.query.out) && fwd::aligned16(p.kv.pool);
  fwd::dispatchDtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (p.headDim) {
      case 64:
        launch<T, 64>(a, aligned, stream);
        break;
      case 128:
        launch<T, 128>(a, aligned, stream);
        break;
      default:
        launch<T, 256>(a, aligned, stream);
        break;
    }
  });
  ES_CUDA_CHECK_LAUNCH();
}

void launchPagedAttentionSplitKv(const PagedAttentionParams& p, int32_t numSplits,
                                 cudaStream_t stream, int32_t maxRowTiles) {
  constexpr const char* kWhere = "launchPagedAttentionSplitKv";
  ES_CHECK_ARG(numSplits >= 1 && numSplits <= kSplitKvMaxSplits, kWhere, "numSplits", numSplits,
               "must be in [1, ", kSplitKvMaxSplits, "]");
  if (!validate(p)) return;
  const PagedAttentionPlan plan = planPagedAttention(p, numSplits, maxRowTiles);
  ES_CHECK_ARG(plan.splitKv, kWhere, "params", plan.reason, "the split-KV path must apply");
  launchSplit(p, plan, stream);
}

}  // namespace es::kernel
