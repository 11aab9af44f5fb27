// CPU tests of the split full-row inverse CDF arithmetic (kernels/sampling_cdf_chunks.h) against
// the spec §3.5 definition: the sequential fp32 running sum over the positive entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "kernels/sampling.h"
#include "kernels/sampling_cdf_chunks.h"
#include "kernels/sampling_cdf_split.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es {
namespace {

using namespace es::sampling;
using namespace es::sampling::cdf;

// ---------------------------------------------------------------------------------------------
// Row generators: each stresses one way a chunk composition can go wrong.

enum class Kind { kSoftmax, kFlat, kTies, kHalfUlp, kWideBinades, kSubnormal, kJunk, kNearPow2 };
constexpr Kind kKinds[] = {Kind::kSoftmax,     Kind::kFlat,      Kind::kTies, Kind::kHalfUlp,
                           Kind::kWideBinades, Kind::kSubnormal, Kind::kJunk, Kind::kNearPow2};

std::vector<float> make_row(Kind kind, int n, std::mt19937& rng) {
  std::vector<float> v(n, 0.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  switch (kind) {
    case Kind::kSoftmax: {  // probabilities of random logits at a random temperature
      const float scale = 0.5f + 6.0f * uni(rng);
      std::vector<float> l(n);
      for (auto& x : l) x = scale * gauss(rng);
      const float mx = *std::max_element(l.begin(), l.end());
      float sum = 0.0f;
      for (int i = 0; i < n; ++i) sum += (v[i] = std::exp(l[i] - mx));
      for (auto& x : v) x /= sum;
      break;
    }
    case Kind::kFlat:  // temperature >> 1: near-uniform, the sum crosses several powers of two
      for (auto& x : v) x = (1.0f + 0.01f * uni(rng)) / static_cast<float>(n);
      break;
    case Kind::kTies: {  // few distinct values: many identical roundings
      const float vals[] = {0.25f, 0.125f, 0.375f, 1.0f / 1024, 3.0f / 65536, 1.0f / (1 << 20)};
      for (auto& x : v) x = vals[rng() % 6];
      break;
    }
    case Kind::kHalfUlp: {  // k * 2^-j with small k: exact half-ulp remainders against the sum
      for (auto& x : v) {
        const int j = 20 + static_cast<int>(rng() % 12);
        x = std::ldexp(static_cast<float>(1 + rng() % 3), -j);
      }
      break;
    }
    case Kind::kWideBinades:  // values over ~140 binades
      for (auto& x : v) x = std::ldexp(1.0f + uni(rng), -static_cast<int>(rng() % 140));
      break;
    case Kind::kSubnormal:  // mostly subnormals, some tiny normals: the e = 0 grid and its exit
      for (auto& x : v) {
        x = (rng() % 8 == 0) ? std::ldexp(1.0f + uni(rng), -126 + static_cast<int>(rng() % 4))
                             : u2f(1u + static_cast<uint32_t>(rng() % 0x7fffffu));
      }
      break;
    case Kind::kJunk:  // zeros, negatives and NaN are skipped by the definition
      for (auto& x : v) {
        switch (rng() % 6) {
          case 0:
            x = 0.0f;
            break;
          case 1:
            x = -0.0f;
            break;
          case 2:
            x = -uni(rng);
            break;
          case 3:
            x = std::numeric_limits<float>::quiet_NaN();
            break;
          default:
            x = uni(rng) * 1e-3f;
            break;
        }
      }
      break;
    case Kind::kNearPow2: {  // equal entries whose total lands on / next to a power of two
      const int m = 1 + static_cast<int>(rng() % 30);
      const float base = std::ldexp(1.0f, -m);
      for (auto& x : v) x = base;
      for (int k = 0; k < 8; ++k) v[rng() % n] = u2f(f2u(base) + (rng() % 3) - 1);
      break;
    }
  }
  return v;
}

float seq_total(const std::vector<float>& v) {
  return chunkReplay([&](int i) { return v[i]; }, 0, static_cast<int>(v.size()), 0.0f);
}
int seq_search(const std::vector<float>& v, float threshold) {
  const int n = static_cast<int>(v.size());
  const int i = chunkSearch([&](int j) { return v[j]; }, 0, n, 0.0f, threshold);
  if (i >= 0) return i;
  int last = -1;
  for (int j = 0; j < n; ++j) {
    if (v[j] > 0.0f) last = j;
  }
  return last;
}

// ---------------------------------------------------------------------------------------------
// A host model of the split algorithm, pass for pass as the kernels do it (any order of the float
// chunk sums; two summaries per chunk; chain with replay; search in one chunk).

struct SplitStats {
  int replays = 0;
  int chunks = 0;
};

struct SplitRow {
  std::vector<float> start, end;  // exact, per chunk
  std::vector<int> lastPositive;
  std::vector<ChunkSummary> summ;  // [chunks][2], as A2 writes them
  float total = 0.0f;
};

// guess_mode: 0 from the float prefix (as the kernels), 1 deliberately wrong binades (forces the
// replay path), 2 random binades.
SplitRow split_pass_ab(const std::vector<float>& v, int chunkLen, int guess_mode, std::mt19937& rng,
                       SplitStats* stats) {
  const int n = static_cast<int>(v.size());
  const int chunks = (n + chunkLen - 1) / chunkLen;
  auto val = [&](int i) { return v[i]; };
  // Pass A1: chunk float sums, pairwise (any association will do: only the guess depends on it).
  std::vector<float> csum(chunks, 0.0f);
  for (int c = 0; c < chunks; ++c) {
    const int b = c * chunkLen, e = std::min(n, b + chunkLen);
    std::vector<float> t;
    for (int i = b; i < e; ++i) t.push_back(v[i] > 0.0f ? v[i] : 0.0f);
    while (t.size() > 1) {
      std::vector<float> u((t.size() + 1) / 2, 0.0f);
      for (size_t i = 0; i < t.size(); ++i) u[i / 2] += t[i];
      t.swap(u);
    }
    csum[c] = t.empty() ? 0.0f : t[0];
  }
  // Pass A2: per chunk, the approximate start and two summaries.
  std::vector<ChunkSummary> summ(2 * static_cast<size_t>(chunks));
  SplitRow out;
  out.lastPositive.assign(chunks, -1);
  for (int c = 0; c < chunks; ++c) {
    float approx = 0.0f;
    for (int j = c - 1; j >= 0; --j) approx += csum[j];  // reverse order on purpose
    int e0, e1;
    guessBinades(approx, &e0, &e1);
    if (guess_mode == 1) {
      e0 = std::min(254, e0 + 2);
      e1 = std::max(0, e0 - 4);
    } else if (guess_mode == 2) {
      e0 = static_cast<int>(rng() % 255);
      e1 = static_cast<int>(rng() % 255);
    }
    const int b = c * chunkLen, e = std::min(n, b + chunkLen);
    summ[2 * c] = {e0, 0, chunkStep(val, b, e, e0)};
    summ[2 * c + 1] = {e1, 0, chunkStep(val, b, e, e1)};
    for (int i = b; i < e; ++i) {
      if (v[i] > 0.0f) out.lastPositive[c] = i;
    }
  }
  // Pass B: the chain of exact starts.
  out.start.resize(chunks);
  out.end.resize(chunks);
  float s = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    out.start[c] = s;
    float end;
    if (!summariesEnd(&summ[2 * c], 2, s, &end)) {
      end = chunkReplay(val, c * chunkLen, std::min(n, (c + 1) * chunkLen), s);
      if (stats) ++stats->replays;
    }
    out.end[c] = s = end;
  }
  if (stats) stats->chunks += chunks;
  out.total = s;
  out.summ = summ;
  return out;
}

// Pass C.
int split_search(const std::vector<float>& v, int chunkLen, const SplitRow& r, float threshold) {
  const int n = static_cast<int>(v.size());
  const int chunks = static_cast<int>(r.end.size());
  const int c = firstChunkAbove(r.end.data(), chunks, threshold);
  if (c == chunks) {
    int last = -1;
    for (int j = 0; j < chunks; ++j) last = std::max(last, r.lastPositive[j]);
    return last;
  }
  const int i = chunkSearch([&](int j) { return v[j]; }, c * chunkLen,
                            std::min(n, (c + 1) * chunkLen), r.start[c], threshold);
  EXPECT_GE(i, 0) << "the chunk whose end exceeds the threshold must hold the crossing";
  return i;
}

// Thresholds: random u, and the exact running sums themselves and their neighbours (the
// boundaries where "strictly greater" matters).
std::vector<float> thresholds_for(const std::vector<float>& v, float total, std::mt19937& rng) {
  std::vector<float> th;
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (int k = 0; k < 24; ++k) th.push_back(fmulRn(uni(rng), total));
  th.push_back(0.0f);
  th.push_back(total);
  th.push_back(std::nextafter(total, 0.0f));
  float r = 0.0f;
  const int n = static_cast<int>(v.size());
  for (int k = 0; k < 16; ++k) {
    const int stop = static_cast<int>(rng() % n);
    r = chunkReplay([&](int i) { return v[i]; }, 0, stop, 0.0f);
    th.push_back(r);
    th.push_back(std::nextafter(r, 0.0f));
    th.push_back(std::nextafter(r, 1e30f));
  }
  return th;
}

// ---------------------------------------------------------------------------------------------

TEST(SamplingCdfChunks, StepOfMatchesOneFloatAdd) {
  std::mt19937 rng(1);
  int checked = 0;
  for (int t = 0; t < 200000; ++t) {
    const float s = u2f(static_cast<uint32_t>(rng() % 0x7f000000u));  // any finite s >= 0
    const float x = (t % 3 == 0) ? std::ldexp(static_cast<float>(1 + rng() % 5),
                                              static_cast<int>(binadeOf(s)) - 150 - 1)
                                 : u2f(1u + static_cast<uint32_t>(rng() % 0x7f000000u));
    if (!(x > 0.0f) || !std::isfinite(x)) continue;
    const int e = binadeOf(s);
    ChunkSummary sm{e, 0, stepOf(x, e)};
    float end;
    if (summaryEnd(sm, s, &end)) {
      ASSERT_EQ(f2u(end), f2u(faddRn(s, x))) << "s=" << s << " x=" << x;
      ++checked;
    } else {
      ASSERT_GE(binadeOf(faddRn(s, x)), e + 1) << "rejected only when the add leaves the binade";
    }
  }
  EXPECT_GT(checked, 50000);
}

TEST(SamplingCdfChunks, ChunkSummaryFromAnyStartMatchesReplay) {
  std::mt19937 rng(2);
  int applied = 0, total = 0;
  for (Kind kind : kKinds) {
    for (int t = 0; t < 60; ++t) {
      const int n = 1 + static_cast<int>(rng() % 3000);
      const auto v = make_row(kind, n, rng);
      auto val = [&](int i) { return v[i]; };
      for (int k = 0; k < 8; ++k) {
        // Starts: random floats in a plausible range, exact powers of two, zero.
        // Starts: zero, powers of two, random floats, and (the GPU's common case) starts well
        // above the chunk's own sum, where the chunk usually stays inside one binade.
        std::uniform_real_distribution<float> uni(2.0f, 40.0f);
        const float own = chunkReplay(val, 0, n, 0.0f);
        float s = (k == 0)   ? 0.0f
                  : (k == 1) ? std::ldexp(1.0f, -static_cast<int>(rng() % 40))
                  : (k < 4)  ? u2f(static_cast<uint32_t>(rng() % 0x42000000u))
                             : own * uni(rng);
        const int e = binadeOf(s);
        const ChunkSummary sm{e, 0, chunkStep(val, 0, n, e)};
        float end;
        ++total;
        const float ref = chunkReplay(val, 0, n, s);
        if (summaryEnd(sm, s, &end)) {
          ++applied;
          ASSERT_EQ(f2u(end), f2u(ref))
              << "kind " << static_cast<int>(kind) << " n " << n << " s " << s;
        } else {
          ASSERT_GT(binadeOf(ref), e)
              << "a summary may only be refused when the sum leaves the binade";
        }
        // A summary for another binade must never apply.
        const ChunkSummary other{e == 0 ? 1 : e - 1, 0, chunkStep(val, 0, n, e == 0 ? 1 : e - 1)};
        ASSERT_FALSE(summaryEnd(other, s, &end));
      }
    }
  }
  EXPECT_GT(applied, total / 3) << "the O(1) path must be the common case, or the test is vacuous";
}

TEST(SamplingCdfChunks, SplitTotalAndSearchEqualSequential) {
  std::mt19937 rng(3);
  const int chunk_lens[] = {1, 7, 64, 500, 4096};
  SplitStats stats[3];
  for (Kind kind : kKinds) {
    for (int t = 0; t < 12; ++t) {
      const int n = 1 + static_cast<int>(rng() % 20000);
      const auto v = make_row(kind, n, rng);
      const float total = seq_total(v);
      const auto th = thresholds_for(v, total, rng);
      for (int chunkLen : chunk_lens) {
        if (chunkLen == 1 && n > 4000) continue;  // O(n^2) model
        for (int mode = 0; mode < 3; ++mode) {
          const SplitRow r = split_pass_ab(v, chunkLen, mode, rng, &stats[mode]);
          ASSERT_EQ(f2u(r.total), f2u(total)) << "kind " << static_cast<int>(kind) << " n " << n
                                              << " chunk " << chunkLen << " mode " << mode;
          for (float h : th) {
            ASSERT_EQ(split_search(v, chunkLen, r, h), seq_search(v, h))
                << "kind " << static_cast<int>(kind) << " n " << n << " chunk " << chunkLen
                << " threshold " << h;
          }
        }
      }
    }
  }
  // The float-prefix guess must make replays rare (they cost a sequential chunk on the GPU);
  // wrong guesses must replay every chunk with positive entries.
  EXPECT_LT(stats[0].replays * 4, stats[0].chunks) << stats[0].replays << " of " << stats[0].chunks;
  EXPECT_GT(stats[1].replays * 2, stats[1].chunks);
}

// Full-size rows as the GPU sees them, through the reference's sampleFromProbs.
TEST(SamplingCdfChunks, SplitTokensEqualReferenceAtFullVocab) {
  std::mt19937 rng(4);
  for (int n : {151936, 100003, 49152}) {
    for (Kind kind : {Kind::kSoftmax, Kind::kFlat, Kind::kHalfUlp, Kind::kTies}) {
      const auto v = make_row(kind, n, rng);
      SplitStats st;
      const SplitRow r = split_pass_ab(v, 4096, 0, rng, &st);
      std::uniform_real_distribution<float> uni(0.0f, 1.0f);
      for (int k = 0; k < 200; ++k) {
        const float u = uni(rng);
        const int want = ref::sampleFromProbs(v.data(), n, u);
        ASSERT_EQ(split_search(v, 4096, r, fmulRn(u, r.total)), want) << "n " << n << " u " << u;
      }
      EXPECT_LE(st.replays, st.chunks / 2 + 2) << "n " << n << " kind " << static_cast<int>(kind);
      // The GPU cost driver: each replay is one chunk summed sequentially by one CTA.
      std::printf("  V=%d kind %d: %d of %d chunks replayed\n", n, static_cast<int>(kind),
                  st.replays, st.chunks);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel BC as a CTA: cdf::chainAndSearch (the code the kernel runs) on kModelThreads host
// threads with a barrier, each thread with its own registers. The collectives stand for
// sequentialCdf thread by thread: running sums in index order from the caller's own r0; in the
// search, thread t owns entries [t kModelItems, (t + 1) kModelItems) of every tile of
// kModelThreads * kModelItems, reports the first of them whose running sum exceeds *its own*
// threshold, and the CTA takes the minimum (blockMin2). On uniform inputs that is exactly the
// definition; on non-uniform inputs the GPU's collective is undefined (wrong token or a thread
// waiting at a barrier forever), so the model counts them.

constexpr int kModelThreads = 8;
constexpr int kModelItems = 4;

struct ModelCta {
  explicit ModelCta(int chunks)
      : bar(kModelThreads),
        start(chunks + 1, -1.0f),
        in_c(kModelThreads),
        in_r0(kModelThreads),
        in_th(kModelThreads),
        found(kModelThreads) {}
  std::barrier<> bar;
  std::vector<float> start;  // __shared__ float start[chunks + 1]
  ChainShared sh{-7, -7, -7.0f};
  std::vector<int> in_c;  // each thread's collective inputs, to check they agree
  std::vector<float> in_r0, in_th;
  std::vector<int> found;
  std::atomic<int> nonuniform{0};  // collectives called with disagreeing inputs
  std::atomic<int> replays{0};
};

struct ModelBlock {
  ModelCta* cta;
  int t;
  int tid() const { return t; }
  void sync() const { cta->bar.arrive_and_wait(); }
};

// The collectives of one thread of the model CTA over row v (chunks of chunkLen entries).
struct ModelCollectives {
  const std::vector<float>* v;
  int chunkLen;
  ModelBlock blk;
  int begin(int c) const { return c * chunkLen; }
  int end(int c) const { return std::min(static_cast<int>(v->size()), (c + 1) * chunkLen); }
  // Publishes this thread's inputs; thread 0 counts a disagreement.
  void enter(int c, float r0, float th) const {
    ModelCta& m = *blk.cta;
    m.in_c[blk.t] = c;
    m.in_r0[blk.t] = r0;
    m.in_th[blk.t] = th;
    blk.sync();
    if (blk.t == 0) {
      for (int j = 1; j < kModelThreads; ++j) {
        if (m.in_c[j] != c || f2u(m.in_r0[j]) != f2u(r0) || f2u(m.in_th[j]) != f2u(th)) {
          ++m.nonuniform;
          break;
        }
      }
    }
    blk.sync();
  }
  float replay(int c, float r0) const {
    enter(c, r0, 0.0f);
    if (blk.t == 0) ++blk.cta->replays;
    return chunkReplay([&](int i) { return (*v)[i]; }, begin(c), end(c), r0);
  }
  int search(int c, float r0, float threshold) const {
    enter(c, r0, threshold);
    constexpr int kNone = 0x7fffffff;
    const int b = begin(c), n = end(c) - b;
    int mine = kNone, last = -1;
    float r = r0;
    for (int i = 0; i < n; ++i) {
      const float x = (*v)[b + i];
      if (!(x > 0.0f)) continue;
      last = i;
      r = faddRn(r, x);
      if (mine == kNone && r > threshold &&
          (i % (kModelThreads * kModelItems)) / kModelItems == blk.t)
        mine = i;
    }
    ModelCta& m = *blk.cta;
    m.found[blk.t] = mine;
    blk.sync();
    int first = kNone;
    for (int j = 0; j < kModelThreads; ++j) first = std::min(first, m.found[j]);
    blk.sync();
    return first == kNone ? last : first;  // sequentialCdf: else the last positive index
  }
};

// Runs body(ModelBlock, ModelCollectives) on every thread of a model CTA; returns thread 0's
// result (the kernel's thread 0 writes the token) and checks the others agree.
template <typename Body>
int run_model_cta(ModelCta& cta, const std::vector<float>& v, int chunkLen, Body body,
                  bool* agree) {
  std::vector<int> out(kModelThreads, -9);
  std::vector<std::thread> threads;
  for (int t = 0; t < kModelThreads; ++t) {
    threads.emplace_back([&, t] {
      const ModelBlock blk{&cta, t};
      out[t] = body(blk, ModelCollectives{&v, chunkLen, blk});
    });
  }
  for (auto& th : threads) th.join();
  *agree = std::all_of(out.begin(), out.end(), [&](int x) { return x == out[0]; });
  return out[0];
}

int model_bc(const std::vector<float>& v, const SplitRow& r, int chunkLen, float u, ModelCta& cta,
             bool* agree) {
  const int chunks = static_cast<int>(r.end.size());
  return run_model_cta(
      cta, v, chunkLen,
      [&](const ModelBlock& blk, const ModelCollectives& col) {
        return chainAndSearch(
            blk, chunks, chunkLen, r.summ.data(), u, cta.start.data(), cta.sh,
            [&](int c, float r0) { return col.replay(c, r0); },
            [&](int c, float r0, float th) { return col.search(c, r0, th); },
            [&] { return *std::max_element(r.lastPositive.begin(), r.lastPositive.end()); });
      },
      agree);
}

// A wrong BC (the mutant of PerThreadTotalChainFailsOnAModelCta): thread 0 carries the running
// sum s through the chunks whose summaries apply; the others only update theirs on a replay;
// afterwards every thread takes its own s as the total.
int model_bc_per_thread_total(const std::vector<float>& v, const SplitRow& r, int chunkLen, float u,
                              ModelCta& cta, bool* agree) {
  const int chunks = static_cast<int>(r.end.size());
  const ChunkSummary* summ = r.summ.data();
  return run_model_cta(
      cta, v, chunkLen,
      [&](const ModelBlock& blk, const ModelCollectives& col) {
        float* start = cta.start.data();
        int c = 0;
        float s = 0.0f;
        for (;;) {
          if (blk.tid() == 0) {
            float end;
            while (c < chunks && summariesEnd(summ + 2 * c, 2, s, &end)) {
              start[c++] = s;
              s = end;
            }
            if (c < chunks) start[c] = s;
            cta.sh.nextChunk = c;
          }
          blk.sync();
          c = cta.sh.nextChunk;
          if (c == chunks) break;
          s = start[c];
          blk.sync();
          s = col.replay(c, s);
          ++c;
        }
        if (blk.tid() == 0) start[chunks] = s;
        blk.sync();
        const float total = s;
        const float threshold = fmulRn(u, total);
        int token = -1;
        if (blk.tid() == 0) {
          const int found = firstChunkAbove(start + 1, chunks, threshold);
          cta.sh.found = found;
          if (found == chunks)
            token = *std::max_element(r.lastPositive.begin(), r.lastPositive.end());
        }
        blk.sync();
        const int found = cta.sh.found;
        if (found == chunks) return token;
        return found * chunkLen + col.search(found, start[found], threshold);
      },
      agree);
}

std::vector<float> model_uniforms(std::mt19937& rng, int count) {
  std::vector<float> u = {0.0f, 0.99999994f};
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  while (static_cast<int>(u.size()) < count) u.push_back(uni(rng));
  return u;
}

// Probabilities of a row as the GPU tests build them (tests/kernels/test_sampling_cdf_split_gpu.cu:
// Gaussian logits of scale 1..4, kind 1 coarse (ties), kind 3 one peak), through the reference's
// temperature / top-p (the same fixed-point masses and divisions as fullRowKernel).
std::vector<float> gpu_like_row(int n, uint32_t seed, int kind, float temperature, float topP,
                                TopPMode mode) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f + static_cast<float>(seed % 4));
  std::vector<float> x(n), probs(n);
  for (auto& l : x) l = nd(rng);
  if (kind == 1) {
    for (auto& l : x) l = std::round(l * 2.0f) * 0.5f;
  }
  if (kind == 3) x[(seed * 7919u) % n] = 20.0f;
  const bool uniform = ref::rowProbs(x.data(), n, temperature, 0, topP, mode, probs.data());
  EXPECT_FALSE(uniform);
  return probs;
}

struct GpuLikeCase {
  float temperature, topP;
  TopPMode mode;
};
constexpr GpuLikeCase kGpuLikeCases[] = {{0.5f, 1.0f, TopPMode::kNucleus},
                                         {1.0f, 0.9f, TopPMode::kNucleus},
                                         {2.0f, 1.0f, TopPMode::kNucleus},
                                         {1.0f, 0.9f, TopPMode::kTruncate}};

// The kernel's chain and search (the same template) on a model CTA: the reference's token, every
// thread agreeing, every collective called with block-uniform inputs; with wrong guesses (every
// chunk replayed) and random ones too.
TEST(SamplingCdfChunks, ChainAndSearchOnAModelCtaEqualsReference) {
  std::mt19937 rng(6);
  int rows = 0, replays = 0, chunks_seen = 0;
  for (int n : {151936, 100003, 49152, 4096 * 3}) {
    for (Kind kind :
         {Kind::kSoftmax, Kind::kFlat, Kind::kHalfUlp, Kind::kTies, Kind::kJunk, Kind::kNearPow2}) {
      const auto v = make_row(kind, n, rng);
      for (int mode = 0; mode < 3; ++mode) {
        const SplitRow r = split_pass_ab(v, kCdfChunk, mode, rng, nullptr);
        for (float u : model_uniforms(rng, mode == 0 ? 6 : 3)) {
          ModelCta cta(static_cast<int>(r.end.size()));
          bool agree = false;
          const int got = model_bc(v, r, kCdfChunk, u, cta, &agree);
          const int want = ref::sampleFromProbs(v.data(), n, u);
          ASSERT_EQ(got, want) << "n " << n << " kind " << static_cast<int>(kind) << " mode "
                               << mode << " u " << u;
          ASSERT_TRUE(agree);
          ASSERT_EQ(cta.nonuniform.load(), 0) << "a collective got thread-dependent inputs";
          ASSERT_EQ(f2u(cta.start.back()), f2u(r.total));
          ++rows;
          replays += cta.replays.load();
          chunks_seen += static_cast<int>(r.end.size());
        }
      }
    }
  }
  uint32_t seed = 200;
  for (const GpuLikeCase& gc : kGpuLikeCases) {
    for (int kind = 0; kind < 4; ++kind) {
      const int n = kind % 2 ? 151936 : 128256;
      const auto v = gpu_like_row(n, ++seed, kind, gc.temperature, gc.topP, gc.mode);
      const SplitRow r = split_pass_ab(v, kCdfChunk, 0, rng, nullptr);
      for (float u : model_uniforms(rng, 4)) {
        ModelCta cta(static_cast<int>(r.end.size()));
        bool agree = false;
        ASSERT_EQ(model_bc(v, r, kCdfChunk, u, cta, &agree), ref::sampleFromProbs(v.data(), n, u))
            << "GPU-like row kind " << kind << " T " << gc.temperature << " p " << gc.topP << " u "
            << u;
        ASSERT_TRUE(agree);
        ASSERT_EQ(cta.nonuniform.load(), 0);
        ++rows;
        replays += cta.replays.load();
        chunks_seen += static_cast<int>(r.end.size());
      }
    }
  }
  EXPECT_GT(replays, 0);
  EXPECT_LT(replays, chunks_seen);
  std::printf("  %d model CTAs, %d of %d chunks replayed\n", rows, replays, chunks_seen);
}

// The block-uniformity rule of chainAndSearch must be able to fail: with the total taken from
// each thread's own running sum, every thread but 0 searches for a too small threshold (u times
// the end of the last replayed chunk). On a GPU that gives tokens too early but in the right
// chunk (thread 0 picks the chunk), mostly a few entries past the chunk start (threads 1, 2, ...
// own those), and hangs (a thread whose threshold is already passed at a binade crossing returns
// from sequentialCdf while the others wait at its next barrier); the model CTA shows the same
// tokens. Rows whose last chunks are all replayed (their sum crosses a power of two there) come
// out right, so not every row fails.
TEST(SamplingCdfChunks, PerThreadTotalChainFailsOnAModelCta) {
  std::mt19937 rng(7);
  int wrong = 0, near_start = 0, nonuniform = 0, runs = 0;
  uint32_t seed = 100;
  for (const GpuLikeCase& gc : kGpuLikeCases) {
    for (int kind = 0; kind < 4; ++kind) {
      const int n = 151936;
      const auto v = gpu_like_row(n, ++seed, kind, gc.temperature, gc.topP, gc.mode);
      const SplitRow r = split_pass_ab(v, kCdfChunk, 0, rng, nullptr);
      for (float u : model_uniforms(rng, 4)) {
        ModelCta cta(static_cast<int>(r.end.size()));
        bool agree = false;
        const int got = model_bc_per_thread_total(v, r, kCdfChunk, u, cta, &agree);
        const int want = ref::sampleFromProbs(v.data(), n, u);
        ++runs;
        nonuniform += cta.nonuniform.load() > 0 ? 1 : 0;
        if (got == want) continue;
        ++wrong;
        EXPECT_LT(got, want);  // too early, in the right chunk
        EXPECT_EQ(got / kCdfChunk, want / kCdfChunk) << "got " << got << " want " << want;
        if (got % kCdfChunk < 2 * kModelThreads * kModelItems) ++near_start;
      }
    }
  }
  std::printf(
      "  per-thread-total chain: %d of %d tokens wrong (%d near the chunk start), %d with "
      "thread-dependent collective inputs\n",
      wrong, runs, near_start, nonuniform);
  EXPECT_GT(wrong, runs / 3);
  EXPECT_GT(near_start, wrong / 2);
  EXPECT_GE(nonuniform, wrong);
}

// The tests above must be able to fail: the obvious compositions are wrong on these rows.
TEST(SamplingCdfChunks, NaiveCompositionsDisagreeWithSequential) {
  std::mt19937 rng(5);
  int naive_float_wrong = 0, no_tie_parity_wrong = 0, rows = 0;
  for (Kind kind : kKinds) {
    for (int t = 0; t < 20; ++t) {
      const int n = 2000 + static_cast<int>(rng() % 20000);
      const auto v = make_row(kind, n, rng);
      const float total = seq_total(v);
      ++rows;
      // (a) each chunk summed in float from zero, then the chunk sums added in order.
      float naive = 0.0f;
      for (int b = 0; b < n; b += 512) {
        naive =
            faddRn(naive, chunkReplay([&](int i) { return v[i]; }, b, std::min(n, b + 512), 0.0f));
      }
      if (f2u(naive) != f2u(total)) ++naive_float_wrong;
      // (b) the integer composition with ties rounded up instead of to even.
      float s = 0.0f;
      for (int i = 0; i < n; ++i) {
        if (!(v[i] > 0.0f)) continue;
        const int e = binadeOf(s);
        const Step st = stepOf(v[i], e);
        const Step up{std::max(st.c0, st.c1), std::max(st.c0, st.c1)};
        const int64_t m = stepApply(up, gridCount(s));
        s = m < binadeLimit(e) ? gridValue(e, m) : faddRn(s, v[i]);
      }
      if (f2u(s) != f2u(total)) ++no_tie_parity_wrong;
    }
  }
  EXPECT_GT(naive_float_wrong, rows / 4) << naive_float_wrong << " of " << rows;
  EXPECT_GT(no_tie_parity_wrong, 0);
}

TEST(SamplingCdfChunks, FirstChunkAbove) {
  const float ends[] = {0.0f, 0.25f, 0.25f, 0.5f, 1.0f};
  EXPECT_EQ(firstChunkAbove(ends, 5, -1.0f), 0);
  EXPECT_EQ(firstChunkAbove(ends, 5, 0.0f), 1);
  EXPECT_EQ(firstChunkAbove(ends, 5, 0.25f), 3);
  EXPECT_EQ(firstChunkAbove(ends, 5, 0.75f), 4);
  EXPECT_EQ(firstChunkAbove(ends, 5, 1.0f), 5);
  EXPECT_EQ(firstChunkAbove(ends, 0, 1.0f), 0);
}

TEST(SamplingCdfChunks, GuessBinadesCoverTheNearerEdge) {
  int a, b;
  guessBinades(0.0f, &a, &b);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  guessBinades(1.01f, &a, &b);  // just above 1: 1's binade and the one below
  EXPECT_EQ(a, 127);
  EXPECT_EQ(b, 126);
  guessBinades(1.99f, &a, &b);
  EXPECT_EQ(a, 127);
  EXPECT_EQ(b, 128);
}

// Which batches take the split CDF, and that its workspace region lies inside the plan's bytes.
TEST(SamplingCdfChunks, PlanReservesTheSplitRegion) {
  for (int32_t batch : {1, 8, 9}) {
    for (int32_t vocab : {32767, 49152, 100003, 151936}) {
      for (int32_t k : {0, 50, 2000}) {
        SamplingParams p;
        p.batch = batch;
        p.vocab = vocab;
        p.topK = k;
        const GeneralPlan plan = planGeneral(p);
        const bool want = batch <= kCdfSplitMaxRows && vocab >= kCdfSplitMinVocab && plan.anyFull;
        EXPECT_EQ(plan.cdfSplit, want) << batch << " " << vocab << " " << k;
        if (!plan.cdfSplit) continue;
        EXPECT_EQ(plan.cdfChunks, (vocab + kCdfChunk - 1) / kCdfChunk);
        EXPECT_EQ(plan.cdfOffset % 16, 0u);
        EXPECT_EQ(plan.workspaceBytes, plan.cdfOffset + cdfLayout(batch, plan.cdfChunks).bytes);
      }
    }
  }
}

}  // namespace
}  // namespace es
