// Paged attention, two kernels behind one launcher (paged_attention.h says which call takes which).
//
// Simple kernel: one CTA of kWarps warps per (query row, query head). Each warp walks the visible
// keys j = lo + warp, lo + warp + kWarps, ... (keys read through the page table; each lane owns
// D/32 consecutive dims, so a key row is one coalesced access), keeps an online softmax in fp32
// (running max, sum, weighted V), and the warps are merged through shared memory at the end.
// Masks, windows, unmapped pages and padding rows as paged_attention.h; the mask decision depends
// on the key only, so it is warp-uniform.
//
// Split-KV kernel (flash-decoding; shape constants in paged_attention_split.h): one CTA of 4 warps
// per (sequence b, KV head, row block, split). Its rows are the packed (query row i, GQA head g)
// pairs m = i * group + g, 16 per tensor-core tile (mma.sync m16n8k16, fp32 accumulate), so each
// K/V row is read from memory once per KV head. Prologue: every row's visible key range [lo, hi)
// (causal bound, window) -> the CTA's union range, cut into 64-key tiles; the split takes the
// tiles of that range inside its fixed boundaries (paged_attention.h; a split outside the range
// gets none and writes a neutral partial). A row outside a tile's keys adds exact zeros there
// (its running max, sum and output do not change), so with warpsM = 1 (the 4 warps split every
// tile's keys the same way, whatever the row tiles per CTA) the other rows of a call never change
// a row's result.
// Main loop: a ring of 2-3 shared-memory stages filled by 16-byte cp.async (zero-filled outside
// the range; tiles on unmapped/out-of-range pages are not loaded and skipped), the page ids of the
// next tile prefetched into registers; per tile S = Q K^T, the per-row mask, an online softmax in
// the exp2 domain, O += P V with P rounded to the storage type. Epilogue: the warps that split a
// tile's keys are merged through shared memory; with one split the CTA writes the normalised
// output, otherwise (max, sum, unnormalised O) partials for combine_kernel, which is launched with
// programmatic dependent launch and merges the splits of each (row, head).
// Prefill variant (template WM = 4, RT = 2; plan.rowTiles, paged_attention_split.h): each warp
// owns 32 packed rows (two m16 tiles) and all 64 keys of every tile, 128 rows per CTA, so a K or V
// fragment loaded with ldmatrix feeds 2 mma.sync and a K/V tile in shared memory serves 128 rows.
// D 128 only: 2 stages (64 KiB) + Q (32 KiB) + row data = 100.1 KiB per CTA, 2 CTAs per SM; ptxas
// (CUDA 13.0, sm_90a): 255 registers, 104 bytes of spill stores / 120 of loads (the cp.async
// offsets and the running max/sum, about 17 local loads and 4 stores per 64-key tile next to 256
// mma). It also skips per warp the tiles none of its rows sees, masks only tiles some rows see in
// part, folds the scale into the exponent (one FFMA + ex2.approx.ftz per logit), runs the last row
// blocks (the longest under a causal mask) first, and stages its normalised output in its own Q
// rows for 16-byte stores (no cross-warp merge). Since session 19 its one-split calls run the
// wgmma kernel of paged_attention_prefill.cu (370 against 280 TFLOP/s at a 4k causal prefill);
// this variant keeps the forced split counts and ES_ATTN_PREFILL_WGMMA=0.
// Verify variant (template WM = 1, RT = 2; batch-1 calls of <= 16 rows at D 128 whose packed rows
// need >= 2 tiles): the CTA holds two 16-row tiles and each warp computes its 16-key slice of
// every 64-key tile for both, with the RT-1 kernel's per-row arithmetic and 4-warp merge, so a
// verify row keeps the decode row's bits while the CTAs halve (the 16-row verify of Qwen3-8B at
// 4k: 512 CTAs in two waves -> 256 in one). 3 stages + Q (8 KiB) + row data = 108.1 KiB per CTA,
// 2 CTAs per SM; ptxas (CUDA 13.0, sm_90a): 252 registers, no spills (merged after its H200
// measurement in session 10, docs/perf.md). Taken where one tile per CTA would need two waves
// (paged_attention.h, "Verify row tiles"; opt-in in sessions 16-17).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/env_switch.h"
#include "kernels/attention_math.cuh"
#include "kernels/forward_ops_device.cuh"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_prefill.h"
#include "kernels/paged_attention_rows.cuh"
#include "kernels/paged_attention_split.h"
#include "kernels/pdl.cuh"
#include "common/kv_page.h"

namespace es::kernel {
namespace {

constexpr int kWarps = 4;
constexpr int32_t kPage = kv::kTokensPerPage;

struct Args {
  const void* q;
  void* out;
  const int32_t* cu_q;
  const int32_t* q_pos;
  int32_t total_q;
  int32_t words;
  int32_t hq;
  const void* pool;
  const int32_t* table;
  int32_t num_pages, max_pages, hkv;
  const int32_t* kv_lens;
  int32_t mask;
  const int32_t* packed;
  int32_t window;
  int32_t batch;
  float scale;
};

// The sequence that owns query row r: the largest b < batch with cuQ[b] <= r, -1 if none (the
// row is still outside it when r >= cuQ[b + 1], i.e. past every sequence).
__device__ __forceinline__ int32_t owning_sequence(const int32_t* cuQ, int32_t batch, int32_t r) {
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
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(Args a) {
  pdl::enter();
  constexpr int kEpt = D / 32;  // dims per lane
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t r = blockIdx.x;
  const int32_t h = blockIdx.y;
  T* out = static_cast<T*>(a.out) + (int64_t{r} * a.hq + h) * D;

  const int32_t b = owning_sequence(a.cu_q, a.batch, r);
  const int32_t pos = a.q_pos[r];
  if (b < 0 || r >= a.cu_q[b + 1] || pos < 0) {
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = fwd::from_f<T>(0.0f);
    return;
  }
  const int32_t q_len = a.cu_q[b + 1] - a.cu_q[b];
  const int32_t kv_len = a.kv_lens[b];
  const int32_t past = kv_len - q_len;
  const int32_t hk = h / (a.hq / a.hkv);

  float q[kEpt];
  fwd::load_span<T, kEpt, ALIGNED>(
      static_cast<const T*>(a.q) + (int64_t{r} * a.hq + h) * D + lane * kEpt, q);
  int64_t lo = 0, hi = kv_len;
  if (a.mask == static_cast<int32_t>(AttentionMask::kCausal)) hi = min(hi, int64_t{pos} + 1);
  if (a.window > 0) lo = max(lo, int64_t{pos} - a.window + 1);
  const bool tree = a.mask == static_cast<int32_t>(AttentionMask::kPackedTree);
  const int32_t* trow = a.table + int64_t{b} * 2 * a.max_pages;
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
    if (lp >= a.max_pages) continue;
    const int32_t kp = trow[lp], vp = trow[a.max_pages + lp];
    if (!attn::page_pair_valid(kp, vp, a.num_pages)) continue;
    const int32_t slot = j - lp * kPage;
    float k[kEpt], v[kEpt];
    fwd::load_span<T, kEpt, ALIGNED>(
        pool + ((int64_t{kp} * kPage + slot) * a.hkv + hk) * D + lane * kEpt, k);
    fwd::load_span<T, kEpt, ALIGNED>(
        pool + ((int64_t{vp} * kPage + slot) * a.hkv + hk) * D + lane * kEpt, v);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kEpt; ++e) dot += q[e] * k[e];
    const float s = fwd::warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < kEpt; ++e) acc[e] = acc[e] * corr + p * v[e];
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kEpt; ++e) s_acc[warp][lane * kEpt + e] = acc[e];
  __syncthreads();
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  if (m_all == -INFINITY) {  // no visible key
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = fwd::from_f<T>(0.0f);
    return;
  }
  float weight[kWarps], denom = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = s_m[w] == -INFINITY ? 0.0f : expf(s_m[w] - m_all);
    denom += s_l[w] * weight[w];
  }
  for (int32_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += s_acc[w][d] * weight[w];
    out[d] = fwd::from_f<T>(o / denom);
  }
}

template <typename T, int D>
void launch(const Args& a, bool aligned, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.total_q), static_cast<unsigned>(a.hq));
  if (aligned) {
    pdl::launch(attention_kernel<T, D, true>, grid, dim3(kWarps * 32), 0, stream, a);
  } else {
    pdl::launch(attention_kernel<T, D, false>, grid, dim3(kWarps * 32), 0, stream, a);
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

// SplitArgs::combine_trigger.
inline constexpr int32_t kTriggerAfterWait = 0, kTriggerFirst = 1, kTriggerLast = 2;

struct SplitArgs {
  const void* q;
  void* out;
  const int32_t* cu_q;
  const int32_t* q_pos;
  int32_t total_q, max_q, hq, group, words;
  const void* pool;
  const int32_t* table;
  int32_t num_pages, max_pages, hkv;
  const int32_t* kv_lens;
  const int32_t* packed;
  int32_t mask, window, batch;
  float scale_log2;  // scale * log2(e): the softmax runs in the exp2 domain
  int32_t splits, tiles_per_split, row_blocks;
  int32_t early_reads;  // 1: metadata and page table read before the PDL wait (pdl.cuh)
  // When the combine kernel lets its dependent in: kTriggerAfterWait (pdl::enter),
  // kTriggerFirst (before its wait) or kTriggerLast (after its stores).
  int32_t combine_trigger;
  float* part_o;    // [splits, totalQ, Hq, D] f32 unnormalised outputs (splits > 1)
  float2* part_ml;  // [splits, totalQ, Hq] (running max in the exp2 domain, sum)
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte global->shared copy; fill = false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(fill ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
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
using attn::exp2_ftz;
using attn::pack2;

// RT: 16-row tiles per warp (paged_attention_split.h, "rowTiles"). RT = 1 is the kernel of most
// calls. RT = 2 with WM = 4 (so one warp sums all keys of a tile for its rows) is the prefill
// variant: a warp owns packed rows [32 wm, 32 wm + 32), every K fragment (ldmatrix x4, 16 keys x
// 16 dims) and V fragment it loads feeds one mma per row tile, and the CTA's K/V tiles serve 128
// rows. Per 64-key tile and warp: RT 1 loads 64 fragments (32 K + 32 V) for 128 mma (0.5 per mma;
// Q fragments stay in registers); RT 2 loads 16 Q (from shared memory: 64 more registers of Q would
// not fit next to 64 S and 128 O accumulators) + 32 K + 32 V = 80 for 256 mma (0.31 per mma).
// The prefill variant also skips the tiles none of a warp's rows sees, masks only tiles some of
// them see in part, and takes a shorter softmax (kFastSoftmax).
// RT = 2 with WM = 1 is the verify variant (batch-1 calls of <= 16 rows with >= 2 row tiles):
// the CTA's 32 packed rows are two row tiles that every warp computes over its 16-key slice of
// each 64-key tile, exactly as the RT-1 WM-1 (decode) kernel computes its one tile: per row the
// same mma sequence over the same keys, the same mask and softmax arithmetic, the same 4-warp
// merge (both tiles' merge buffers laid out in the K/V ring at once). Q is re-read from shared
// memory (16 Q + 8 K + 8 V fragments for 64 mma per warp and tile). A verify row therefore
// equals the decode row bit for bit, as with RT 1. Every RT-1 instance is unchanged
// (ES_ATTN_ROWTILES=1 runs exactly the kernel of before for prefill and verify).
template <typename T, int D, int WM, int RT>
__global__ void __launch_bounds__(sk::kThreads, sk::minBlocks(D)) split_kernel(const SplitArgs a) {
  constexpr int WN = 4 / WM;         // warps sharing one warp row (they split the keys)
  constexpr int MW = 16 * RT;        // packed rows per warp row
  constexpr int MB = MW * WM;        // packed rows per CTA
  constexpr int KT = sk::kTileKeys;  // keys per tile
  constexpr int KS = KT / WN;        // keys per warp and tile
  constexpr int NT = KS / 8;         // S n-tiles per warp and row tile
  constexpr int DC = D / 8;          // 16-byte chunks per K/V/Q row
  constexpr int DT = D / 8;          // O n-tiles
  constexpr int ST = sk::stages(D, WM, RT);
  // The prefill variant (RT 2, WM 4); every other instance (RT 1, and the verify variant RT 2 at
  // WM 1) runs the RT-1 arithmetic per row and merges the warps that share a row's keys.
  constexpr bool kPrefill = RT > 1 && WN == 1;
  constexpr bool kQRegs = D <= 128 && RT == 1;  // Q fragments in registers (else re-read from smem)
  // Prefill variant: each warp skips the tiles none of its rows sees (the causal diagonal of the
  // row block, a window's edge) and masks only tiles that some of its rows see in part.
  constexpr bool kWarpRange = kPrefill;
  constexpr bool kFastSoftmax = kPrefill;  // see the softmax below
  static_assert(!kWarpRange || kFastSoftmax, "the unmasked-tile branch leaves logits unscaled");
  constexpr int kMergeStride = D + 4;  // floats per row of the 4-warp epilogue merge buffer
  // The prefill variant takes no kPackedTree (the launcher checks; the tree bits are not applied
  // there); the verify variant applies them per row as RT 1 does.
  static_assert(sk::rowTilesBuilt(D, WM, RT) && (RT == 1 || WN == 1 || WM == 1));
  static_assert(kPrefill || RT * sk::mergeBytes(D) <= ST * sk::kvStageBytes(D),
                "the merge buffers of all row tiles fit in the K/V ring");
  static_assert(NT % 2 == 0 && MB <= sk::maxRowsPerCta(RT) && MB <= sk::kThreads &&
                (KT * DC) % sk::kThreads == 0);
  static_assert(kPage % KT == 0);

  extern __shared__ __align__(16) unsigned char smem[];
  T* s_kv = reinterpret_cast<T*>(smem);                                     // [ST][K|V][KT][D]
  T* s_q = s_kv + ST * 2 * KT * D;                                          // [MB][D]
  RowInfo* s_row = reinterpret_cast<RowInfo*>(s_q + MB * D);                // [maxRowsPerCta]
  float2* s_ml = reinterpret_cast<float2*>(s_row + sk::maxRowsPerCta(RT));  // [RT][4 warps][16]
  // Not the prefill variant: [RT][4 warps][16][D + 4], after the loop.
  float* s_merge = reinterpret_cast<float*>(smem);
  // Shared tiles are [row][16-byte chunk] with the chunk index XORed with (row & 7), so the 8
  // rows of one ldmatrix hit 8 different bank groups.

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, tq = lane & 3;  // mma fragment row / column-pair of this lane
  // KV head fastest: the CTAs of one (sequence, split) read the same pages (each its 2*D bytes
  // of every token row) at about the same time; then row blocks (same K/V, from L2), splits.
  int32_t bid = blockIdx.x;
  const int32_t hk = bid % a.hkv;
  bid /= a.hkv;
  // The prefill variant runs the last row blocks first: under a causal mask they see the most
  // keys, so the long CTAs start in the first wave and the short ones fill the tail.
  const int32_t rb = kPrefill ? a.row_blocks - 1 - bid % a.row_blocks : bid % a.row_blocks;
  bid /= a.row_blocks;
  const int32_t split = bid % a.splits;
  const int32_t b = bid / a.splits;
  const bool direct = a.splits == 1;
  const bool tree = a.mask == static_cast<int32_t>(AttentionMask::kPackedTree);
  // Launched as a programmatic dependent (pdl.cuh): the previous kernel wrote q and the new rows'
  // K/V. With early reads (the default) the rows' metadata (cu_q, kv_lens, q_pos, the tree mask)
  // and the page table, which it does not write, are read and the first tiles' pages looked up
  // before waiting for it; ES_PDL_EARLY_READS=0 waits here. Its own dependents (the combine
  // kernel, or the next layer's kernel) are let in at the epilogue.
  if (!a.early_reads) pdl::wait();

  // ---- rows and key ranges
  const int32_t q0 = a.cu_q[b];
  const int32_t q_len = a.cu_q[b + 1] - q0;
  const int32_t kv_len = a.kv_lens[b];
  const int32_t tpast = tree ? kv_len - q_len : INT32_MAX;  // tree bits apply to keys >= tpast
  if (tid < MB) {
    const attn::PackedRowKeys k = attn::packed_row_keys(
        rb * MB + tid, q0, q_len, kv_len, hk, a.q_pos, a.total_q, a.max_q, a.hq, a.group,
        a.max_pages, a.mask == static_cast<int32_t>(AttentionMask::kCausal), a.window);
    RowInfo ri{k.rh, k.lo, k.hi, 0u, 0};
    if (tree && k.hi > k.lo) ri.word = static_cast<uint32_t>(a.packed[int64_t{k.r} * a.words]);
    s_row[tid] = ri;
  }
  __syncthreads();

  // Union of the rows' ranges (every warp computes it), its 64-key tiles, this split's share:
  // tiles [t0, t1) inside the fixed boundaries (s0 + split) * per ... (s0 + split + 1) * per
  // (per = tilesPerSplit). With one split under a causal mask this is the row block's causal
  // bound: tiles past its last row's position are never loaded.
  const attn::KeyRange keys = attn::rows_key_union(s_row, MB, lane);
  const int32_t lo_all = keys.lo, hi_all = keys.hi;
  int32_t t0 = 0, t1 = 0;  // this CTA's tiles [t0, t1)
  if (hi_all > 0) {
    const int64_t tb = lo_all / KT, te = (hi_all - 1) / KT + 1, per = a.tiles_per_split;
    const int64_t first = (tb / per + split) * per;
    t0 = static_cast<int32_t>(max(tb, first));
    t1 = static_cast<int32_t>(split == a.splits - 1 ? te : min(te, first + per));
  }

  // The ranges of this lane's rows: in registers (RT 1 and the verify variant); the prefill
  // variant reads them from s_row in the (rare) masked tiles, its registers being taken by the
  // accumulators.
  int32_t rlo[RT][2], rhi[RT][2];
  uint32_t rword[RT][2];
  auto load_row_ranges = [&] {
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        const RowInfo& x = s_row[wm * MW + mt * 16 + g + 8 * ri];
        rlo[mt][ri] = x.lo;
        rhi[mt][ri] = x.hi;
        rword[mt][ri] = x.word;
      }
    }
  };
  if constexpr (!kPrefill) load_row_ranges();
  // kWarpRange: the union [w_lo, w_hi) of this warp's rows' ranges and their intersection
  // [w_in_lo, w_in_hi) (empty as soon as one row sees nothing: its range is [0, 0)).
  int32_t w_lo = INT32_MAX, w_hi = 0, w_in_lo = 0, w_in_hi = INT32_MAX;
  if constexpr (kWarpRange) {
    for (int m = lane; m < MW; m += 32) {
      const RowInfo& x = s_row[wm * MW + m];
      if (x.hi > x.lo) {
        w_lo = min(w_lo, x.lo);
        w_hi = max(w_hi, x.hi);
      }
      w_in_lo = max(w_in_lo, x.lo);
      w_in_hi = min(w_in_hi, x.hi);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      w_lo = min(w_lo, __shfl_xor_sync(0xffffffffu, w_lo, o));
      w_hi = max(w_hi, __shfl_xor_sync(0xffffffffu, w_hi, o));
      w_in_lo = max(w_in_lo, __shfl_xor_sync(0xffffffffu, w_in_lo, o));
      w_in_hi = min(w_in_hi, __shfl_xor_sync(0xffffffffu, w_in_hi, o));
    }
  }

  // ---- K/V tile loads
  const int32_t* trow = a.table + int64_t{b} * 2 * a.max_pages;
  const T* pool = static_cast<const T*>(a.pool);
  const int64_t row_stride = int64_t{a.hkv} * D;
  // Page ids of tile u; false when u is not one of this CTA's tiles or its page is unmapped or
  // out of range (the tile is then neither loaded nor computed: its keys count as masked).
  auto lookup = [&](int32_t u, int32_t& kp, int32_t& vp) -> bool {
    if (u >= t1) return false;
    const int32_t lp = u / (kPage / KT);
    if (lp >= a.max_pages) return false;
    kp = __ldg(trow + lp);
    vp = __ldg(trow + a.max_pages + lp);
    return attn::page_pair_valid(kp, vp, a.num_pages);
  };
  auto issue = [&](int32_t u, int st, int32_t kp, int32_t vp) {
    const int32_t key0 = u * KT;
    const int32_t slot0 = key0 % kPage;
    const uint32_t sk_base = smem_u32(s_kv + st * 2 * KT * D);
    const uint32_t sv_base = sk_base + KT * D * static_cast<uint32_t>(sizeof(T));
    const T* kbase = pool + (int64_t{kp} * kPage + slot0) * row_stride + int64_t{hk} * D;
    const T* vbase = pool + (int64_t{vp} * kPage + slot0) * row_stride + int64_t{hk} * D;
#pragma unroll
    for (int it = 0; it < KT * DC / sk::kThreads; ++it) {
      const int idx = it * sk::kThreads + tid;
      const int k = idx / DC, c = idx % DC;
      const int32_t j = key0 + k;
      const bool in = j >= lo_all && j < hi_all;  // outside: zeros (never NaN garbage in P*V)
      const uint32_t off = static_cast<uint32_t>((k * D + ((c ^ (k & 7)) << 3)) * sizeof(T));
      cp_async16(sk_base + off, kbase + k * row_stride + c * 8, in);
      cp_async16(sv_base + off, vbase + k * row_stride + c * 8, in);
    }
  };

  // Pages of the prologue's tiles and of the next one to issue (false past t1: none when
  // t0 == t1). The page table is not the previous kernel's output: looked up before the wait.
  int32_t pkp[ST - 1], pvp[ST - 1];
  bool pok[ST - 1];
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    pkp[s] = pvp[s] = 0;
    pok[s] = lookup(t0 + s, pkp[s], pvp[s]);
  }
  int32_t nkp = 0, nvp = 0;
  bool nok = lookup(t0 + ST - 1, nkp, nvp);  // the next tile to issue, prefetched

  if (a.early_reads) pdl::wait();  // q and the new rows' K/V are read from here on
  // Split-KV with one split: rows that lie in no sequence are written by CTA 0 (the other CTAs
  // write only rows of their own sequence).
  if (direct && blockIdx.x == 0) {
    attn::zero_rows_outside_sequences(static_cast<T*>(a.out), a.cu_q, a.batch, a.total_q,
                                      int64_t{a.hq} * D);
  }

  // cp.async groups: every thread commits the same sequence of groups, one per tile slot, empty
  // when the tile is not loaded. The prologue commits ST - 1 groups (tiles t0 .. t0 + ST - 2,
  // Q in the first); iteration t commits one more (tile t + ST - 1). At the top of iteration t
  // the groups of tiles t .. t + ST - 2 may be pending, so wait_group(ST - 2) leaves exactly the
  // ST - 2 newest pending and tile t (and Q) landed; the barrier after it publishes every
  // thread's copies and ends all reads of tile t - 1's stage, which iteration t then refills.
  uint32_t vbits = 0;  // bit st: the tile in stage st is loaded (computed)
  if (t0 < t1) {
    const T* qg = static_cast<const T*>(a.q);
    for (int idx = tid; idx < MB * DC; idx += sk::kThreads) {
      const int m = idx / DC, c = idx % DC;
      const bool in = s_row[m].hi > s_row[m].lo;
      const T* src = in ? qg + s_row[m].rh * D + c * 8 : qg;
      cp_async16(smem_u32(s_q + m * D + ((c ^ (m & 7)) << 3)), src, in);
    }
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {  // group s = tile t0 + s (group 0 also holds Q)
      if (pok[s]) {
        issue(t0 + s, s, pkp[s], pvp[s]);
        vbits |= 1u << s;
      }
      cp_async_commit();
    }
  }

  // ---- main loop
  float o[RT][DT][4];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  }
  // Running max (exp2 domain) and sum of rows g and g + 8 of each row tile; l: this lane's columns.
  float m_run[RT][2], l_run[RT][2];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }
  uint32_t qa[kQRegs ? D / 16 : 1][4];
  uint32_t q_lane_row[RT];  // the Q row this lane addresses in ldmatrix, per row tile
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) q_lane_row[mt] = wm * MW + mt * 16 + (lane & 15);

  for (int32_t t = t0; t < t1; ++t) {
    cp_async_wait<ST - 2>();  // tile t (and Q) landed for this thread ...
    __syncthreads();          // ... for all; and every warp is done with tile t - 1's stage
    const int st = (t - t0) % ST;
    {
      const int ns = (st + ST - 1) % ST;  // stage of tile t + ST - 1 (= tile t - 1's)
      vbits &= ~(1u << ns);
      if (nok) {
        issue(t + ST - 1, ns, nkp, nvp);
        vbits |= 1u << ns;
      }
      cp_async_commit();
      nok = lookup(t + ST, nkp, nvp);
    }
    if constexpr (kQRegs) {
      if (t == t0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          const uint32_t chunk = kk * 2 + (lane >> 4);
          ldmatrix_x4(qa[kk],
                      smem_u32(s_q + q_lane_row[0] * D + ((chunk ^ (q_lane_row[0] & 7)) << 3)));
        }
      }
    }
    // Warp-uniform skips only from here on: every thread has passed this iteration's barrier and
    // committed its group.
    if (((vbits >> st) & 1u) == 0) continue;
    const int32_t key0 = t * KT;
    if constexpr (kWarpRange) {
      // None of this warp's rows sees a key of this tile: it would add exact zeros (running
      // max, sum and output unchanged), so skipping it changes no bit.
      if (key0 >= w_hi || key0 + KT <= w_lo) continue;
    }

    const uint32_t sk_base = smem_u32(s_kv + st * 2 * KT * D);
    const uint32_t sv_base = sk_base + KT * D * static_cast<uint32_t>(sizeof(T));
    // S = Q K^T for this warp's RT x 16 rows x KS keys.
    float s[RT][NT][4];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
      for (int n = 0; n < NT; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[RT][4];
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
        if constexpr (kQRegs) {
          af[mt][0] = qa[kk][0], af[mt][1] = qa[kk][1], af[mt][2] = qa[kk][2],
          af[mt][3] = qa[kk][3];
        } else {
          const uint32_t chunk = kk * 2 + (lane >> 4);
          ldmatrix_x4(af[mt],
                      smem_u32(s_q + q_lane_row[mt] * D + ((chunk ^ (q_lane_row[mt] & 7)) << 3)));
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int krow = wn * KS + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int chunk = kk * 2 + ((lane >> 3) & 1);
        uint32_t bf[4];
        ldmatrix_x4(bf, sk_base + static_cast<uint32_t>((krow * D + ((chunk ^ (krow & 7)) << 3)) *
                                                        sizeof(T)));
#pragma unroll
        for (int mt = 0; mt < RT; ++mt) {  // one K fragment, RT mma
          mma16816<T>(s[mt][2 * np], af[mt], bf[0], bf[1]);
          mma16816<T>(s[mt][2 * np + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
    // Mask, online softmax in the exp2 domain. Fragment element e of n-tile n of row tile mt:
    // row g + 8 * (e >> 1) of the tile, key kbase + n * 8 + (e & 1). Masked logits are -inf.
    // RT 1 and the verify variant: s * scale_log2 first, p = exp2f(s - m) (the kernel as it was).
    // kFastSoftmax (the prefill variant): the scale folded into the exponent's FMA,
    // p = 2^(s * scale_log2 - m) on the SFU alone, with m = max(s) * scale_log2 (rounding is
    // monotonic: the max of the rounded products); per element one FMNMX, FFMA, MUFU and FADD
    // instead of about eight instructions.
    const int32_t kbase = key0 + wn * KS + 2 * tq;
    float mx[RT][2];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) mx[mt][0] = mx[mt][1] = -INFINITY;
    if (kWarpRange && key0 >= w_in_lo && key0 + KT <= w_in_hi) {
      // Every row of this warp sees every key of the tile (inside the causal diagonal).
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) mx[mt][e >> 1] = fmaxf(mx[mt][e >> 1], s[mt][n][e]);
        }
      }
    } else {
      if constexpr (kPrefill) load_row_ranges();
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int ri = e >> 1;
            const int32_t j = kbase + n * 8 + (e & 1);
            bool vis = j >= rlo[mt][ri] && j < rhi[mt][ri];
            if (!kPrefill && j >= tpast) {  // kPackedTree, a current row: its mask bit
              const int64_t c = int64_t{j} - tpast;
              vis = vis && c < 32 && ((rword[mt][ri] >> c) & 1u) != 0;
            }
            if constexpr (kFastSoftmax) {
              s[mt][n][e] = vis ? s[mt][n][e] : -INFINITY;
            } else {
              s[mt][n][e] = vis ? s[mt][n][e] * a.scale_log2 : -INFINITY;
            }
            mx[mt][ri] = fmaxf(mx[mt][ri], s[mt][n][e]);
          }
        }
      }
    }
    float corr[RT][2], m_use[RT][2];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        mx[mt][ri] = fmaxf(mx[mt][ri], __shfl_xor_sync(0xffffffffu, mx[mt][ri], 1));
        mx[mt][ri] = fmaxf(mx[mt][ri], __shfl_xor_sync(0xffffffffu, mx[mt][ri], 2));
        const float m_new =
            fmaxf(m_run[mt][ri], kFastSoftmax ? mx[mt][ri] * a.scale_log2 : mx[mt][ri]);
        m_use[mt][ri] = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: keep exp2 finite
        corr[mt][ri] = kFastSoftmax ? exp2_ftz(m_run[mt][ri] - m_use[mt][ri])
                                    : exp2f(m_run[mt][ri] - m_use[mt][ri]);
        m_run[mt][ri] = m_new;
        l_run[mt][ri] *= corr[mt][ri];
      }
    }
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = kFastSoftmax
                              ? exp2_ftz(__fmaf_rn(s[mt][n][e], a.scale_log2, -m_use[mt][e >> 1]))
                              : exp2f(s[mt][n][e] - m_use[mt][e >> 1]);
          s[mt][n][e] = p;
          l_run[mt][e >> 1] += p;
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        o[mt][dt][0] *= corr[mt][0];
        o[mt][dt][1] *= corr[mt][0];
        o[mt][dt][2] *= corr[mt][1];
        o[mt][dt][3] *= corr[mt][1];
      }
    }
    // O += P V: P (fp32 accumulator layout) is the A fragment of 16-key steps.
#pragma unroll
    for (int ks = 0; ks < NT / 2; ++ks) {
      uint32_t pa[RT][4];
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
        pa[mt][0] = pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        pa[mt][1] = pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        pa[mt][2] = pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        pa[mt][3] = pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
      const int vrow = wn * KS + ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
#pragma unroll
      for (int dp = 0; dp < DT / 2; ++dp) {
        const int chunk = dp * 2 + (lane >> 4);
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, sv_base + static_cast<uint32_t>(
                                            (vrow * D + ((chunk ^ (vrow & 7)) << 3)) * sizeof(T)));
#pragma unroll
        for (int mt = 0; mt < RT; ++mt) {  // one V fragment, RT mma
          mma16816<T>(o[mt][2 * dp], pa[mt], vf[0], vf[1]);
          mma16816<T>(o[mt][2 * dp + 1], pa[mt], vf[2], vf[3]);
        }
      }
    }
  }

  // ---- epilogue
  // Every group committed so far is empty or landed (the last real tile was waited for in its
  // iteration); waiting for all anyway keeps the buffers below free of in-flight copies.
  cp_async_wait<0>();
  // The row sums over the 4 lanes (tq) that hold a row's columns.
  auto reduce_row_sums = [&] {
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
      for (int ri = 0; ri < 2; ++ri) {
        l_run[mt][ri] += __shfl_xor_sync(0xffffffffu, l_run[mt][ri], 1);
        l_run[mt][ri] += __shfl_xor_sync(0xffffffffu, l_run[mt][ri], 2);
      }
    }
  };
  const int64_t part_stride = int64_t{a.total_q} * a.hq;
  T* out = static_cast<T*>(a.out);
  if constexpr (kPrefill) {
    // One warp holds all keys of its 32 rows: no merge. With one split its normalised output is
    // staged as T in its own 32 rows of s_q (no other warp reads them; ldmatrix is
    // warp-synchronous, and the __syncwarp orders its last reads before the writes) and leaves
    // as 16-byte row stores; with several, the fp32 partials go out from the fragments.
    pdl::trigger();
    reduce_row_sums();
    if (direct) {
      __syncwarp();
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
        for (int ri = 0; ri < 2; ++ri) {
          const int row = wm * MW + mt * 16 + g + 8 * ri;
          const float l = l_run[mt][ri];
          const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: zeros
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            const float v0 = l > 0.0f ? o[mt][dt][2 * ri] * inv : 0.0f;
            const float v1 = l > 0.0f ? o[mt][dt][2 * ri + 1] * inv : 0.0f;
            *reinterpret_cast<uint32_t*>(s_q + row * D + ((dt ^ (row & 7)) << 3) + 2 * tq) =
                pack2<T>(v0, v1);
          }
        }
      }
      __syncwarp();
      for (int idx = lane; idx < MW * DC; idx += 32) {
        const int row = wm * MW + idx / DC, c = idx % DC;
        const int64_t rh = s_row[row].rh;
        if (rh < 0) continue;
        *reinterpret_cast<uint4*>(out + rh * D + c * 8) =
            *reinterpret_cast<const uint4*>(s_q + row * D + ((c ^ (row & 7)) << 3));
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
        for (int ri = 0; ri < 2; ++ri) {
          const int64_t rh = s_row[wm * MW + mt * 16 + g + 8 * ri].rh;
          if (rh < 0) continue;
          const int64_t slot = split * part_stride + rh;
          if (m_run[mt][ri] != -INFINITY) {
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
              *reinterpret_cast<float2*>(a.part_o + slot * D + dt * 8 + 2 * tq) =
                  make_float2(o[mt][dt][2 * ri], o[mt][dt][2 * ri + 1]);
            }
          }
          if (tq == 0)
            a.part_ml[slot] = make_float2(m_run[mt][ri], l_run[mt][ri]);  // (-inf, 0): neutral
        }
      }
    }
  } else {
    // Merge the WN warps of each row tile, write the output or the partials. Slot (mt, warp) =
    // mt * 4 + warp of the merge buffer and of s_ml holds this warp's part of row tile mt: with
    // RT 1 the slot is the warp (its tile is its warp row wm); the verify variant (WM 1, RT 2)
    // lays out both tiles' 4 warps, slots 0-3 (tile 0) and 4-7 (tile 1). Row lr of the CTA is in
    // tile lr >> 4 either way, whose WN warps hold slots (lr >> 4) * WN ... + WN - 1.
    __syncthreads();  // the K/V ring becomes the merge buffer
    pdl::trigger();
    reduce_row_sums();
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
      const int slot = mt * (sk::kThreads / 32) + warp;
      float* mw = s_merge + slot * 16 * kMergeStride;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        *reinterpret_cast<float2*>(mw + g * kMergeStride + dt * 8 + 2 * tq) =
            make_float2(o[mt][dt][0], o[mt][dt][1]);
        *reinterpret_cast<float2*>(mw + (g + 8) * kMergeStride + dt * 8 + 2 * tq) =
            make_float2(o[mt][dt][2], o[mt][dt][3]);
      }
      if (tq == 0) {
        s_ml[slot * 16 + g] = make_float2(m_run[mt][0], l_run[mt][0]);
        s_ml[slot * 16 + g + 8] = make_float2(m_run[mt][1], l_run[mt][1]);
      }
    }
    __syncthreads();
    constexpr int D4 = D / 4;
    for (int idx = tid; idx < MB * D4; idx += sk::kThreads) {
      const int lr = idx / D4, d = (idx % D4) * 4;
      const int64_t rh = s_row[lr].rh;
      if (rh < 0) continue;
      const int w0 = (lr >> 4) * WN, rr = lr & 15;  // first slot of the row's tile, row in tile
      float mmax = -INFINITY;
#pragma unroll
      for (int w = 0; w < WN; ++w) mmax = fmaxf(mmax, s_ml[(w0 + w) * 16 + rr].x);
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lsum = 0.0f;
      if (mmax != -INFINITY) {
#pragma unroll
        for (int w = 0; w < WN; ++w) {
          const float2 ml = s_ml[(w0 + w) * 16 + rr];
          const float wt = exp2f(ml.x - mmax);  // a warp that saw nothing: exp2(-inf) = 0
          lsum += wt * ml.y;
          const float4 v =
              *reinterpret_cast<const float4*>(s_merge + ((w0 + w) * 16 + rr) * kMergeStride + d);
          acc[0] += wt * v.x;
          acc[1] += wt * v.y;
          acc[2] += wt * v.z;
          acc[3] += wt * v.w;
        }
      }
      if (direct) {
        const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;  // no visible key: zeros
        const float res[4] = {acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv};
        fwd::store_span<T, 4, true>(out + rh * D + d, res);
      } else {
        const int64_t slot = split * part_stride + rh;
        if (mmax != -INFINITY) {
          *reinterpret_cast<float4*>(a.part_o + slot * D + d) =
              make_float4(acc[0], acc[1], acc[2], acc[3]);
        }
        if (d == 0) a.part_ml[slot] = make_float2(mmax, lsum);  // (-inf, 0): neutral
      }
    }
  }
}

// Merges the splits of one (row, head) per warp: out = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M)
// l_s. Rows in no sequence, padding rows and rows that saw no key get zeros. Launched as a
// programmatic dependent of split_kernel: griddepcontrol.wait orders it after its writes.
// Latency, not bytes: a split's (m, l) and O used to be two dependent loads (O only where m was
// finite), so a decode's 4-16 splits were 8-32 round trips to L2 in a row (5.0 us under ncu at 4
// splits, session 16). Now the row's owner is found before the wait (cu_q and q_pos: not written
// by the split kernel, pdl.cuh "early reads"), and the partials are loaded B splits at a time,
// (m, l) and O together. B is 8, or for decode rows 16 or 32, the smallest holding every split
// (launch_split_dim; 8 at head dim 256), so a decode is one round trip after the wait (a
// 32k-token decode's 32 splits were four with B = 8) and the max comes from the batch's own
// (m, l) when it holds every split, with no separate pass. With more splits than B, a max pass
// reads every split's m beside the first batch and the batches follow one another. The sums are
// the same operations in the same split order whatever B is (the output does not depend on it);
// neutral partials (m = -inf) are loaded too (their O was never written) and skipped.
template <typename T, int D, int B>
__global__ void __launch_bounds__(128) combine_kernel(const SplitArgs a) {
  constexpr int E = D / 32;  // dims per lane
  // Where the next kernel (the o projection) is let in (a.combine_trigger, paged_attention.h).
  // kTriggerFirst: before this kernel even waits, i.e. while the split kernel still runs, so its
  // early reads (W, the residual it adds to) overlap the attention. Safe only because that kernel
  // reads nothing the split kernel writes before its own wait, and its wait (this grid complete)
  // implies the split grid complete; pdl.cuh's one-kernel-ahead rule does not hold here.
  // kTriggerLast: after the stores, so no CTA of this kernel holds registers the next one's CTAs
  // need. kTriggerAfterWait: pdl::enter, as every other kernel.
  if (a.combine_trigger == kTriggerFirst) pdl::trigger();
  auto wait_for_split = [&] {
    if (a.combine_trigger == kTriggerAfterWait) {
      pdl::enter();
    } else {
      pdl::wait();
    }
  };
  if (!a.early_reads) wait_for_split();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t item = int64_t{blockIdx.x} * 4 + warp;  // r * Hq + h
  const int64_t stride = int64_t{a.total_q} * a.hq;
  if (item >= stride) return;
  const int32_t r = static_cast<int32_t>(item / a.hq);
  const int32_t b = owning_sequence(a.cu_q, a.batch, r);
  const bool valid = b >= 0 && r < a.cu_q[b + 1] && r - a.cu_q[b] < a.max_q && a.q_pos[r] >= 0;
  if (a.early_reads) wait_for_split();  // the partials are read from here on
  float acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
  float lsum = 0.0f;
  if (valid) {  // warp-uniform
    const int32_t splits = a.splits;
    float2 ml[B];
    float v[B][E];
    auto load_batch = [&](int32_t s0) {
#pragma unroll
      for (int j = 0; j < B; ++j) {
        const int64_t s = s0 + j;
        ml[j] = make_float2(-INFINITY, 0.0f);
        if (s < splits) {
          ml[j] = a.part_ml[s * stride + item];
          fwd::load_span<float, E, true>(a.part_o + (s * stride + item) * D + lane * E, v[j]);
        }
      }
    };
    load_batch(0);
    float mmax = -INFINITY;
    if (splits <= B) {
#pragma unroll
      for (int j = 0; j < B; ++j) mmax = fmaxf(mmax, ml[j].x);
    } else {
      for (int32_t s = lane; s < splits; s += 32)
        mmax = fmaxf(mmax, a.part_ml[s * stride + item].x);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
    }
    if (mmax != -INFINITY) {
      for (int32_t s0 = 0; s0 < splits; s0 += B) {
        if (s0 > 0) load_batch(s0);
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
  fwd::store_span<T, E, true>(static_cast<T*>(a.out) + item * D + lane * E, acc);
  if (a.combine_trigger == kTriggerLast) pdl::trigger();
}

template <typename T, int D, int WM, int RT>
void launch_split_kernel(const SplitArgs& a, int64_t ctas, cudaStream_t stream) {
  constexpr int smem = static_cast<int>(sk::smemBytes(D, WM, RT));
  attn::raise_dynamic_smem_once<split_kernel<T, D, WM, RT>>(smem);
  pdl::launch(split_kernel<T, D, WM, RT>, dim3(static_cast<unsigned>(ctas)), dim3(sk::kThreads),
              smem, stream, a);
  ES_CUDA_CHECK_LAUNCH();
}

template <typename T, int D>
void launch_split_dim(const SplitArgs& a, const PagedAttentionPlan& plan, cudaStream_t stream) {
  const int64_t ctas = plan.splitCtas;
  constexpr int RT2 = sk::kPrefillRowTiles;
  static_assert(sk::kVerifyRowTiles == RT2);
  if (plan.rowTiles == RT2) {
    // The plan gives rowTiles 2 only where rowTilesBuilt: warpsM 4 (prefill) or 1 (verify).
    if constexpr (sk::rowTilesBuilt(D, 4, RT2) && sk::rowTilesBuilt(D, 1, RT2)) {
      ES_CHECK_ARG(plan.warpsM == 4 || plan.warpsM == 1, "launchPagedAttention", "plan.warpsM",
                   plan.warpsM, "must be 4 or 1 with rowTiles 2");
      if (plan.warpsM == 4) {
        ES_CHECK_ARG(a.mask != static_cast<int32_t>(AttentionMask::kPackedTree),
                     "launchPagedAttention", "mask", a.mask,
                     "rowTiles 2 at warpsM 4 takes no packed tree");
        launch_split_kernel<T, D, 4, RT2>(a, ctas, stream);
      } else {
        launch_split_kernel<T, D, 1, RT2>(a, ctas, stream);
      }
    } else {
      ES_THROW(InvalidArgument, "launchPagedAttention: rowTiles 2 is not built for head dim ", D);
    }
  } else {
    switch (plan.warpsM) {
      case 1:
        launch_split_kernel<T, D, 1, 1>(a, ctas, stream);
        break;
      case 2:
        launch_split_kernel<T, D, 2, 1>(a, ctas, stream);
        break;
      default:
        launch_split_kernel<T, D, 4, 1>(a, ctas, stream);
        break;
    }
  }
  if (plan.numSplits > 1) {
    const int64_t ctas = (int64_t{a.total_q} * a.hq + 3) / 4;
    // The batch B (combine_kernel): 8, or for decode rows (maxQSeqLen 1) up to 32. At head dim
    // 256 a split's O is 8 floats a lane, so 8 splits already hold 80 registers. Session 17 on the
    // H200: a 32k-token batch-1 decode's attention 39.4 -> 38.3 us (32 splits), at 4k 11.95 ->
    // 11.5 us (16); the 16-row verify ran 21.8 -> 21.5 us alone, yet Qwen3-8B's verify forward at
    // 4k took 6.02 ms with B 16 against 5.38 with B 8 (decode 4.63 either way), measured while the
    // o gemv still came in after the combine's wait, when each combine CTA (128 registers a
    // thread at B 16) kept an o CTA off its SM (docs/perf.md, session 17): verify rows keep B 8.
    auto combine = combine_kernel<T, D, 8>;
    if constexpr (D <= 128) {
      if (a.max_q == 1 && plan.numSplits > 16) {
        combine = combine_kernel<T, D, 32>;
      } else if (a.max_q == 1 && plan.numSplits > 8) {
        combine = combine_kernel<T, D, 16>;
      }
    }
    pdl::launch(combine, dim3(static_cast<unsigned>(ctas)), dim3(128), 0, stream, a);
  }
}

void launch_split(const PagedAttentionParams& p, const PagedAttentionPlan& plan,
                  cudaStream_t stream) {
  if (detail::prefillWgmmaApplies(p,
                                  plan)) {  // the wgmma prefill kernel (paged_attention_prefill.h)
    detail::launchPrefillWgmma(p, plan, stream);
    return;
  }
  const RaggedQueryArgs& q = p.query;
  SplitArgs a{};
  a.q = q.q;
  a.out = q.out;
  a.cu_q = q.cuQSeqLens;
  a.q_pos = q.qPositions;
  a.total_q = q.totalQ;
  a.max_q = q.maxQSeqLen;
  a.hq = q.numQHeads;
  a.group = q.numQHeads / p.kv.numKVHeads;
  a.words = (q.maxQSeqLen + 31) / 32;
  a.pool = p.kv.pool;
  a.table = p.kv.pageTable;
  a.num_pages = p.kv.numPages;
  a.max_pages = p.kv.maxPagesPerSeq;
  a.hkv = p.kv.numKVHeads;
  a.kv_lens = p.kvLengths;
  a.packed = p.packedMask;
  a.mask = static_cast<int32_t>(p.mask);
  a.window = p.slidingWindow;
  a.batch = p.batchSize;
  a.scale_log2 = p.scale * 1.4426950408889634f;
  a.splits = plan.numSplits;
  a.tiles_per_split = plan.tilesPerSplit;
  a.row_blocks = plan.rowBlocks;
  a.early_reads = pdl::early_reads() ? 1 : 0;
  // When the combine lets the next kernel in (paged_attention.h).
  static const bool combine_trigger_first = env_switch_on("ES_ATTN_COMBINE_TRIGGER_FIRST");
  static const int combine_trigger_last =
      env_choice("ES_ATTN_COMBINE_TRIGGER_LAST", {0, 1}, -1, " (or unset: nextFillsSms decides)");
  const bool last =
      combine_trigger_last == -1 ? p.nextFillsSms : combine_trigger_last == 1 && q.maxQSeqLen > 1;
  a.combine_trigger = kTriggerAfterWait;
  if (last) {
    a.combine_trigger = kTriggerLast;
  } else if (pdl::enabled() && q.maxQSeqLen == 1 && combine_trigger_first) {
    a.combine_trigger = kTriggerFirst;
  }
  a.part_o = static_cast<float*>(p.workspace);
  a.part_ml = reinterpret_cast<float2*>(a.part_o + int64_t{plan.numSplits} * q.totalQ *
                                                       q.numQHeads * p.headDim);
  fwd::dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      switch (p.headDim) {
        case 64:
          launch_split_dim<T, 64>(a, plan, stream);
          break;
        case 128:
          launch_split_dim<T, 128>(a, plan, stream);
          break;
        default:
          launch_split_dim<T, 256>(a, plan, stream);
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
    launch_split(p, plan, stream);
    return;
  }
  ES_CHECK_ARG(p.query.numQHeads <= 65535, "launchPagedAttention", "query.numQHeads",
               p.query.numQHeads, "must be <= 65535 (grid y)");
  const Args a{p.query.q,           p.query.out,
               p.query.cuQSeqLens,  p.query.qPositions,
               p.query.totalQ,      (p.query.maxQSeqLen + 31) / 32,
               p.query.numQHeads,   p.kv.pool,
               p.kv.pageTable,      p.kv.numPages,
               p.kv.maxPagesPerSeq, p.kv.numKVHeads,
               p.kvLengths,         static_cast<int32_t>(p.mask),
               p.packedMask,        p.slidingWindow,
               p.batchSize,         p.scale};
  const bool aligned =
      fwd::aligned16(p.query.q) && fwd::aligned16(p.query.out) && fwd::aligned16(p.kv.pool);
  fwd::dispatch_dtype(p.dtype, [&](auto tag) {
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
  launch_split(p, plan, stream);
}

}  // namespace es::kernel
