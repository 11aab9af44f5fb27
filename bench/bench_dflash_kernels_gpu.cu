// GPU benchmark of the DFlash runtime kernels (CUDA events, median of many iterations after
// warm-up). Prints, in one run:
//   (a) the device-to-device cudaMemcpy bandwidth ceiling (bytes read + written), measured before
//       and after the KV rows; "% copy" is relative to the larger of the two;
//   (b) launchDFlashTargetKVCacheUpdate at T = 65536, Hkv 8, D 128 (bf16 and fp16): GB/s of K/V
//       read + written + cos/sin read, and % of the copy ceiling (target >= 80%). Inputs (random
//       values, never zeros) rotate between two sets, each far larger than the 60 MB L2. Each
//       kernel variant is timed in 3 rounds (dtype order alternating, variant order rotating);
//       the row is the median of the 3 round medians, "spread" their max - min. Variants: "lib"
//       = the public launcher, and the pair kernel of src/kernels/dflash_kv_update_kernel.cuh
//       with 1 or 2 tokens per thread, with ("stream") or without ("plain") streaming cache
//       hints. Each variant is first checked bit-exact against "lib" on the same inputs (a
//       MISMATCH row appears if not);
//   (c) the KV update at the decode shapes T = 16 (B = 1) and T = 1024 (B = 64), in us;
//   (d) one DFlash step's metadata prep (proposal inputs, delta metadata, base verify inputs,
//       linear verify inputs) captured in one CUDA graph, replay time at B = 64
//       (target <= 10 us), both as one serial chain and forked into independent branches, plus
//       eager launches and the greedy accept at B = 64 for scale.
// A compact summary table is printed last.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_gpu_util.cuh"
#include "common/buffer.h"
#include "common/cuda_check.h"
#include "kernels/dflash_kv_update.h"
#include "kernels/dflash_kv_update_kernel.cuh"
#include "kernels/dflash_metadata.h"
#include "kernels/dflash_verify_inputs.h"
#include "kernels/eagle_accept.h"
#include "kv/page_geometry.h"

namespace es {
namespace {

using bench::hashUniform;
using bench::median_us;
using bench::upload;

constexpr int32_t kPage = kv::kTokensPerPage;

struct Row {
  std::string name, shape;
  double us, gbps, pct;  // gbps / pct < 0: not a bandwidth row
  double spread = -1;    // max - min over rounds (us), < 0: single measurement
};
std::vector<Row> gRows;

Buffer device(int64_t bytes) {
  Buffer b = Buffer::allocate(MemorySpace::kDevice, bytes);
  ES_CUDA_CHECK(cudaMemset(b.data(), 0, bytes));
  return b;
}

double copyCeilingGbps(cudaStream_t stream, const char* name, int warmup, int iters) {
  const int64_t bytes = int64_t{1} << 30;  // 1 GiB each way
  Buffer a = device(bytes), b = device(bytes);
  const double us = median_us(stream, warmup, iters, [&](int) {
    ES_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double gbps = 2.0 * double(bytes) / (us * 1e3);
  gRows.push_back({name, "1 GiB", us, gbps, 100.0});
  return gbps;
}

// ---- KV-update variants ------------------------------------------------------------------------
enum class KvVariant { kLib, kPair1Stream, kPair1Plain, kPair2Stream, kPair2Plain };
constexpr KvVariant kAllVariants[] = {KvVariant::kLib, KvVariant::kPair1Stream,
                                      KvVariant::kPair1Plain, KvVariant::kPair2Stream,
                                      KvVariant::kPair2Plain};
const char* variantName(KvVariant v) {
  switch (v) {
    case KvVariant::kLib:
      return "KV update lib (launcher)";
    case KvVariant::kPair1Stream:
      return "KV update pair tok1 stream";
    case KvVariant::kPair1Plain:
      return "KV update pair tok1 plain";
    case KvVariant::kPair2Stream:
      return "KV update pair tok2 stream";
    case KvVariant::kPair2Plain:
      return "KV update pair tok2 plain";
  }
  return "?";
}

template <typename T>
void launchVariant(KvVariant v, const kernel::DFlashTargetKVCacheUpdateParams<T>& p,
                   cudaStream_t stream) {
  namespace ku = kernel::kvupdate;
  if (v == KvVariant::kLib) {
    kernel::launchDFlashTargetKVCacheUpdate(p, stream);
    return;
  }
  if (!ku::pairPathApplies(p)) throw std::runtime_error("bench shape must take the 16-byte path");
  switch (v) {
    case KvVariant::kPair1Stream:
      ku::launchPair<1, true>(p, stream);
      break;
    case KvVariant::kPair1Plain:
      ku::launchPair<1, false>(p, stream);
      break;
    case KvVariant::kPair2Stream:
      ku::launchPair<2, true>(p, stream);
      break;
    case KvVariant::kPair2Plain:
      ku::launchPair<2, false>(p, stream);
      break;
    default:
      break;
  }
  ES_CUDA_CHECK_LAUNCH();
}

// Random finite values (never zeros: METHOD.md), deterministic per (seed, index).
template <typename T>
__global__ void fillRandom(T* out, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float u = hashUniform(seed, i);
    const float x = lo + (hi - lo) * u;
    if constexpr (std::is_same_v<T, float>) {
      out[i] = x;
    } else if constexpr (std::is_same_v<T, bf16>) {
      out[i] = to_bf16(x);
    } else {
      out[i] = to_fp16(x);
    }
  }
}
template <typename T>
void fill(Buffer& b, uint32_t seed, float lo, float hi) {
  fillRandom<T><<<1024, 256>>>(b.as<T>(), b.bytes() / int64_t(sizeof(T)), seed, lo, hi);
  ES_CUDA_CHECK_LAUNCH();
}
__global__ void countMismatch(const uint16_t* a, const uint16_t* b, int64_t n,
                              unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    local += a[i] != b[i];
  }
  if (local) atomicAdd(count, local);
}

// One KV-update problem: B sequences of T/B delta tokens after 256 tokens of old context, identity
// page table, `sets` independent input sets (rotated so no iteration reads what the last left in
// L2).
template <typename T>
struct KvProblem {
  static constexpr int32_t kHkv = 8, kDim = 128, kRotary = 128;
  int32_t batch = 0, tokens = 0, maxPages = 0, numPages = 0;
  int64_t kvBytes = 0, csBytes = 0, poolBytes = 0;
  Buffer dPos, dOwn, dTable;
  std::vector<Buffer> k, v, cs, pool;

  KvProblem(int32_t batch_, int32_t tokens_, int sets, uint32_t seed)
      : batch(batch_), tokens(tokens_) {
    const int32_t perSeq = tokens / batch;
    maxPages = (perSeq + 256 + kPage - 1) / kPage;
    numPages = batch * maxPages;
    std::vector<int32_t> positions(tokens), owners(tokens), table(size_t(batch) * 2 * maxPages);
    for (int32_t r = 0; r < tokens; ++r) {
      owners[r] = r / perSeq;
      positions[r] = 256 + r % perSeq;
    }
    for (int32_t b = 0; b < batch; ++b) {
      for (int32_t lp = 0; lp < maxPages; ++lp) {
        table[size_t(b) * 2 * maxPages + lp] = b * maxPages + lp;
        table[size_t(b) * 2 * maxPages + maxPages + lp] = b * maxPages + lp + numPages;
      }
    }
    dPos = upload(positions);
    dOwn = upload(owners);
    dTable = upload(table);
    kvBytes = int64_t{tokens} * kHkv * kDim * int64_t(sizeof(T));
    csBytes = int64_t{tokens} * kRotary * 4;
    poolBytes = int64_t{2} * numPages * kPage * kHkv * kDim * int64_t(sizeof(T));
    for (int s = 0; s < sets; ++s) {
      k.push_back(Buffer::allocate(MemorySpace::kDevice, kvBytes));
      v.push_back(Buffer::allocate(MemorySpace::kDevice, kvBytes));
      cs.push_back(Buffer::allocate(MemorySpace::kDevice, csBytes));
      pool.push_back(Buffer::allocate(MemorySpace::kDevice, poolBytes));
      fill<T>(k.back(), seed + 16 * s + 1, -2.0f, 2.0f);
      fill<T>(v.back(), seed + 16 * s + 2, -2.0f, 2.0f);
      fill<float>(cs.back(), seed + 16 * s + 3, -1.0f, 1.0f);
      fill<T>(pool.back(), seed + 16 * s + 4, -4.0f, 4.0f);
    }
    ES_CUDA_CHECK(cudaDeviceSynchronize());
  }
  kernel::DFlashTargetKVCacheUpdateParams<T> params(int s) const {
    kernel::DFlashTargetKVCacheUpdateParams<T> p;
    p.kDelta = k[s].as<T>();
    p.vDelta = v[s].as<T>();
    p.kvCache = pool[s].as<T>();
    p.tokenAlignedCosSin = cs[s].as<float>();
    p.deltaPositions = dPos.as<int32_t>();
    p.deltaTokenToSequence = dOwn.as<int32_t>();
    p.pageTable = dTable.as<int32_t>();
    p.numDeltaTokens = tokens;
    p.batchSize = batch;
    p.numKVHeads = kHkv;
    p.headDim = kDim;
    p.rotaryDim = kRotary;
    p.numPages = numPages;
    p.maxPagesPerSeq = maxPages;
    return p;
  }
  double bytesMoved() const { return 4.0 * double(kvBytes) + double(csBytes); }
  int sets() const { return int(k.size()); }
  double timeUs(cudaStream_t stream, KvVariant var, int warmup, int iters) {
    return median_us(stream, warmup, iters,
                     [&](int i) { launchVariant(var, params(i % sets()), stream); });
  }
  // Pool elements differing from what the launcher writes on set 0 (both start from the same
  // pool).
  unsigned long long mismatches(cudaStream_t stream, KvVariant var) {
    Buffer want = Buffer::allocate(MemorySpace::kDevice, poolBytes);
    Buffer count = device(sizeof(unsigned long long));
    fill<T>(pool[0], 99, -4.0f, 4.0f);  // legacy stream: synchronise before using it on `stream`
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    launchVariant(KvVariant::kLib, params(0), stream);
    ES_CUDA_CHECK(
        cudaMemcpyAsync(want.data(), pool[0].data(), poolBytes, cudaMemcpyDeviceToDevice, stream));
    ES_CUDA_CHECK(cudaStreamSynchronize(stream));
    fill<T>(pool[0], 99, -4.0f, 4.0f);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    launchVariant(var, params(0), stream);
    countMismatch<<<1024, 256, 0, stream>>>(want.as<uint16_t>(), pool[0].as<uint16_t>(),
                                            poolBytes / 2, count.as<unsigned long long>());
    ES_CUDA_CHECK_LAUNCH();
    unsigned long long n = 0;
    ES_CUDA_CHECK(cudaMemcpyAsync(&n, count.data(), sizeof(n), cudaMemcpyDeviceToHost, stream));
    ES_CUDA_CHECK(cudaStreamSynchronize(stream));
    return n;
  }
};

// T = 65536, B = 64: every variant, both dtypes, 3 rounds (dtype order alternating, variant order
// rotating), 20 warm-up + 100 timed launches per measurement.
void benchKvLarge(cudaStream_t stream) {
  constexpr int kRounds = 3, kWarmup = 20, kIters = 100;
  constexpr int kVariants = int(sizeof(kAllVariants) / sizeof(kAllVariants[0]));
  KvProblem<bf16> pb(64, 65536, 2, 100);
  KvProblem<fp16> ph(64, 65536, 2, 200);
  for (const KvVariant var : kAllVariants) {
    if (var == KvVariant::kLib) continue;
    const unsigned long long nb = pb.mismatches(stream, var), nh = ph.mismatches(stream, var);
    std::fprintf(stderr, "parity vs lib: %-28s bf16 %llu fp16 %llu mismatching pool elements\n",
                 variantName(var), nb, nh);
    if (nb != 0 || nh != 0) {
      gRows.push_back({std::string("MISMATCH ") + variantName(var), "bf16+fp16 elements",
                       double(nb + nh), -1, -1});
    }
  }
  std::vector<double> t[2][kVariants];
  for (int round = 0; round < kRounds; ++round) {
    for (int d = 0; d < 2; ++d) {
      const int dtype = (round + d) % 2;  // 0 = bf16 first in even rounds
      for (int j = 0; j < kVariants; ++j) {
        const int vi = (j + round) % kVariants;
        const KvVariant var = kAllVariants[vi];
        t[dtype][vi].push_back(dtype == 0 ? pb.timeUs(stream, var, kWarmup, kIters)
                                          : ph.timeUs(stream, var, kWarmup, kIters));
      }
    }
  }
  for (int dtype = 0; dtype < 2; ++dtype) {
    for (int vi = 0; vi < kVariants; ++vi) {
      std::vector<double>& r = t[dtype][vi];
      std::sort(r.begin(), r.end());
      const double us = r[r.size() / 2];
      const double gbps = (dtype == 0 ? pb.bytesMoved() : ph.bytesMoved()) / (us * 1e3);
      char shape[96];
      std::snprintf(shape, sizeof(shape), "%s T=65536 B=64 Hkv=8 D=128",
                    dtype == 0 ? "bf16" : "fp16");
      Row row{variantName(kAllVariants[vi]), shape, us, gbps, 0.0};
      row.spread = r.back() - r.front();
      gRows.push_back(row);
    }
  }
}

// Decode shapes (fit in L2; 8 sets rotate anyway): the launcher, 50 warm-up + 300 timed launches.
template <typename T>
void benchKvDecode(cudaStream_t stream, const char* type, int32_t batch, int32_t tokens) {
  KvProblem<T> prob(batch, tokens, 8, 300 + tokens);
  const double us = prob.timeUs(stream, KvVariant::kLib, 50, 300);
  char shape[96];
  std::snprintf(shape, sizeof(shape), "%s T=%d B=%d Hkv=8 D=128", type, tokens, batch);
  gRows.push_back({variantName(KvVariant::kLib), shape, us, -1, -1});
}

// The metadata of one DFlash step at batch B, block size 16, captured in one graph.
void benchMetadataGraph(cudaStream_t stream, int32_t batch) {
  const int32_t bs = 16, width = 16;
  const int32_t tokens = batch * width;
  std::vector<int32_t> lens(batch), delta(batch), anchors(batch), state(batch);
  for (int32_t b = 0; b < batch; ++b) {
    lens[b] = 1000 + 37 * b;
    delta[b] = 1 + b % bs;
    anchors[b] = 100 + b;
    state[b] = b;
  }
  Buffer dLens = upload(lens), dDelta = upload(delta), dAnchor = upload(anchors),
         dState = upload(state);
  const int64_t i4 = 4;
  Buffer mask = device(i4 * batch * bs), posId = device(i4 * batch * bs), ctx = device(i4 * batch),
         positions = device(i4 * batch * bs), qstart = device(i4 * (batch + 1)),
         qlen = device(i4 * batch), past = device(i4 * batch), seqlen = device(i4 * batch),
         deltaPos = device(i4 * tokens), deltaOwn = device(i4 * tokens),
         vmask = device(i4 * batch * bs), vpos = device(i4 * batch * bs),
         vselect = device(8 * batch * bs), vctx = device(i4 * batch),
         draft = device(i4 * batch * bs), vtokens = device(i4 * batch * bs),
         vtree = device(int64_t{batch} * bs * bs);
  // The four launches; `side1`/`side2` let independent ones run on forked capture streams.
  auto step = [&](cudaStream_t main, cudaStream_t side1, cudaStream_t side2) {
    kernel::launchDFlashPrepareDeltaMetadata({.oldDraftCacheLengths = dLens.as<int32_t>(),
                                              .deltaLengths = dDelta.as<int32_t>(),
                                              .deltaWidth = width,
                                              .deltaPositions = deltaPos.as<int32_t>(),
                                              .deltaTokenToSequence = deltaOwn.as<int32_t>(),
                                              .batchSize = batch},
                                             main);
    kernel::launchDFlashPrepareProposalInputs({.oldDraftCacheLengths = dLens.as<int32_t>(),
                                               .deltaLengths = dDelta.as<int32_t>(),
                                               .blockSize = bs,
                                               .packedAttentionMask = mask.as<int32_t>(),
                                               .attentionPosId = posId.as<int32_t>(),
                                               .contextLengths = ctx.as<int32_t>(),
                                               .positions = positions.as<int32_t>(),
                                               .queryStartOffsets = qstart.as<int32_t>(),
                                               .queryLengths = qlen.as<int32_t>(),
                                               .pastLengths = past.as<int32_t>(),
                                               .attentionSequenceLengths = seqlen.as<int32_t>(),
                                               .stateIndices = dState.as<int32_t>(),
                                               .causalProposalMask = false,
                                               .batchSize = batch},
                                              side1);
    kernel::launchDFlashPrepareBaseVerifyInputs({.baseKVCacheLengths = dLens.as<int32_t>(),
                                                 .verifySize = bs,
                                                 .packedAttentionMask = vmask.as<int32_t>(),
                                                 .attentionPosId = vpos.as<int32_t>(),
                                                 .selectTokenIndices = vselect.as<int64_t>(),
                                                 .contextLengths = vctx.as<int32_t>(),
                                                 .batchSize = batch},
                                                side1);
    kernel::launchDFlashBuildLinearVerifyInputs({.lastAcceptedTokens = dAnchor.as<int32_t>(),
                                                 .draftTokenIds = draft.as<int32_t>(),
                                                 .verifyTokenIds = vtokens.as<int32_t>(),
                                                 .verifyTreeMask = vtree.as<int8_t>(),
                                                 .batchSize = batch,
                                                 .proposalLen = bs - 1,
                                                 .draftTokenStride = bs,
                                                 .verifySize = bs},
                                                side2);
  };
  cudaStream_t side1, side2;
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&side1, cudaStreamNonBlocking));
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&side2, cudaStreamNonBlocking));
  cudaEvent_t fork, join1, join2;
  ES_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  ES_CUDA_CHECK(cudaEventCreateWithFlags(&join1, cudaEventDisableTiming));
  ES_CUDA_CHECK(cudaEventCreateWithFlags(&join2, cudaEventDisableTiming));

  // serial: one chain of four kernel nodes; forked: the delta metadata on one branch, the three
  // independent block-shaped kernels on two others (critical path of two kernels).
  for (const bool forked : {false, true}) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ES_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    if (forked) {
      ES_CUDA_CHECK(cudaEventRecord(fork, stream));
      ES_CUDA_CHECK(cudaStreamWaitEvent(side1, fork, 0));
      ES_CUDA_CHECK(cudaStreamWaitEvent(side2, fork, 0));
      step(stream, side1, side2);
      ES_CUDA_CHECK(cudaEventRecord(join1, side1));
      ES_CUDA_CHECK(cudaEventRecord(join2, side2));
      ES_CUDA_CHECK(cudaStreamWaitEvent(stream, join1, 0));
      ES_CUDA_CHECK(cudaStreamWaitEvent(stream, join2, 0));
    } else {
      step(stream, stream, stream);
    }
    ES_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    ES_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    char shape[64];
    std::snprintf(shape, sizeof(shape), "B=%d BS=16, 4 kernels %s", batch,
                  forked ? "forked" : "serial");
    const double single =
        median_us(stream, 20, 500, [&](int) { ES_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
    // Back-to-back replays: GPU time per replay without the per-launch event pair.
    constexpr int kBurst = 200;
    const double burst = median_us(stream, 2, 20,
                                   [&](int) {
                                     for (int i = 0; i < kBurst; ++i)
                                       ES_CUDA_CHECK(cudaGraphLaunch(exec, stream));
                                   }) /
                         kBurst;
    ES_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ES_CUDA_CHECK(cudaGraphDestroy(graph));
    gRows.push_back({"metadata graph (one replay)", shape, single, -1, -1});
    gRows.push_back({"metadata graph (200 back-to-back)", shape, burst, -1, -1});
  }
  const double eager = median_us(stream, 20, 500, [&](int) { step(stream, stream, stream); });
  gRows.push_back({"metadata eager launches", "B=64 BS=16, 4 kernels", eager, -1, -1});
  ES_CUDA_CHECK(cudaEventDestroy(fork));
  ES_CUDA_CHECK(cudaEventDestroy(join1));
  ES_CUDA_CHECK(cudaEventDestroy(join2));
  ES_CUDA_CHECK(cudaStreamDestroy(side1));
  ES_CUDA_CHECK(cudaStreamDestroy(side2));

  // Greedy accept on the same batch (not part of the graph above; here for scale).
  std::vector<int32_t> top(size_t(batch) * bs), verify(size_t(batch) * bs);
  for (size_t i = 0; i < top.size(); ++i) top[i] = verify[i] = int32_t(i % 7);
  Buffer dTop = upload(top), dVerify = upload(verify), accTok = device(i4 * batch * bs),
         accNode = device(i4 * batch * bs), accLen = device(i4 * batch);
  kernel::EagleAcceptParams ap{.targetTopIds = dTop.as<int32_t>(),
                               .verifyTokenIds = dVerify.as<int32_t>(),
                               .acceptedTokens = accTok.as<int32_t>(),
                               .acceptedNodeIds = accNode.as<int32_t>(),
                               .acceptLengths = accLen.as<int32_t>(),
                               .batchSize = batch,
                               .verifySize = bs};
  const double accept =
      median_us(stream, 20, 500, [&](int) { kernel::launchEagleAccept(ap, stream); });
  gRows.push_back({"eagle accept (eager)", "B=64 S=16 linear", accept, -1, -1});
}

int run() {
  cudaDeviceProp prop{};
  cudaStream_t stream = bench::openDeviceStream("bench_dflash_kernels_gpu", &prop);
  if (stream == nullptr) return 1;

  // Clocks up before anything is timed (70 x 1 GiB copies, ~35 ms).
  double ceiling = copyCeilingGbps(stream, "cudaMemcpy D2D (before)", 10, 60);
  const size_t firstKvRow = gRows.size();
  benchKvLarge(stream);
  benchKvDecode<bf16>(stream, "bf16", 1, 16);
  benchKvDecode<bf16>(stream, "bf16", 64, 1024);
  benchKvDecode<fp16>(stream, "fp16", 64, 1024);
  ceiling = std::max(ceiling, copyCeilingGbps(stream, "cudaMemcpy D2D (after)", 3, 20));
  // % of the larger of the two copy measurements (the conservative ceiling).
  for (size_t i = 0; i < gRows.size(); ++i) {
    if (gRows[i].gbps >= 0 && (i >= firstKvRow || gRows[i].name.rfind("cudaMemcpy", 0) == 0)) {
      gRows[i].pct = 100.0 * gRows[i].gbps / ceiling;
    }
  }
  benchMetadataGraph(stream, 64);
  ES_CUDA_CHECK(cudaStreamDestroy(stream));

  std::printf("\n%-34s %-36s %12s %10s %8s %9s\n", "kernel", "shape", "median us", "GB/s", "% copy",
              "spread us");
  for (const Row& r : gRows) {
    char spread[32] = "-";
    if (r.spread >= 0) std::snprintf(spread, sizeof(spread), "%.2f", r.spread);
    if (r.gbps >= 0) {
      std::printf("%-34s %-36s %12.2f %10.1f %7.1f%% %9s\n", r.name.c_str(), r.shape.c_str(), r.us,
                  r.gbps, r.pct, spread);
    } else {
      std::printf("%-34s %-36s %12.2f %10s %8s %9s\n", r.name.c_str(), r.shape.c_str(), r.us, "-",
                  "-", spread);
    }
  }
  return 0;
}

}  // namespace
}  // namespace es

int main() {
  try {
    return es::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dflash_kernels_gpu: %s\n", e.what());
    return 1;
  }
}
