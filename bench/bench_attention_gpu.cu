// GPU benchmark of paged decode attention (CUDA events). Prints, in one run:
//   (a) the read-stream ceiling: a reduction over 4 GiB (16-byte loads, nothing written but one
//       word per CTA), measured before and after the attention rows; "% ceil" is relative to the
//       larger of the two;
//   (b) decode (one query row per sequence, causal) at 4k and 32k context, batch 1 and 16, 32 q /
//       8 kv heads, head dim 128, bf16, through launchPagedAttention: "simple" = the per-(row,
//       head) kernel (maxKvLength = 0), "split" = the split-KV path with the planned split count,
//       then a sweep of forced split counts (launchPagedAttentionSplitKv) to check the plan;
//   (c) verify-shaped calls (16 causal rows per sequence, 4k context, batch 1 and 16), simple vs
//       split; at batch 1 the plan takes two row tiles per CTA (the verify variant of
//       paged_attention_split.h: one tile per CTA would need two waves), and rowTiles 1 and 2 are
//       forced with the planned split count ("split, rowTiles 1/2"), their outputs compared bit
//       for bit (they must be equal: both give each row decode's bits);
//   (d) causal prefill (a 4k prompt; a 128-row suffix after a 4k prefix) with TFLOP/s: simple,
//       the plan (the wgmma prefill kernel, paged_attention_prefill.h), and both forced with one
//       split: "split, rowTiles 1" (the split-KV kernel) and "split, rowTiles 2" (the wgmma
//       kernel, as planned).
// Times: "graph us" = per call inside a captured CUDA graph of back-to-back calls (how the model
// runs; no host launch gaps), "eager us" = median of single calls between two events. TB/s counts
// the K and V bytes the call must read (batch * context * Hkv * D * 2 planes * 2 bytes) over the
// graph time. Pools are random bf16 (never zeros) with scrambled page tables; several pool copies
// rotate so that no call finds its K/V in the 60 MB L2 (>= 512 MB of pools per shape, at most 16
// copies). Before timing, each shape checks split against simple on the same inputs and prints the
// largest difference relative to the output RMS (a MISMATCH line if it exceeds 5e-2).
// Run: build-dir/bench/bench_attention_gpu (about 10-20 s on an H200), or with `--shape B,CTX,Q`
// (e.g. 16,32768,1) for that shape's rows only, the read stream included (a profiler run of one
// shape: `ncu --kernel-name regex:decodeKernel ... bench_attention_gpu --shape 16,32768,1`).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_gpu_util.cuh"
#include "common/buffer.h"
#include "common/cuda_check.h"
#include "common/dtype.h"
#include "kernels/paged_attention.h"
#include "kv/page_geometry.h"

namespace es {
namespace {

using bench::hashUniform;
using bench::median_us;
using bench::upload;

constexpr int32_t kPage = kv::kTokensPerPage;
constexpr int32_t kHq = 32, kHkv = 8, kDim = 128;

struct Row {
  std::string name, shape;
  double graphUs, eagerUs, tbps;  // tbps < 0: not a bandwidth row
  double pct = -1;
};
std::vector<Row> gRows;
std::vector<std::string> gNotes;

// ---- random fill (finite, never zero)
// -------------------------------------------------------------
__global__ void fillBf16(bf16* out, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = hashUniform(seed, i);
    float x = lo + (hi - lo) * u;
    if (x == 0.0f) x = 0.5f;
    out[i] = to_bf16(x);
  }
}
void fill(Buffer& b, uint32_t seed, float lo, float hi) {
  fillBf16<<<2048, 256>>>(b.as<bf16>(), b.bytes() / 2, seed, lo, hi);
  ES_CUDA_CHECK_LAUNCH();
}

// Per-call time of `calls` back-to-back fn(i) captured in one graph, median of `reps` replays.
template <typename F>
double graphUs(cudaStream_t stream, int calls, int reps, F&& fn) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) fn(i);
  ES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ES_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us =
      median_us(stream, 2, reps, [&](int) { ES_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  ES_CUDA_CHECK(cudaGraphExecDestroy(exec));
  ES_CUDA_CHECK(cudaGraphDestroy(graph));
  return us / calls;
}

// ---- read-stream ceiling ------------------------------------------------------------------------
__global__ void __launch_bounds__(256)
    readStream(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  constexpr int kUnroll = 8;
  uint32_t acc = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // practically never: keeps the loads alive
}

double readCeilingTbps(cudaStream_t stream, const Buffer& big, Buffer& sink, const char* name) {
  cudaDeviceProp prop{};
  ES_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int blocks = prop.multiProcessorCount * 8;
  const int64_t n = big.bytes() / 16;
  const double us = median_us(stream, 3, 20, [&](int) {
    readStream<<<blocks, 256, 0, stream>>>(big.as<uint4>(), n, sink.as<uint32_t>());
    ES_CUDA_CHECK_LAUNCH();
  });
  const double tbps = double(big.bytes()) / (us * 1e6);
  gRows.push_back({name, "4 GiB, 16-byte loads", us, us, tbps});
  return tbps;
}

// ---- one attention shape ------------------------------------------------------------------------
struct Shape {
  int32_t batch, ctx, qLen;
};

struct Problem {
  Shape s;
  int32_t pagesPerSeq = 0, numPages = 0, totalQ = 0;
  int64_t poolBytes = 0, kvBytes = 0;
  Buffer dCu, dPos, dKv, dTable, workspace;
  std::vector<Buffer> pools, qs, outs;

  Problem(Shape shape, uint32_t seed) : s(shape) {
    pagesPerSeq = (s.ctx + kPage - 1) / kPage;
    numPages = s.batch * pagesPerSeq;
    totalQ = s.batch * s.qLen;
    poolBytes = int64_t{2} * numPages * kPage * kHkv * kDim * 2;
    kvBytes = int64_t{s.batch} * s.ctx * kHkv * kDim * 2 * 2;
    std::vector<int32_t> cu(s.batch + 1), pos(totalQ), kvl(s.batch, s.ctx);
    for (int32_t b = 0; b <= s.batch; ++b) cu[b] = b * s.qLen;
    for (int32_t r = 0; r < totalQ; ++r) pos[r] = s.ctx - s.qLen + r % s.qLen;
    std::vector<int32_t> perm(numPages), table(size_t(s.batch) * 2 * pagesPerSeq);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int32_t b = 0; b < s.batch; ++b) {
      for (int32_t lp = 0; lp < pagesPerSeq; ++lp) {
        const int32_t k = perm[size_t(b) * pagesPerSeq + lp];
        table[size_t(b) * 2 * pagesPerSeq + lp] = k;
        table[size_t(b) * 2 * pagesPerSeq + pagesPerSeq + lp] = k + numPages;
      }
    }
    dCu = upload(cu);
    dPos = upload(pos);
    dKv = upload(kvl);
    dTable = upload(table);
    const int sets = int(std::clamp<int64_t>((int64_t{512} << 20) / poolBytes + 1, 1, 16));
    const int64_t qBytes = int64_t{totalQ} * kHq * kDim * 2;
    for (int i = 0; i < sets; ++i) {
      pools.push_back(Buffer::allocate(MemorySpace::kDevice, poolBytes));
      qs.push_back(Buffer::allocate(MemorySpace::kDevice, qBytes));
      outs.push_back(Buffer::allocate(MemorySpace::kDevice, qBytes));
      fill(pools.back(), seed * 64 + 2 * i + 1, -1.0f, 1.0f);
      fill(qs.back(), seed * 64 + 2 * i + 2, -2.0f, 2.0f);
    }
    // Enough for the plan and for every forced split count of a decode sweep (prefill shapes
    // take one split and sweep nothing).
    const int64_t forced = s.qLen <= kernel::kSplitKvMaxQSeqLen
                               ? int64_t{kernel::kSplitKvMaxSplits} * totalQ * kHq * (kDim + 2) * 4
                               : 16;
    const int64_t ws = std::max(
        kernel::pagedAttentionWorkspaceBytes(s.batch, s.qLen, kHq, kHkv, kDim, s.ctx), forced);
    workspace = Buffer::allocate(MemorySpace::kDevice, ws);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int sets() const { return int(pools.size()); }
  std::string name() const {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "B=%d ctx=%d q=%d", s.batch, s.ctx, s.qLen);
    return buf;
  }
  kernel::PagedAttentionParams params(int set, bool split) const {
    kernel::PagedAttentionParams p;
    p.query.q = qs[set].data();
    p.query.out = outs[set].data();
    p.query.cuQSeqLens = dCu.as<int32_t>();
    p.query.qPositions = dPos.as<int32_t>();
    p.query.totalQ = totalQ;
    p.query.maxQSeqLen = s.qLen;
    p.query.numQHeads = kHq;
    p.kv.pool = pools[set].data();
    p.kv.pageTable = dTable.as<int32_t>();
    p.kv.numPages = numPages;
    p.kv.maxPagesPerSeq = pagesPerSeq;
    p.kv.numKVHeads = kHkv;
    p.kvLengths = dKv.as<int32_t>();
    p.mask = kernel::AttentionMask::kCausal;
    p.batchSize = s.batch;
    p.headDim = kDim;
    p.scale = 1.0f / std::sqrt(float(kDim));
    p.dtype = DType::kBF16;
    if (split) {
      p.maxKvLength = s.ctx;
      p.workspace = workspace.data();
      p.workspaceBytes = workspace.bytes();
    }
    return p;
  }
  std::vector<float> downloadOut(int set) const {
    std::vector<bf16> h(size_t(totalQ) * kHq * kDim);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    ES_CUDA_CHECK(cudaMemcpy(h.data(), outs[set].data(), h.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = to_float(h[i]);
    return f;
  }
};

// Times `launch(set)` (rotating over the pool copies): graph and eager.
template <typename F>
void timeVariant(cudaStream_t stream, const Problem& pr, const std::string& name, F&& launch) {
  // One untimed call for scale: slow variants get fewer iterations.
  const double probe = median_us(stream, 1, 1, [&](int) { launch(0); });
  const int iters = int(std::clamp(150000.0 / std::max(probe, 1.0), 5.0, 300.0));
  const int calls = std::max(pr.sets(), std::min(32, iters));
  const double g =
      graphUs(stream, calls, std::max(10, iters / calls), [&](int i) { launch(i % pr.sets()); });
  const double e = median_us(stream, 3, iters, [&](int i) { launch(i % pr.sets()); });
  gRows.push_back({name, pr.name(), g, e, double(pr.kvBytes) / (g * 1e6)});
}

void benchShape(cudaStream_t stream, Shape shape, const std::vector<int32_t>& sweep) {
  Problem pr(shape, 1000 + shape.batch * 7 + shape.ctx / 1024 + shape.qLen);
  const kernel::PagedAttentionPlan plan = kernel::planPagedAttention(pr.params(0, true));
  if (!plan.splitKv)
    throw std::runtime_error(std::string("split path not planned: ") + plan.reason);

  // Check: split vs simple on set 0.
  kernel::launchPagedAttention(pr.params(0, false), stream);
  const std::vector<float> ref = pr.downloadOut(0);
  kernel::launchPagedAttention(pr.params(0, true), stream);
  // Per (row, head): max |diff| relative to that output's largest element. Early prefill rows
  // average few values and are far larger than the late ones, so one rms for all would flag
  // their bf16 half-ulp differences.
  const auto worstRelativeDiff = [&](const std::vector<float>& got) {
    double worst = 0;
    for (size_t o = 0; o < ref.size(); o += kDim) {
      double scale = 0, diff = 0;
      for (size_t d = o; d < o + kDim; ++d) {
        scale = std::max(scale, std::abs(double(ref[d])));
        diff = std::max(diff, std::abs(double(got[d]) - ref[d]));
      }
      worst = std::max(worst, diff / std::max(scale, 1e-30));
    }
    return worst;
  };
  const double worst = worstRelativeDiff(pr.downloadOut(0));
  char note[320];
  std::snprintf(note, sizeof(note),
                "%s %s: split (%d splits of %d tiles, %d row tiles/CTA, %d per warp row) vs "
                "simple: max |diff| %.3g of the output's max",
                worst > 3e-2 ? "MISMATCH" : "check", pr.name().c_str(), plan.numSplits,
                plan.tilesPerSplit, plan.warpsM * plan.rowTiles, plan.rowTiles, worst);
  gNotes.push_back(note);
  // Shapes that can take two row tiles (prefill per warp, batch-1 verify per CTA): check both
  // variants, with the planned split count (prefill: 1).
  const bool twoTileShape = kernel::planPagedAttention(pr.params(0, true), 0, 2).rowTiles == 2;
  const bool verify = shape.qLen <= kernel::kSplitKvMaxQSeqLen;
  if (twoTileShape) {
    std::vector<float> outs[2];
    for (const int32_t rt : {1, 2}) {
      kernel::launchPagedAttentionSplitKv(pr.params(0, true), plan.numSplits, stream, rt);
      outs[rt - 1] = pr.downloadOut(0);
      const double w = worstRelativeDiff(outs[rt - 1]);
      std::snprintf(
          note, sizeof(note),
          "%s %s: split, rowTiles %d (forced) vs simple: max |diff| %.3g of the output's max",
          w > 3e-2 ? "MISMATCH" : "check", pr.name().c_str(), rt, w);
      gNotes.push_back(note);
    }
    if (verify) {  // both give every row the decode kernel's bits
      size_t differ = 0;
      for (size_t i = 0; i < outs[0].size(); ++i) differ += outs[0][i] != outs[1][i];
      std::snprintf(note, sizeof(note),
                    "%s %s: verify rowTiles 2 vs rowTiles 1 (forced, %d splits): %zu of %zu "
                    "elements differ (must be 0)",
                    differ ? "MISMATCH" : "check", pr.name().c_str(), plan.numSplits, differ,
                    outs[0].size());
      gNotes.push_back(note);
    }
  }

  timeVariant(stream, pr, "simple (per row, head)",
              [&](int set) { kernel::launchPagedAttention(pr.params(set, false), stream); });
  char name[64];
  std::snprintf(name, sizeof(name), "split, plan (%d splits)", plan.numSplits);
  timeVariant(stream, pr, name,
              [&](int set) { kernel::launchPagedAttention(pr.params(set, true), stream); });
  if (verify && twoTileShape) {
    // Batch-1 verify: one (rowTiles 1, decodeKernel) or two (verifyKernel) 16-row tiles per CTA.
    const double planUs = gRows.back().graphUs;
    double us[2] = {0, 0};
    for (const int32_t rt : {1, 2}) {
      const kernel::PagedAttentionPlan forced =
          kernel::planPagedAttention(pr.params(0, true), plan.numSplits, rt);
      timeVariant(
          stream, pr, rt == 1 ? "split, rowTiles 1 (forced)" : "split, rowTiles 2", [&](int set) {
            kernel::launchPagedAttentionSplitKv(pr.params(set, true), plan.numSplits, stream, rt);
          });
      us[rt - 1] = gRows.back().graphUs;
      std::snprintf(note, sizeof(note),
                    "verify %s: split, rowTiles %d%s: %lld CTAs of %d rows, %.2f us",
                    pr.name().c_str(), rt, rt == 1 ? " (forced)" : "",
                    static_cast<long long>(kHkv) * pr.s.batch * forced.rowBlocks * forced.numSplits,
                    16 * forced.warpsM * forced.rowTiles, us[rt - 1]);
      gNotes.push_back(note);
    }
    std::snprintf(note, sizeof(note),
                  "verify %s: split (plan: rowTiles %d) %.2f us; rowTiles 1 / rowTiles 2 = %.2f",
                  pr.name().c_str(), plan.rowTiles, planUs, us[0] / std::max(us[1], 1e-9));
    gNotes.push_back(note);
  }
  if (shape.qLen > kernel::kSplitKvMaxQSeqLen) {
    // Causal FLOPs: row at position p sees p + 1 keys; QK^T and PV are 2 * D FLOPs per key each.
    double flops = 0;
    for (int32_t r = 0; r < shape.qLen; ++r) flops += double(shape.ctx - shape.qLen + r + 1);
    flops *= 4.0 * kDim * kHq * shape.batch;
    const double splitUs = gRows.back().graphUs, simpleUs = gRows[gRows.size() - 2].graphUs;
    std::snprintf(
        note, sizeof(note),
        "prefill %s: split (plan: rowTiles %d) %.1f TFLOP/s (%.1f us), simple %.2f TFLOP/s",
        pr.name().c_str(), plan.rowTiles, flops / (splitUs * 1e6), splitUs,
        flops / (simpleUs * 1e6));
    gNotes.push_back(note);
    if (twoTileShape) {
      for (const int32_t rt : {1, 2}) {
        std::snprintf(name, sizeof(name), "split, rowTiles %d", rt);
        timeVariant(stream, pr, name, [&](int set) {
          kernel::launchPagedAttentionSplitKv(pr.params(set, true), 1, stream, rt);
        });
        const double us = gRows.back().graphUs;
        std::snprintf(note, sizeof(note),
                      "prefill %s: split, rowTiles %d forced: %.1f TFLOP/s (%.1f us)",
                      pr.name().c_str(), rt, flops / (us * 1e6), us);
        gNotes.push_back(note);
      }
    }
  }
  for (int32_t n : sweep) {
    if (n == plan.numSplits) continue;
    std::snprintf(name, sizeof(name), "split, forced %d", n);
    timeVariant(stream, pr, name, [&](int set) {
      kernel::launchPagedAttentionSplitKv(pr.params(set, true), n, stream);
    });
  }
}

// The shapes, in the order they run, with their sweeps of forced split counts.
struct ShapeRun {
  Shape shape;
  std::vector<int32_t> sweep;
};
const std::vector<ShapeRun>& shapeRuns() {
  static const std::vector<ShapeRun> runs = {
      {{1, 4096, 1}, {8, 16, 64}},   {{1, 32768, 1}, {8, 16, 24, 48, 64, 128}},
      {{16, 4096, 1}, {1, 2, 4, 8}}, {{16, 32768, 1}, {1, 3, 4}},
      {{1, 4096, 16}, {}},           {{16, 4096, 16}, {}},
      {{1, 4096, 4096}, {}},  // causal prefill of a 4k prompt
      {{1, 4224, 128}, {}},   // a 128-token suffix after a reused 4k prefix
  };
  return runs;
}

std::string shapeText(const Shape& s) {
  return std::to_string(s.batch) + "," + std::to_string(s.ctx) + "," + std::to_string(s.qLen);
}

// only.batch == 0: every shape; else only that one, which must be one of them.
int run(const Shape& only) {
  std::vector<ShapeRun> selected;
  std::string names;
  for (const ShapeRun& r : shapeRuns()) {
    names += " " + shapeText(r.shape);
    if (only.batch == 0 ||
        (r.shape.batch == only.batch && r.shape.ctx == only.ctx && r.shape.qLen == only.qLen)) {
      selected.push_back(r);
    }
  }
  if (selected.empty()) {
    throw std::runtime_error("--shape " + shapeText(only) +
                             " is none of the bench's shapes:" + names);
  }
  cudaDeviceProp prop{};
  cudaStream_t stream = bench::openDeviceStream("bench_attention_gpu", &prop);
  if (stream == nullptr) return 1;

  double ceiling = 0;
  {
    Buffer big = Buffer::allocate(MemorySpace::kDevice, int64_t{4} << 30);
    Buffer sink = Buffer::allocate(MemorySpace::kDevice, int64_t{4} * prop.multiProcessorCount * 8);
    fill(big, 7, -1.0f, 1.0f);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    ceiling = readCeilingTbps(stream, big, sink, "read stream (before)");
    for (const ShapeRun& r : selected) benchShape(stream, r.shape, r.sweep);
    ceiling = std::max(ceiling, readCeilingTbps(stream, big, sink, "read stream (after)"));
    for (size_t i = 0; i < gRows.size(); ++i) {
      if (gRows[i].tbps >= 0) gRows[i].pct = 100.0 * gRows[i].tbps / ceiling;
    }
  }
  ES_CUDA_CHECK(cudaStreamDestroy(stream));

  std::printf("\nPaged decode attention, bf16, %d q / %d kv heads, D %d (TB/s of K+V bytes)\n", kHq,
              kHkv, kDim);
  std::printf("%-28s %-24s %11s %11s %8s %8s\n", "variant", "shape", "graph us", "eager us", "TB/s",
              "% ceil");
  for (const Row& r : gRows) {
    std::printf("%-28s %-24s %11.2f %11.2f %8.3f %7.1f%%\n", r.name.c_str(), r.shape.c_str(),
                r.graphUs, r.eagerUs, r.tbps, r.pct);
  }
  std::printf("\n");
  for (const std::string& n : gNotes) std::printf("%s\n", n.c_str());
  return 0;
}

}  // namespace
}  // namespace es

int main(int argc, char** argv) {
  try {
    es::Shape only{0, 0, 0};
    const bool oneShape =
        argc == 3 && std::string(argv[1]) == "--shape" &&
        std::sscanf(argv[2], "%d,%d,%d", &only.batch, &only.ctx, &only.qLen) == 3 && only.batch > 0;
    if (argc != 1 && !oneShape) {
      std::fprintf(stderr,
                   "usage: bench_attention_gpu [--shape B,CTX,Q]  (e.g. --shape 16,32768,1)\n");
      return 2;
    }
    return es::run(only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_gpu: %s\n", e.what());
    return 1;
  }
}
