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
// thread (S 64, O 64, P of two tiles 2 x 32; ptxas allocates 196, no spills).
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
#include "common/kv_page.h"
#include "kernels/attention_math.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/forward_ops_device.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/paged_attention_prefill.h"
#include "kernels/paged_attention_rows.cuh"
#include "kernels/paged_attention_split.h"
#include "kernels/pdl.cuh"
#include "kernels/wgmma.cuh"

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
static_assert(splitkv::kPrefillRowsPerCta == kRows, "the plan's row blocks are this kernel's CTAs");

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
  const int32_t* cuQ;
  const int32_t* qPos;
  int32_t totalQ, maxQ, hq, group;
  const void* pool;
  const int32_t* table;
  int32_t numPages, maxPages, hkv;
  const int32_t* kvLens;
  int32_t causal, window, batch, rowBlocks;
  float scaleLog2;     // scale * log2(e)
  int32_t earlyReads;  // 1: metadata and page table read before the PDL wait
};

__device__ __forceinline__ uint32_t smemU32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
using attn::exp2Ftz;
using attn::pack2;
// Byte offset of 16-byte chunk c (0..15) of row r in a swizzled 128-row tile.
__device__ __forceinline__ uint32_t tileOff(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * kHalfBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
// Named barriers (0 is __syncthreads): one per warpgroup (ids 1, 2) for its epilogue, and the
// ping-pong turns (ids 3, 4).
constexpr int kWarpgroupBarrier = 1, kTurnBarrier = 3;

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) prefillKernel(const PrefillArgs a) {
  extern __shared__ unsigned char smemRaw[];
  const uint32_t raw = smemU32(smemRaw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  Row* sRow = reinterpret_cast<Row*>(smemRaw + (base - raw) + kRowOff);
  const uint32_t sQ = base + kQOff;

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
  const int32_t rb = a.rowBlocks - 1 - bid % a.rowBlocks;
  const int32_t b = bid / a.rowBlocks;
  if (!a.earlyReads) pdl::wait();

  // ---- rows and key ranges (as the split-KV kernel: paged_attention.h's rules)
  const int32_t q0 = a.cuQ[b];
  const int32_t qLen = a.cuQ[b + 1] - q0;
  const int32_t kvLen = a.kvLens[b];
  if (tid < kRows) {
    const attn::PackedRowKeys k =
        attn::packedRowKeys(rb * kRows + tid, q0, qLen, kvLen, hk, a.qPos, a.totalQ, a.maxQ, a.hq,
                            a.group, a.maxPages, a.causal != 0, a.window);
    sRow[tid] = Row{k.rh, k.lo, k.hi};
  }
  // Ring barriers: per K stage (2) and V stage (3) a "full" one (each thread's copies of its
  // warpgroup's half of the tile, 256 arrivals) and a "free" one (every thread done reading it,
  // 256 arrivals).
  const uint32_t bars = base + kBarOff;
  auto fullK = [&](int st) { return bars + 8 * st; };
  auto freeK = [&](int st) { return bars + 16 + 8 * st; };
  auto fullV = [&](int st) { return bars + 32 + 8 * st; };
  auto freeV = [&](int st) { return bars + 56 + 8 * st; };
  if (tid == 0) {
    for (int i = 0; i < kBarriers; ++i) mbar::init(bars + 8 * i, kThreads);
  }
  __syncthreads();

  // The union of the CTA's row ranges: its tiles.
  const attn::KeyRange keys = attn::rowsKeyUnion(sRow, kRows, lane);
  // Tiles [t0, t1); broadcast from lane 0 (warp-uniform to the compiler: see wg).
  const int32_t loAll = __shfl_sync(0xffffffffu, keys.lo, 0);
  const int32_t hiAll = __shfl_sync(0xffffffffu, keys.hi, 0);
  const int32_t t0 = __shfl_sync(0xffffffffu, hiAll > 0 ? loAll / kKeys : 0, 0);
  const int32_t t1 = __shfl_sync(0xffffffffu, hiAll > 0 ? (hiAll - 1) / kKeys + 1 : 0, 0);
  const int32_t loR[2] = {sRow[r0].lo, sRow[r0 + 8].lo};
  const int32_t hiR[2] = {sRow[r0].hi, sRow[r0 + 8].hi};

  // ---- K/V tile loads: tile u is page u of the sequence
  const int32_t* trow = a.table + int64_t{b} * 2 * a.maxPages;
  const T* pool = static_cast<const T*>(a.pool);
  const int64_t rowStride = int64_t{a.hkv} * kD;
  // False when u is not one of the CTA's tiles or its page is unmapped / out of range (the tile
  // is then zero-filled and its keys count as masked).
  auto lookup = [&](int32_t u, int32_t& kp, int32_t& vp) -> bool {
    if (u >= t1 || u >= a.maxPages) return false;
    kp = __ldg(trow + u);
    vp = __ldg(trow + a.maxPages + u);
    return attn::pagePairValid(kp, vp, a.numPages);
  };
  // This warpgroup's 64 keys [64 wg, 64 wg + 64) of K or V tile u into the stage at smem address
  // dst, by its 128 threads. Keys outside the CTA's union range are zero-filled (never NaN
  // garbage in P V); page < 0 (an invalid page pair): the whole tile.
  constexpr int kCopies = 64 * 16 / 128;  // per thread and tile
  constexpr int kKeyStep = 128 / 16;      // keys between a thread's copies
  // Copy `it` of this thread moves 16-byte chunk cLd of key kLd + kKeyStep it: its swizzled
  // offset is tileOff(kLd, cLd) + kKeyStep it 128 (kKeyStep keeps key & 7).
  const int loader = tid & 127;
  const int cLd = loader & 15;
  const int kLd = 64 * wg + (loader >> 4);
  const uint32_t dstLd = tileOff(kLd, cLd);
  const int64_t srcLd = int64_t{kLd} * rowStride + int64_t{hk} * kD + cLd * 8;
  auto issueRows = [&](int32_t u, uint32_t dst, int32_t page) {
    const int32_t key0 = u * kKeys;
    const T* src = pool + int64_t{max(page, 0)} * kKeys * rowStride + srcLd;
    if (page >= 0 && key0 >= loAll && key0 + kKeys <= hiAll) {  // CTA-uniform: no key masked
#pragma unroll
      for (int it = 0; it < kCopies; ++it) {
        cpAsync16Shared(dst + dstLd + it * kKeyStep * 128, src + it * kKeyStep * rowStride, 16);
      }
    } else {
#pragma unroll
      for (int it = 0; it < kCopies; ++it) {
        const int32_t j = key0 + kLd + it * kKeyStep;
        const bool in = page >= 0 && j >= loAll && j < hiAll;
        cpAsync16Shared(dst + dstLd + it * kKeyStep * 128, src + it * kKeyStep * rowStride,
                        in ? 16 : 0);
      }
    }
  };
  auto kStage = [&](int st) { return base + kKOff + st * kTileBytes; };
  auto vStage = [&](int st) { return base + kVOff + st * kTileBytes; };
  // Page lookups run an iteration ahead: tile t's in okCur, tile t + 1's in okNext / kpNext /
  // vpNext (the pages of the tile issued next).
  int32_t kpFirst = 0, vpFirst = 0, kpNext = 0, vpNext = 0;
  bool okCur = lookup(t0, kpFirst, vpFirst);
  bool okNext = lookup(t0 + 1, kpNext, vpNext);

  if (a.earlyReads) pdl::wait();  // q and the rows' K/V are read from here on
  if (blockIdx.x == 0) {          // rows in no sequence (each CTA writes only its own rows)
    attn::zeroRowsOutsideSequences(static_cast<T*>(a.out), a.cuQ, a.batch, a.totalQ,
                                   int64_t{a.hq} * kD);
  }

  if (t0 < t1) {
    const T* qg = static_cast<const T*>(a.q);
#pragma unroll
    for (int it = 0; it < kRows * 16 / kThreads; ++it) {
      const int idx = it * kThreads + tid;
      const int m = idx >> 4, c = idx & 15;
      const bool in = sRow[m].hi > sRow[m].lo;
      const T* src = in ? qg + sRow[m].rh * kD + c * 8 : qg;
      cpAsync16Shared(sQ + tileOff(m, c), src, in ? 16 : 0);
    }
    issueRows(t0, kStage(0), okCur ? kpFirst : -1);
    mbar::arriveOnCopies(fullK(0));
    cpAsyncCommit();
    cpAsyncWait<0>();  // Q (and this thread's part of K_t0)
    wgmma::fenceProxyAsyncShared();
    __syncthreads();                                        // Q in place for both warpgroups
    if (wg == 1) mbar::namedArrive(kTurnBarrier, 2 * 128);  // warpgroup 0 issues first
  }

  float o[64], s[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = s[i] = 0.0f;
  float mRun[2] = {-INFINITY, -INFINITY}, lRun[2] = {0.0f, 0.0f};

  uint32_t pa[kKeys / 16][4];  // P of the last tile (the A operand of its P V)
  float corr[2];
  // The softmax of tile t (in s) into P (paOut) and the running max / sum; corr rescales O.
  auto softmaxTile = [&](int32_t t, bool ok, uint32_t(&paOut)[kKeys / 16][4]) {
    const int32_t key0 = t * kKeys;
    float mx[2] = {-INFINITY, -INFINITY};
    const bool full = ok && key0 >= max(loR[0], loR[1]) && key0 + kKeys <= min(hiR[0], hiR[1]);
    if (full) {
#pragma unroll
      for (int i = 0; i < 64; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int ri = (i >> 1) & 1;
        const int32_t j = key0 + 8 * (i >> 2) + 2 * tq + (i & 1);
        s[i] = ok && j >= loR[ri] && j < hiR[ri] ? s[i] : -INFINITY;
        mx[ri] = fmaxf(mx[ri], s[i]);
      }
    }
    float mUse[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 1));
      mx[ri] = fmaxf(mx[ri], __shfl_xor_sync(0xffffffffu, mx[ri], 2));
      const float mNew = fmaxf(mRun[ri], mx[ri] * a.scaleLog2);
      mUse[ri] = mNew == -INFINITY ? 0.0f : mNew;  // nothing seen yet: keep exp2 finite
      corr[ri] = exp2Ftz(mRun[ri] - mUse[ri]);
      mRun[ri] = mNew;
      lRun[ri] *= corr[ri];
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int ri = (i >> 1) & 1;
      s[i] = exp2Ftz(__fmaf_rn(s[i], a.scaleLog2, -mUse[ri]));
      lRun[ri] += s[i];
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      paOut[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      paOut[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      paOut[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      paOut[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  auto issueS = [&](uint32_t sk) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t koff = (kk >> 2) * kHalfBytes + (kk & 3) * 32;
      wgmma::wgmmaM64n128k16Ss<T, false>(s, wgmma::descSw128(sQ + wg * 64 * 128 + koff, 16, 1024),
                                         wgmma::descSw128(sk + koff, 16, 1024), kk > 0);
    }
    wgmma::commit();
  };
  auto issuePv = [&](uint32_t sv) {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      wgmma::wgmmaM64n128k16Rs<T, true>(o, pa[kk],
                                        wgmma::descSw128(sv + kk * 2048, kHalfBytes, 1024));
    }
    wgmma::commit();
  };
  // Iteration t starts here: this warpgroup loads its half of K_{t+1} and V_t once both
  // warpgroups have freed those stages (K_{t-1}, V_{t-3}), waits for the "full" barriers of K_t
  // and V_{t-1}, and then for its turn: the warpgroups take turns to issue their wgmma groups
  // (named barriers kTurnBarrier + wg), so one's softmax runs while the other's matrix products
  // are on the tensor cores. Returns whether tile t's page pair is valid (else its keys are
  // masked and its V is zeros).
  int32_t vpCur = vpFirst;
  auto beginTile = [&](int32_t t) -> bool {
    const int32_t u = t - t0;
    const bool ok = okCur;
    if (t + 1 < t1) {
      const int st = (u + 1) & 1, fill = (u + 1) >> 1;
      if (fill > 0) mbar::wait(freeK(st), (fill - 1) & 1);
      issueRows(t + 1, kStage(st), okNext ? kpNext : -1);
      mbar::arriveOnCopies(fullK(st));
    }
    if (t < t1) {
      const int fill = u / kVStages, st = u - kVStages * fill;
      if (fill > 0) mbar::wait(freeV(st), (fill - 1) & 1);
      issueRows(t, vStage(st), ok ? vpCur : -1);
      mbar::arriveOnCopies(fullV(st));
      mbar::wait(fullK(u & 1), (u >> 1) & 1);
    }
    if (t > t0) {
      const int fill = (u - 1) / kVStages;
      mbar::wait(fullV(u - 1 - kVStages * fill), fill & 1);
    }
    wgmma::fenceProxyAsyncShared();  // the copies, seen through the barriers, for wgmma
    mbar::namedSync(kTurnBarrier + wg, 2 * 128);
    okCur = okNext;
    vpCur = vpNext;
    okNext = lookup(t + 2, kpNext, vpNext);
    return ok;
  };
  // After issuing: the other warpgroup's turn (warpgroup 1's last turn hands over nothing).
  auto endTurn = [&](int32_t t) {
    if (wg == 0 || t < t1) mbar::namedArrive(kTurnBarrier + (wg ^ 1), 2 * 128);
  };
  // This thread is done reading K_t (after S) or V_t (after P V).
  auto kRead = [&](int32_t t) { mbar::arrive(freeK((t - t0) & 1)); };
  auto vRead = [&](int32_t t) { mbar::arrive(freeV((t - t0) % kVStages)); };
  auto vOf = [&](int32_t t) { return vStage((t - t0) % kVStages); };
  if (t0 < t1) {
    {  // tile t0: S only
      const bool ok = beginTile(t0);
      wgmma::fenceOperand(s);
      wgmma::fence();
      issueS(kStage(0));
      endTurn(t0);
      wgmma::wait<0>();
      wgmma::fenceOperand(s);
      kRead(t0);
      softmaxTile(t0, ok, pa);
    }
    for (int32_t t = t0 + 1; t < t1; ++t) {
      const bool ok = beginTile(t);
      wgmma::fenceOperand(s);
      wgmma::fenceOperand(o);
      wgmma::fence();
      issueS(kStage((t - t0) & 1));
      issuePv(vOf(t - 1));
      endTurn(t);
      wgmma::wait<1>();  // S: P V stays in flight during the softmax
      wgmma::fenceOperand(s);
      kRead(t);
      uint32_t pn[kKeys / 16][4];
      softmaxTile(t, ok, pn);
      wgmma::wait<0>();
      wgmma::fenceOperand(o);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) wgmma::fenceOperand(pa[kk]);  // read until here
      vRead(t - 1);
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
      beginTile(t1);
      wgmma::fenceOperand(o);
      wgmma::fence();
      issuePv(vOf(t1 - 1));
      endTurn(t1);
      wgmma::wait<0>();
      wgmma::fenceOperand(o);
    }
  }

  // ---- epilogue: normalise, stage as T in this warpgroup's own Q rows, 16-byte row stores.
  pdl::trigger();
  T* out = static_cast<T*>(a.out);
  unsigned char* qBytes = smemRaw + (base - raw) + kQOff;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    float l = lRun[ri];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: zeros
    const int row = r0 + 8 * ri;
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // 8-column block j: chunk j of the row
      const float v0 = l > 0.0f ? o[4 * j + 2 * ri] * inv : 0.0f;
      const float v1 = l > 0.0f ? o[4 * j + 2 * ri + 1] * inv : 0.0f;
      *reinterpret_cast<uint32_t*>(qBytes + tileOff(row, j) + 4 * tq) = pack2<T>(v0, v1);
    }
  }
  // This warpgroup's rows are staged (its wgmma reads of Q are done).
  mbar::namedSync(kWarpgroupBarrier + wg, 128);
  for (int idx = tid & 127; idx < 64 * 16; idx += 128) {
    const int row = wg * 64 + (idx >> 4), c = idx & 15;
    const int64_t rh = sRow[row].rh;
    if (rh < 0) continue;
    *reinterpret_cast<uint4*>(out + rh * kD + c * 8) =
        *reinterpret_cast<const uint4*>(qBytes + tileOff(row, c));
  }
}

}  // namespace

void launchPrefillWgmma(const PagedAttentionParams& p, const PagedAttentionPlan& plan,
                        cudaStream_t stream) {
  ES_CHECK_ARG(prefillWgmmaApplies(p, plan), "launchPrefillWgmma", "plan", plan.rowTiles,
               "must be the one-split prefill plan at head dim 128, f16/bf16, no packed tree");
  const PrefillArgs a{
      .q = p.query.q,
      .out = p.query.out,
      .cuQ = p.query.cuQSeqLens,
      .qPos = p.query.qPositions,
      .totalQ = p.query.totalQ,
      .maxQ = p.query.maxQSeqLen,
      .hq = p.query.numQHeads,
      .group = p.query.numQHeads / p.kv.numKVHeads,
      .pool = p.kv.pool,
      .table = p.kv.pageTable,
      .numPages = p.kv.numPages,
      .maxPages = p.kv.maxPagesPerSeq,
      .hkv = p.kv.numKVHeads,
      .kvLens = p.kvLengths,
      .causal = p.mask == AttentionMask::kCausal ? 1 : 0,
      .window = p.slidingWindow,
      .batch = p.batchSize,
      .rowBlocks = plan.rowBlocks,
      .scaleLog2 = p.scale * 1.4426950408889634f,
      .earlyReads = pdl::earlyReads() ? 1 : 0,
  };
  const int64_t ctas = int64_t{p.batchSize} * p.kv.numKVHeads * plan.rowBlocks;
  fwd::dispatchDtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      attn::raiseDynamicSmemOnce<prefillKernel<T>>(kSmemBytes);
      pdl::launch(prefillKernel<T>, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), kSmemBytes,
                  stream, a);
      ES_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace es::kernel::detail
