// The wgmma prefill attention kernel (paged_attention_prefill.h says which calls take it).
//
// Shared memory, from a 1024-byte aligned base (every operand tile in the 128-byte swizzled
// layout of wgmma.cuh: [64-column half][row][128 bytes], chunk c of row r at c ^ (r & 7)):
//   Q          128 packed rows x 128 dims          32 KiB
//   K stage s  128 keys x 128 dims, s = 0, 1     2 x 32 KiB
//   V stage s  128 keys x 128 dims, s = 0, 1, 2  3 x 32 KiB
//   rows       per packed row: q/out row-head index, visible keys [lo, hi)
//   mbarriers  "full" and "free" per K and V stage
// 195 KiB a CTA (with 1 KiB of alignment slack): one CTA (8 warps) per SM, up to 255 registers a
// thread (S 64, O 64, P of two tiles 2 x 32; ptxas, CUDA 13.0: 196, no spills).
//
// Software pipeline (each warpgroup its 64 rows): iteration t issues S = Q K_t^T and O += P V of
// tile t - 1 as two wgmma groups, waits for S only, runs tile t's softmax while P V is on the
// tensor cores, then waits for P V and rescales O (O = corr_t (O + P_{t-1} V_{t-1})). The first
// tile runs S alone, a last drain step P V alone. Every warpgroup computes every tile of the
// CTA (a tile outside its rows' ranges is masked to exact zeros), so no wgmma group spans a
// branch: ptxas serializes wgmmas whose groups span divergent paths.
//
// Ping-pong: the two warpgroups take turns to issue their wgmma groups (named barriers), so one
// warpgroup's softmax runs while the other's products are on the tensor cores, and they never
// meet at a block barrier: each loads its half (64 keys) of every K and V tile by cp.async and
// signals the stage's "full" mbarrier when its copies land (cp.async.mbarrier.arrive.noinc); a
// consumer waits on it, then fence.proxy.async makes the copies visible to wgmma's async proxy.
// Every thread arrives on a stage's "free" mbarrier once its wgmma reads of it are done, and a
// stage is refilled after its free phase completes. Loads run one iteration ahead, staggered
// like the pipeline: iteration t loads K_{t+1} and V_t (V_{t-1} is still being read); V has a
// third stage so that a warpgroup ahead by up to one iteration need not wait for the other.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/attention_math.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/forward_ops_device.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/paged_attention_prefill.h"
#include "kernels/paged_attention_rows.cuh"
#include "kernels/paged_attention_split.h"
#include "kernels/pdl.cuh"
#include "kernels/wgmma.cuh"
#include "common/kv_page.h"

namespace es::kernel::detail {
namespace {

constexpr int kD = 128;                    // head dim
constexpr int kRows = 128;                 // packed rows per CTA (2 warpgroups x 64)
constexpr int kKeys = kv::kTokensPerPage;  // keys per tile: one page of one KV head
constexpr int kThreads = 256;
constexpr uint32_t kHalfBytes = kRows * 128;  // one 64-column half of a 128-row tile
constexpr uint32_t kTileBytes = 2 * kHalfBytes;
constexpr uint32_t kQOff = 0, kKOff = kTileBytes;
static_assert(kKeys == 128 && kRows == 128, "tiles of 128 rows: 2 halves of 16 KiB");
static_assert(splitkv::maxRowsPerCta(splitkv::kPrefillRowTiles) == kRows,
              "the plan's row blocks are this kernel's CTAs");

struct Row {
  int64_t rh;      // r * Hq + h (q/out row-head index); -1: not a row of this CTA
  int32_t lo, hi;  // visible keys [lo, hi); hi <= lo: none
};
// K in 2 stages, V in 3: V_t replaces V_{t-3}, so a warpgroup up to about one tile ahead need not
// wait for the other to finish V_{t-2}. Then the rows, then the ring's mbarriers.
constexpr int kVStages = 3;
constexpr uint32_t kVOff = 3 * kTileBytes;
constexpr uint32_t kRowOff = (3 + kVStages) * kTileBytes;
constexpr uint32_t kBarOff = kRowOff + kRows * sizeof(Row);
constexpr int kBarriers = 2 * (2 + kVStages);  // full and free, per K and V stage
constexpr int kSmemBytes = static_cast<int>(kBarOff + 8 * kBarriers) + 1024;  // + alignment
static_assert(kSmemBytes <= 232448, "fits the 227 KiB per-block limit");

struct PrefillArgs {
  const void* q;
  void* out;
  const int32_t* cu_q;
  const int32_t* q_pos;
  int32_t total_q, max_q, hq, group;
  const void* pool;
  const int32_t* table;
  int32_t num_pages, max_pages, hkv;
  const int32_t* kv_lens;
  int32_t causal, window, batch, row_blocks;
  float scale_log2;     // scale * log2(e)
  int32_t early_reads;  // 1: metadata and page table read before the PDL wait
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
using attn::exp2_ftz;
using attn::pack2;
// Byte offset of 16-byte chunk c (0..15) of row r in a swizzled 128-row tile.
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * kHalfBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
// Named barriers (0 is __syncthreads): one per warpgroup (ids 1, 2) for its epilogue, and the
// ping-pong turns (ids 3, 4).
constexpr int kWarpgroupBarrier = 1, kTurnBarrier = 3;

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) prefill_kernel(const PrefillArgs a) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  Row* s_row = reinterpret_cast<Row*>(smem_raw + (base - raw) + kRowOff);
  const uint32_t s_q = base + kQOff;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Warpgroup: packed rows [64 wg, 64 wg + 64). Broadcast from lane 0 so that the compiler knows
  // it is warp-uniform (descriptors and stage addresses then live in uniform registers).
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
  const int g = lane >> 2, tq = lane & 3;        // accumulator row / column pair of this lane
  const int r0 = wg * 64 + (warp & 3) * 16 + g;  // this lane's rows r0 and r0 + 8
  // KV head fastest (the CTAs of one row block read the same pages), then row blocks, last
  // first: under a causal mask they see the most keys, so they start in the first wave.
  int32_t bid = blockIdx.x;
  const int32_t hk = bid % a.hkv;
  bid /= a.hkv;
  const int32_t rb = a.row_blocks - 1 - bid % a.row_blocks;
  const int32_t b = bid / a.row_blocks;
  if (!a.early_reads) pdl::wait();

  // ---- rows and key ranges (as the split-KV kernel: paged_attention.h's rules)
  const int32_t q0 = a.cu_q[b];
  const int32_t q_len = a.cu_q[b + 1] - q0;
  const int32_t kv_len = a.kv_lens[b];
  if (tid < kRows) {
    const attn::PackedRowKeys k =
        attn::packed_row_keys(rb * kRows + tid, q0, q_len, kv_len, hk, a.q_pos, a.total_q, a.max_q,
                              a.hq, a.group, a.max_pages, a.causal != 0, a.window);
    s_row[tid] = Row{k.rh, k.lo, k.hi};
  }
  // Ring barriers: per K stage (2) and V stage (3) a "full" one (each thread's copies of its
  // warpgroup's half of the tile, 256 arrivals) and a "free" one (every thread done reading it,
  // 256 arrivals).
  const uint32_t bars = base + kBarOff;
  auto full_k = [&](int st) { return bars + 8 * st; };
  auto free_k = [&](int st) { return bars + 16 + 8 * st; };
  auto full_v = [&](int st) { return bars + 32 + 8 * st; };
  auto free_v = [&](int st) { return bars + 56 + 8 * st; };
  if (tid == 0) {
    for (int i = 0; i < kBarriers; ++i) mbar::init(bars + 8 * i, kThreads);
  }
  __syncthreads();

  // The union of the CTA's row ranges: its tiles.
  const attn::KeyRange keys = attn::rows_key_union(s_row, kRows, lane);
  // Tiles [t0, t1); broadcast from lane 0 (warp-uniform to the compiler: see wg).
  const int32_t lo_all = __shfl_sync(0xffffffffu, keys.lo, 0);
  const int32_t hi_all = __shfl_sync(0xffffffffu, keys.hi, 0);
  const int32_t t0 = __shfl_sync(0xffffffffu, hi_all > 0 ? lo_all / kKeys : 0, 0);
  const int32_t t1 = __shfl_sync(0xffffffffu, hi_all > 0 ? (hi_all - 1) / kKeys + 1 : 0, 0);
  const int32_t lo_r[2] = {s_row[r0].lo, s_row[r0 + 8].lo};
  const int32_t hi_r[2] = {s_row[r0].hi, s_row[r0 + 8].hi};

  // ---- K/V tile loads: tile u is page u of the sequence
  const int32_t* trow = a.table + int64_t{b} * 2 * a.max_pages;
  const T* pool = static_cast<const T*>(a.pool);
  const int64_t row_stride = int64_t{a.hkv} * kD;
  // False when u is not one of the CTA's tiles or its page is unmapped / out of range (the tile
  // is then zero-filled and its keys count as masked).
  auto lookup = [&](int32_t u, int32_t& kp, int32_t& vp) -> bool {
    if (u >= t1 || u >= a.max_pages) return false;
    kp = __ldg(trow + u);
    vp = __ldg(trow + a.max_pages + u);
    return attn::page_pair_valid(kp, vp, a.num_pages);
  };
  // This warpgroup's 64 keys [64 wg, 64 wg + 64) of K or V tile u into the stage at smem address
  // dst, by its 128 threads. Keys outside the CTA's union range are zero-filled (never NaN
  // garbage in P V); page < 0 (an invalid page pair): the whole tile.
  constexpr int kCopies = 64 * 16 / 128;  // per thread and tile
  constexpr int kKeyStep = 128 / 16;      // keys between a thread's copies
  // Copy `it` of this thread moves 16-byte chunk c_ld of key k_ld + kKeyStep it: its swizzled
  // offset is tile_off(k_ld, c_ld) + kKeyStep it 128 (kKeyStep keeps key & 7).
  const int loader = tid & 127;
  const int c_ld = loader & 15;
  const int k_ld = 64 * wg + (loader >> 4);
  const uint32_t dst_ld = tile_off(k_ld, c_ld);
  const int64_t src_ld = int64_t{k_ld} * row_stride + int64_t{hk} * kD + c_ld * 8;
  auto issue_rows = [&](int32_t u, uint32_t dst, int32_t page) {
    const int32_t key0 = u * kKeys;
    const T* src = pool + int64_t{max(page, 0)} * kKeys * row_stride + src_ld;
    if (page >= 0 && key0 >= lo_all && key0 + kKeys <= hi_all) {  // CTA-uniform: no key masked
#pragma unroll
      for (int it = 0; it < kCopies; ++it) {
        cp_async16_shared(dst + dst_ld + it * kKeyStep * 128, src + it * kKeyStep * row_stride, 16);
      }
    } else {
#pragma unroll
      for (int it = 0; it < kCopies; ++it) {
        const int32_t j = key0 + k_ld + it * kKeyStep;
        const bool in = page >= 0 && j >= lo_all && j < hi_all;
        cp_async16_shared(dst + dst_ld + it * kKeyStep * 128, src + it * kKeyStep * row_stride,
                          in ? 16 : 0);
      }
    }
  };
  auto k_stage = [&](int st) { return base + kKOff + st * kTileBytes; };
  auto v_stage = [&](int st) { return base + kVOff + st * kTileBytes; };
  // Page lookups run an iteration ahead: tile t's in ok_cur, tile t + 1's in ok_next / kp_next /
  // vp_next (the pages of the tile issued next).
  int32_t kp_first = 0, vp_first = 0, kp_next = 0, vp_next = 0;
  bool ok_cur = lookup(t0, kp_first, vp_first);
  bool ok_next = lookup(t0 + 1, kp_next, vp_next);

  if (a.early_reads) pdl::wait();  // q and the rows' K/V are read from here on
  if (blockIdx.x == 0) {           // rows in no sequence (each CTA writes only its own rows)
    attn::zero_rows_outside_sequences(static_cast<T*>(a.out), a.cu_q, a.batch, a.total_q,
                                      int64_t{a.hq} * kD);
  }

  if (t0 < t1) {
    const T* qg = static_cast<const T*>(a.q);
#pragma unroll
    for (int it = 0; it < kRows * 16 / kThreads; ++it) {
      const int idx = it * kThreads + tid;
      const int m = idx >> 4, c = idx & 15;
      const bool in = s_row[m].hi > s_row[m].lo;
      const T* src = in ? qg + s_row[m].rh * kD + c * 8 : qg;
      cp_async16_shared(s_q + tile_off(m, c), src, in ? 16 : 0);
    }
    issue_rows(t0, k_stage(0), ok_cur ? kp_first : -1);
    mbar::arrive_on_copies(full_k(0));
    cp_async_commit();
    cp_async_wait<0>();  // Q (and this thread's part of K_t0)
    wgmma::fence_proxy_async_shared();
    __syncthreads();                                         // Q in place for both warpgroups
    if (wg == 1) mbar::named_arrive(kTurnBarrier, 2 * 128);  // warpgroup 0 issues first
  }

  float o[64], s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = s[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  uint32_t pa[kKeys / 16][4];  // P of the last tile (the A operand of its P V)
  float corr[2];
  // The softmax of tile t (in s) into P (pa_out) and the running max / sum; corr rescales O.
  auto softmax_tile = [&](int32_t t, bool ok, uint32_t(&pa_out)[kKeys / 16][4]) {
    const int32_t key0 = t * kKeys;
    float mx[2] = {-INFINITY, -INFINITY};
    const bool full = ok && key0 >= max(lo_r[0], lo_r[1]) && key0 + kKeys <= min(hi_r[0], hi_r[1]);
    if (full) {
#pragma unroll
      for (int i = 0; i < 64; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int ri = (i >> 1) & 1;
        const int32_t j = key0 + 8 * (i >> 2) + 2 * tq + (i & 1);
        s[i] = ok && j >= lo_r[ri] && j < hi_r[ri] ? s[i] : -INFINITY;
        mx[ri] = fmaxf(mx[ri], s[i]);
      }
    }
    float m_use[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 1));
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 2));
      const float m_new = fmaxf(m_run[ri], mx[ri] * a.scale_log2);
      m_use[ri] = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: keep exp2 finite
      corr[ri] = exp2_ftz(m_run[ri] - m_use[ri]);
      m_run[ri] = m_new;
      l_run[ri] *= corr[ri];
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int ri = (i >> 1) & 1;
      s[i] = exp2_ftz(__fmaf_rn(s[i], a.scale_log2, -m_use[ri]));
      l_run[ri] += s[i];
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      pa_out[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      pa_out[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      pa_out[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      pa_out[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  auto issue_s = [&](uint32_t sk) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * kHalfBytes + (kk & 3) * 32;
      wgmma::wgmma_m64n128k16_ss<T, false>(s,
                                           wgmma::desc_sw128(s_q + wg * 64 * 128 + koff, 16, 1024),
                                           wgmma::desc_sw128(sk + koff, 16, 1024), kk > 0);
    }
    wgmma::commit();
  };
  auto issue_pv = [&](uint32_t sv) {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma::wgmma_m64n128k16_rs<T, true>(o, pa[kk],
                                          wgmma::desc_sw128(sv + kk * 2048, kHalfBytes, 1024));
    }
    wgmma::commit();
  };
  // Iteration t starts here: this warpgroup loads its half of K_{t+1} and V_t once both
  // warpgroups have freed those stages (K_{t-1}, V_{t-3}), waits for the "full" barriers of K_t
  // and V_{t-1}, and then for its turn: the warpgroups take turns to issue their wgmma groups
  // (named barriers kTurnBarrier + wg), so one's softmax runs while the other's matrix products
  // are on the tensor cores. Returns whether tile t's page pair is valid (else its keys are
  // masked and its V is zeros).
  int32_t vp_cur = vp_first;
  auto begin_tile = [&](int32_t t) -> bool {
    const int32_t u = t - t0;
    const bool ok = ok_cur;
    if (t + 1 < t1) {
      const int st = (u + 1) & 1, fill = (u + 1) >> 1;
      if (fill > 0) mbar::wait(free_k(st), (fill - 1) & 1);
      issue_rows(t + 1, k_stage(st), ok_next ? kp_next : -1);
      mbar::arrive_on_copies(full_k(st));
    }
    if (t < t1) {
      const int fill = u / kVStages, st = u - kVStages * fill;
      if (fill > 0) mbar::wait(free_v(st), (fill - 1) & 1);
      issue_rows(t, v_stage(st), ok ? vp_cur : -1);
      mbar::arrive_on_copies(full_v(st));
      mbar::wait(full_k(u & 1), (u >> 1) & 1);
    }
    if (t > t0) {
      const int fill = (u - 1) / kVStages;
      mbar::wait(full_v(u - 1 - kVStages * fill), fill & 1);
    }
    wgmma::fence_proxy_async_shared();  // the copies, seen through the barriers, for wgmma
    mbar::named_sync(kTurnBarrier + wg, 2 * 128);
    ok_cur = ok_next;
    vp_cur = vp_next;
    ok_next = lookup(t + 2, kp_next, vp_next);
    return ok;
  };
  // After issuing: the other warpgroup's turn (warpgroup 1's last turn hands over nothing).
  auto end_turn = [&](int32_t t) {
    if (wg == 0 || t < t1) mbar::named_arrive(kTurnBarrier + (wg ^ 1), 2 * 128);
  };
  // This thread is done reading K_t (after S) or V_t (after P V).
  auto k_read = [&](int32_t t) { mbar::arrive(free_k((t - t0) & 1)); };
  auto v_read = [&](int32_t t) { mbar::arrive(free_v((t - t0) % kVStages)); };
  auto v_of = [&](int32_t t) { return v_stage((t - t0) % kVStages); };
  if (t0 < t1) {
    {  // tile t0: S only
      const bool ok = begin_tile(t0);
      wgmma::fence_operand(s);
      wgmma::fence();
      issue_s(k_stage(0));
      end_turn(t0);
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      k_read(t0);
      softmax_tile(t0, ok, pa);
    }
    for (int32_t t = t0 + 1; t < t1; ++t) {
      const bool ok = begin_tile(t);
      wgmma::fence_operand(s);
      wgmma::fence_operand(o);
      wgmma::fence();
      issue_s(k_stage((t - t0) & 1));
      issue_pv(v_of(t - 1));
      end_turn(t);
      wgmma::wait<1>();  // S: P V stays in flight during the softmax
      wgmma::fence_operand(s);
      k_read(t);
      uint32_t pn[kKeys / 16][4];
      softmax_tile(t, ok, pn);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) wgmma::fence_operand(pa[kk]);  // read until here
      v_read(t - 1);
      // O = corr (O + P_{t-1} V_{t-1}): tile t - 1 joins tile t's running max.
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
        for (int e = 0; e < 4; ++e) pa[kk][e] = pn[kk][e];
      }
    }
    {  // drain: P V of the last tile
      begin_tile(t1);
      wgmma::fence_operand(o);
      wgmma::fence();
      issue_pv(v_of(t1 - 1));
      end_turn(t1);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
    }
  }

  // ---- epilogue: normalise, stage as T in this warpgroup's own Q rows, 16-byte row stores.
  pdl::trigger();
  T* out = static_cast<T*>(a.out);
  unsigned char* q_bytes = smem_raw + (base - raw) + kQOff;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    float l = l_run[ri];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: zeros
    const int row = r0 + 8 * ri;
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // 8-column block j: chunk j of the row
      const float v0 = l > 0.0f ? o[4 * j + 2 * ri] * inv : 0.0f;
      const float v1 = l > 0.0f ? o[4 * j + 2 * ri + 1] * inv : 0.0f;
      *reinterpret_cast<uint32_t*>(q_bytes + tile_off(row, j) + 4 * tq) = pack2<T>(v0, v1);
    }
  }
  // This warpgroup's rows are staged (its wgmma reads of Q are done).
  mbar::named_sync(kWarpgroupBarrier + wg, 128);
  for (int idx = tid & 127; idx < 64 * 16; idx += 128) {
    const int row = wg * 64 + (idx >> 4), c = idx & 15;
    const int64_t rh = s_row[row].rh;
    if (rh < 0) continue;
    *reinterpret_cast<uint4*>(out + rh * kD + c * 8) =
        *reinterpret_cast<const uint4*>(q_bytes + tile_off(row, c));
  }
}

}  // namespace

void launchPrefillWgmma(const PagedAttentionParams& p, const PagedAttentionPlan& plan,
                        cudaStream_t stream) {
  ES_CHECK_ARG(prefillWgmmaApplies(p, plan), "launchPrefillWgmma", "plan", plan.rowTiles,
               "must be the one-split prefill plan at head dim 128, f16/bf16, no packed tree");
  PrefillArgs a{};
  a.q = p.query.q;
  a.out = p.query.out;
  a.cu_q = p.query.cuQSeqLens;
  a.q_pos = p.query.qPositions;
  a.total_q = p.query.totalQ;
  a.max_q = p.query.maxQSeqLen;
  a.hq = p.query.numQHeads;
  a.group = p.query.numQHeads / p.kv.numKVHeads;
  a.pool = p.kv.pool;
  a.table = p.kv.pageTable;
  a.num_pages = p.kv.numPages;
  a.max_pages = p.kv.maxPagesPerSeq;
  a.hkv = p.kv.numKVHeads;
  a.kv_lens = p.kvLengths;
  a.causal = p.mask == AttentionMask::kCausal ? 1 : 0;
  a.window = p.slidingWindow;
  a.batch = p.batchSize;
  a.row_blocks = plan.rowBlocks;
  a.scale_log2 = p.scale * 1.4426950408889634f;
  a.early_reads = pdl::early_reads() ? 1 : 0;
  const int64_t ctas = int64_t{p.batchSize} * p.kv.numKVHeads * plan.rowBlocks;
  fwd::dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      attn::raise_dynamic_smem_once<prefill_kernel<T>>(kSmemBytes);
      pdl::launch(prefill_kernel<T>, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), kSmemBytes,
                  stream, a);
      ES_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace es::kernel::detail
