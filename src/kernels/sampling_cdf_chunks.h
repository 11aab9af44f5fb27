#pragma once
// Chunk arithmetic of the split full-row inverse CDF (spec §3.5), shared by host tests and the
// split kernels (kernels/sampling_cdf_split.cu). Plain C++ plus ES_HOST_DEVICE.
//
// The definition is sequential: r <- fl(r + p_i) over the positive p_i in index order; the token
// is the first index whose r exceeds fl(u * total). To split a row into chunks we need each
// chunk's exact start value, which depends on every chunk before it. The key fact:
//
//   Inside one binade [2^e, 2^(e+1)) (or the subnormal range, e = 0) every float is an integer n
//   of ulps 2^ue. Adding p rounds (n + p / 2^ue) to an integer; with c = round(p / 2^ue) that is
//   n + c, except an exact half-ulp remainder, which goes to the even one of n + m, n + m + 1,
//   so it depends on the parity of n. The step is n -> n + (n even ? c0 : c1) (a `Step`), and
//   steps compose into a Step: a chunk's whole effect inside binade e is one Step, whatever its
//   exact start, as long as the sum stays below 2^(e+1).
//
// So a chunk's summary for a guessed binade e can be computed in parallel with the other chunks
// before its start is known; when the exact start arrives the summary applies in O(1) iff the
// start lies in binade e and the end stays below the binade's top (the running sum only grows,
// so the end alone decides). Otherwise (a power of two is crossed inside the chunk, or the guess
// was wrong) the chunk is replayed sequentially from its exact start. Either way the result is
// the sequential sum bit for bit. A naive composition (sum each chunk in float from 0, then add
// chunk sums) is not: it rounds at other places (tests/kernels/test_sampling_cdf_chunks.cpp).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/host_device.h"
#include "kernels/sampling_math.h"

namespace es::sampling::cdf {

// n -> n + (n even ? c0 : c1). Offsets are >= 0 and, for one entry, capped at 2^40 (a capped
// step always leaves the binade, so the cap never changes a result that is used).
struct Step {
  int64_t c0 = 0, c1 = 0;
};

// f first, then g.
ES_HOST_DEVICE ES_FORCE_INLINE Step stepThen(Step f, Step g) {
  return {f.c0 + ((f.c0 & 1) ? g.c1 : g.c0), f.c1 + ((f.c1 & 1) ? g.c0 : g.c1)};
}
ES_HOST_DEVICE ES_FORCE_INLINE int64_t stepApply(Step f, int64_t n) {
  return n + ((n & 1) ? f.c1 : f.c0);
}

// Binade of a non-negative finite float: its biased exponent field (0: zero and subnormals).
ES_HOST_DEVICE ES_FORCE_INLINE int binadeOf(float s) { return static_cast<int>(f2u(s) >> 23); }
// Exponent of the ulp of binade e, and the first grid count that leaves it.
ES_HOST_DEVICE ES_FORCE_INLINE int binadeUlpExp(int e) { return e == 0 ? -149 : e - 150; }
ES_HOST_DEVICE ES_FORCE_INLINE int64_t binadeLimit(int e) {
  return e == 0 ? (int64_t{1} << 23) : (int64_t{1} << 24);
}
// s (in binade e) as a count of ulps, and back.
ES_HOST_DEVICE ES_FORCE_INLINE int64_t gridCount(float s) {
  const uint32_t b = f2u(s);
  return (b >> 23) == 0 ? static_cast<int64_t>(b)
                        : static_cast<int64_t>((b & 0x7fffffu) | 0x800000u);
}
ES_HOST_DEVICE ES_FORCE_INLINE float gridValue(int e, int64_t n) {
  return u2f((static_cast<uint32_t>(e) << 23) | (static_cast<uint32_t>(n) & 0x7fffffu));
}

// 2^k as a double, |k| < 1023.
ES_HOST_DEVICE ES_FORCE_INLINE double pow2d(int k) {
  const uint64_t bits = static_cast<uint64_t>(1023 + k) << 52;
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
#endif
}

// The step of adding x (> 0, finite) inside binade e. x * 2^-ue is exact in double (a float
// times a power of two within double range), so the floor and the remainder are exact too.
ES_HOST_DEVICE inline Step stepOf(float x, int e) {
  const double q = static_cast<double>(x) * pow2d(-binadeUlpExp(e));
  constexpr double kCap = 1099511627776.0;  // 2^40
  if (q >= kCap) return {int64_t{1} << 40, int64_t{1} << 40};
  const double m = floor(q);
  const double f = q - m;
  const int64_t mi = static_cast<int64_t>(m);
  if (f < 0.5) return {mi, mi};
  if (f > 0.5) return {mi + 1, mi + 1};
  return {mi + (mi & 1), mi + ((mi + 1) & 1)};  // tie: n + mi is even when n and mi agree
}

// A chunk's composed step for binade e. e < 0: no summary (always replayed).
struct ChunkSummary {
  int32_t e = -1;
  int32_t pad = 0;
  Step step;
};

// The exact end of a chunk that starts at `start`, from its summary, if the summary applies:
// start in binade e (not the inf/NaN binade) and end still below 2^(e+1).
ES_HOST_DEVICE inline bool summaryEnd(const ChunkSummary& s, float start, float* end) {
  if (s.e < 0 || s.e >= 255 || binadeOf(start) != s.e) return false;
  const int64_t n = stepApply(s.step, gridCount(start));
  if (n >= binadeLimit(s.e)) return false;
  *end = gridValue(s.e, n);
  return true;
}

// Tries summaries [0, count) in order.
ES_HOST_DEVICE inline bool summariesEnd(const ChunkSummary* s, int count, float start, float* end) {
  for (int i = 0; i < count; ++i) {
    if (summaryEnd(s[i], start, end)) return true;
  }
  return false;
}

// The binades to summarise a chunk for, given an approximate start (a float prefix of chunk sums
// in any order; the exact sequential start is within ~n 2^-24 relative of it): the approximate
// start's binade first, then the neighbour on the side of the nearer power of two.
ES_HOST_DEVICE inline void guessBinades(float approxStart, int* first, int* second) {
  const uint32_t b = f2u(approxStart > 0.0f ? approxStart : 0.0f);
  int e = static_cast<int>(b >> 23);
  if (e >= 255) e = 254;
  *first = e;
  const bool lowHalf = (b & 0x7fffffu) < 0x400000u;
  *second = (e == 0) ? 1 : (lowHalf ? e - 1 : (e < 254 ? e + 1 : e - 1));
}

// Sequential definitions over entries [begin, end) of valAt (single thread; the host tests and
// the model of the split algorithm use them; the kernels use block-parallel equivalents).
template <typename ValAt>
ES_HOST_DEVICE Step chunkStep(ValAt valAt, int begin, int end, int e) {
  Step s;
  for (int i = begin; i < end; ++i) {
    const float x = valAt(i);
    if (x > 0.0f) s = stepThen(s, stepOf(x, e));
  }
  return s;
}
template <typename ValAt>
ES_HOST_DEVICE float chunkReplay(ValAt valAt, int begin, int end, float start) {
  float r = start;
  for (int i = begin; i < end; ++i) {
    const float x = valAt(i);
    if (x > 0.0f) r = faddRn(r, x);
  }
  return r;
}
// First index in [begin, end) whose running sum (from start) is > threshold, else -1.
template <typename ValAt>
ES_HOST_DEVICE int chunkSearch(ValAt valAt, int begin, int end, float start, float threshold) {
  float r = start;
  for (int i = begin; i < end; ++i) {
    const float x = valAt(i);
    if (!(x > 0.0f)) continue;
    r = faddRn(r, x);
    if (r > threshold) return i;
  }
  return -1;
}

// The search's chunk: the first chunk whose exact end is > threshold (ends are non-decreasing),
// or `chunks` when none is (then the token is the row's last positive index).
ES_HOST_DEVICE inline int firstChunkAbove(const float* ends, int chunks, float threshold) {
  int lo = 0, hi = chunks;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ends[mid] > threshold) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// ---------------------------------------------------------------------------------------------
// Kernel BC's block-level control flow (chain of exact chunk starts, then the search), written
// once for the kernel (kernels/sampling_cdf_split.cu) and for a host model of a CTA (the CPU test
// runs it on threads with a barrier). Block provides tid() and sync() (a barrier of all threads).
//
// Block-uniformity rule: every value that steers the block (the chunk to replay, its start, the
// total, the threshold, the search's chunk) is read from `start` / `sh` (shared memory) after a
// barrier, never from registers that only thread 0 advanced. replay and search are collectives
// (sequentialCdf on the GPU): a thread that passes them another start or threshold than its
// neighbours returns at another point, which picks a wrong token or leaves the others at a
// barrier forever. For example, a total taken from each thread's own running sum does both: only
// thread 0 carries that sum through the chunks whose summaries apply (every other thread holds
// the end of the last replayed chunk, so its threshold is too small); the CPU test models it.
struct ChainShared {
  int nextChunk;
  int found;
  float threshold;
};

// Thread 0's walk: from chunk c (exact start start[c]) applies summaries while one applies,
// writing start[c + 1], ...; returns the first chunk >= c whose summaries miss, or `chunks`
// (start[chunks] is then the row's exact total).
ES_HOST_DEVICE inline int walkSummaries(const ChunkSummary* summ, int chunks, int c, float* start) {
  float s = start[c];
  float end;
  while (c < chunks && summariesEnd(summ + 2 * c, 2, s, &end)) {
    s = end;
    start[++c] = s;
  }
  return c;
}

// The row's token (block-uniform), spec §3.5. summ: [chunks][2]; start: [chunks + 1] shared;
// replay(c, r0): collective, chunk c's exact end from its exact start r0;
// search(c, r0, threshold): collective, the offset in chunk c of the first entry whose running
// sum from r0 exceeds threshold; lastPositive(): the row's last positive index (or -1), the
// answer when nothing exceeds the threshold. The chain takes at most chunks + 1 rounds: each
// round ends it or replays one chunk and moves past it (c strictly grows).
template <typename Block, typename Replay, typename Search, typename LastPositive>
ES_HOST_DEVICE int chainAndSearch(const Block& blk, int chunks, int chunkLen,
                                  const ChunkSummary* summ, float u, float* start, ChainShared& sh,
                                  Replay replay, Search search, LastPositive lastPositive) {
  if (blk.tid() == 0) start[0] = 0.0f;
  int c = 0;
  for (;;) {
    if (blk.tid() == 0) sh.nextChunk = walkSummaries(summ, chunks, c, start);
    blk.sync();
    c = sh.nextChunk;
    const float r0 = c < chunks ? start[c] : 0.0f;
    blk.sync();  // all have read sh.nextChunk before thread 0 rewrites it
    if (c >= chunks) break;
    const float end = replay(c, r0);
    if (blk.tid() == 0)
      start[c + 1] = end;  // thread 0 reads it next round; the others after a barrier
    ++c;
  }
  if (blk.tid() == 0) {  // chunk ends are start[1..chunks], non-decreasing
    sh.threshold = fmulRn(u, start[chunks]);
    sh.found = firstChunkAbove(start + 1, chunks, sh.threshold);
  }
  blk.sync();
  const float threshold = sh.threshold;  // nothing rewrites sh or start after this point
  const int found = sh.found;
  if (found >= chunks) return lastPositive();  // nothing exceeds: as the reference
  return found * chunkLen + search(found, start[found], threshold);
}

}  // namespace es::sampling::cdf
