// GPU benchmark of the DFlash runtime kernels (CUDA events, median of many iterations after
// warm-up). Prints, in one run:
//   (a) the device-to-device cudaMemcpy bandwidth ceiling (bytes read + written);
//   (b) launchDFlashTargetKVCacheUpdate at T = 65536, Hkv 8, D 128 (bf16 and fp16): GB/s of K/V
//       read + written + cos/sin read, and % of the copy ceiling (target >= 80%); inputs rotate
//       between two sets, each far larger than the 60 MB L2;
//   (c) the KV update at the decode shape T = 16 x B for B = 1 and 64, in us;
//   (d) one DFlash step's metadata prep (proposal inputs, delta metadata, gather delta rope, base
//       verify inputs, linear verify inputs) captured in one CUDA graph, replay time at B = 64
//       (target <= 10 us), both as one serial chain and forked into independent branches, plus
//       eager launches and the greedy accept at B = 64 for scale.
// A compact summary table is printed last.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda_check.h"
#include "kernels/dflash_kv_update.h"
#include "kernels/dflash_metadata.h"
#include "kernels/dflash_verify_inputs.h"
#include "kernels/eagle_accept.h"

namespace es {
namespace {

constexpr int32_t kPage = 128;

struct Row {
  std::string name, shape;
  double us, gbps, pct;  // gbps / pct < 0: not a bandwidth row
};
std::vector<Row> g_rows;

Buffer device(int64_t bytes) {
  Buffer b = Buffer::allocate(MemorySpace::kDevice, bytes);
  ES_CUDA_CHECK(cudaMemset(b.data(), 0, bytes));
  return b;
}

template <typename T>
Buffer upload(const std::vector<T>& host) {
  Buffer b = Buffer::allocate(MemorySpace::kDevice, int64_t(host.size() * sizeof(T)));
  ES_CUDA_CHECK(cudaMemcpy(b.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

// Median over `iters` timed calls of fn(i) (each between its own pair of events) after `warmup`.
template <typename F>
double median_us(cudaStream_t stream, int warmup, int iters, F&& fn) {
  cudaEvent_t start, stop;
  ES_CUDA_CHECK(cudaEventCreate(&start));
  ES_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) fn(i);
  ES_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    ES_CUDA_CHECK(cudaEventRecord(start, stream));
    fn(i);
    ES_CUDA_CHECK(cudaEventRecord(stop, stream));
    ES_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ES_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t[i] = ms * 1000.0;
  }
  ES_CUDA_CHECK(cudaEventDestroy(start));
  ES_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

double copy_ceiling_gbps(cudaStream_t stream) {
  const int64_t bytes = int64_t{1} << 30;  // 1 GiB each way
  Buffer a = device(bytes), b = device(bytes);
  const double us = median_us(stream, 3, 20, [&](int) {
    ES_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double gbps = 2.0 * double(bytes) / (us * 1e3);
  g_rows.push_back({"cudaMemcpy D2D", "1 GiB", us, gbps, 100.0});
  return gbps;
}

// One KV-update problem: B sequences of T/B delta tokens at the end of their context, identity
// page table, `sets` independent input sets (rotated so no iteration reads what the last left in L2).
template <typename T>
void bench_kv_update(cudaStream_t stream, const char* type, int32_t batch, int32_t tokens,
                     int sets, double ceiling, bool bandwidth_row) {
  const int32_t hkv = 8, dim = 128, rotary = 128;
  const int32_t per_seq = tokens / batch;
  const int32_t max_pages = (per_seq + 256 + kPage - 1) / kPage;  // 256 tokens of old context
  const int32_t num_pages = batch * max_pages;
  std::vector<int32_t> positions(tokens), owners(tokens), table(size_t(batch) * 2 * max_pages);
  for (int32_t r = 0; r < tokens; ++r) {
    owners[r] = r / per_seq;
    positions[r] = 256 + r % per_seq;
  }
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t lp = 0; lp < max_pages; ++lp) {
      table[size_t(b) * 2 * max_pages + lp] = b * max_pages + lp;
      table[size_t(b) * 2 * max_pages + max_pages + lp] = b * max_pages + lp + num_pages;
    }
  }
  Buffer d_pos = upload(positions), d_own = upload(owners), d_table = upload(table);
  const int64_t kv_bytes = int64_t{tokens} * hkv * dim * int64_t(sizeof(T));
  const int64_t cs_bytes = int64_t{tokens} * rotary * 4;
  const int64_t pool_bytes = int64_t{2} * num_pages * kPage * hkv * dim * int64_t(sizeof(T));
  std::vector<Buffer> k, v, cs, pool;
  for (int s = 0; s < sets; ++s) {
    k.push_back(device(kv_bytes));
    v.push_back(device(kv_bytes));
    cs.push_back(device(cs_bytes));
    pool.push_back(device(pool_bytes));
  }
  const double us = median_us(stream, 5, bandwidth_row ? 50 : 200, [&](int i) {
    const int s = i % sets;
    kernel::launchDFlashTargetKVCacheUpdate(
        k[s].as<T>(), v[s].as<T>(), pool[s].as<T>(), cs[s].as<float>(), d_pos.as<int32_t>(),
        d_own.as<int32_t>(), d_table.as<int32_t>(), tokens, batch, hkv, dim, rotary, num_pages,
        max_pages, stream);
  });
  ES_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double bytes = 4.0 * double(kv_bytes) + double(cs_bytes);
  const double gbps = bytes / (us * 1e3);
  char shape[96];
  std::snprintf(shape, sizeof(shape), "%s T=%d B=%d Hkv=8 D=128", type, tokens, batch);
  g_rows.push_back({"KV update", shape, us, gbps, 100.0 * gbps / ceiling});
}

// The metadata of one DFlash step at batch B, block size 16, captured in one graph.
void bench_metadata_graph(cudaStream_t stream, int32_t batch) {
  const int32_t bs = 16, width = 16, rotary = 128, capacity = 4096 + bs;
  const int32_t tokens = batch * width;
  std::vector<int32_t> lens(batch), delta(batch), anchors(batch), state(batch);
  for (int32_t b = 0; b < batch; ++b) {
    lens[b] = 1000 + 37 * b;
    delta[b] = 1 + b % bs;
    anchors[b] = 100 + b;
    state[b] = b;
  }
  Buffer d_lens = upload(lens), d_delta = upload(delta), d_anchor = upload(anchors),
         d_state = upload(state);
  const int64_t i4 = 4;
  Buffer mask = device(i4 * batch * bs), pos_id = device(i4 * batch * bs),
         ctx = device(i4 * batch), positions = device(i4 * batch * bs), qstart = device(i4 * (batch + 1)),
         qlen = device(i4 * batch), past = device(i4 * batch), seqlen = device(i4 * batch),
         delta_pos = device(i4 * tokens), delta_own = device(i4 * tokens),
         rope_src = device(i4 * capacity * rotary), rope_out = device(i4 * tokens * rotary),
         vmask = device(i4 * batch * bs), vpos = device(i4 * batch * bs), vselect = device(8 * batch * bs),
         vctx = device(i4 * batch), draft = device(i4 * batch * bs), vtokens = device(i4 * batch * bs),
         vtree = device(int64_t{batch} * bs * bs);
  // The five launches; `side1`/`side2` let independent ones run on forked capture streams.
  auto step = [&](cudaStream_t main, cudaStream_t side1, cudaStream_t side2) {
    kernel::launchDFlashPrepareDeltaMetadata(d_lens.as<int32_t>(), d_delta.as<int32_t>(), width,
                                             delta_pos.as<int32_t>(), delta_own.as<int32_t>(),
                                             batch, main);
    kernel::launchDFlashGatherDeltaRope(rope_src.as<float>(), rope_out.as<float>(),
                                        delta_pos.as<int32_t>(), delta_own.as<int32_t>(), nullptr,
                                        tokens, batch, 1, capacity, rotary, main);
    kernel::launchDFlashPrepareProposalInputs(
        d_lens.as<int32_t>(), d_delta.as<int32_t>(), bs, mask.as<int32_t>(), pos_id.as<int32_t>(),
        ctx.as<int32_t>(), positions.as<int32_t>(), qstart.as<int32_t>(), qlen.as<int32_t>(),
        past.as<int32_t>(), seqlen.as<int32_t>(), d_state.as<int32_t>(), false, batch, side1);
    kernel::launchDFlashPrepareBaseVerifyInputs(d_lens.as<int32_t>(), bs, vmask.as<int32_t>(),
                                                vpos.as<int32_t>(), vselect.as<int64_t>(),
                                                vctx.as<int32_t>(), batch, side1);
    kernel::launchDFlashBuildLinearVerifyInputs(d_anchor.as<int32_t>(), draft.as<int32_t>(),
                                                vtokens.as<int32_t>(), vtree.as<int8_t>(), batch,
                                                bs - 1, bs, bs, side2);
  };
  cudaStream_t side1, side2;
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&side1, cudaStreamNonBlocking));
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&side2, cudaStreamNonBlocking));
  cudaEvent_t fork, join1, join2;
  ES_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  ES_CUDA_CHECK(cudaEventCreateWithFlags(&join1, cudaEventDisableTiming));
  ES_CUDA_CHECK(cudaEventCreateWithFlags(&join2, cudaEventDisableTiming));

  // serial: one chain of five kernel nodes; forked: delta -> gather on one branch, the three
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
    std::snprintf(shape, sizeof(shape), "B=%d BS=16, 5 kernels %s", batch, forked ? "forked" : "serial");
    const double single =
        median_us(stream, 20, 500, [&](int) { ES_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
    // Back-to-back replays: GPU time per replay without the per-launch event pair.
    constexpr int kBurst = 200;
    const double burst = median_us(stream, 2, 20, [&](int) {
                           for (int i = 0; i < kBurst; ++i) ES_CUDA_CHECK(cudaGraphLaunch(exec, stream));
                         }) / kBurst;
    ES_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ES_CUDA_CHECK(cudaGraphDestroy(graph));
    g_rows.push_back({"metadata graph (one replay)", shape, single, -1, -1});
    g_rows.push_back({"metadata graph (200 back-to-back)", shape, burst, -1, -1});
  }
  const double eager = median_us(stream, 20, 500, [&](int) { step(stream, stream, stream); });
  g_rows.push_back({"metadata eager launches", "B=64 BS=16, 5 kernels", eager, -1, -1});
  ES_CUDA_CHECK(cudaEventDestroy(fork));
  ES_CUDA_CHECK(cudaEventDestroy(join1));
  ES_CUDA_CHECK(cudaEventDestroy(join2));
  ES_CUDA_CHECK(cudaStreamDestroy(side1));
  ES_CUDA_CHECK(cudaStreamDestroy(side2));

  // Greedy accept on the same batch (not part of the graph above; here for scale).
  std::vector<int32_t> top(size_t(batch) * bs), verify(size_t(batch) * bs);
  for (size_t i = 0; i < top.size(); ++i) top[i] = verify[i] = int32_t(i % 7);
  Buffer d_top = upload(top), d_verify = upload(verify), acc_tok = device(i4 * batch * bs),
         acc_node = device(i4 * batch * bs), acc_len = device(i4 * batch);
  kernel::EagleAcceptParams ap;
  ap.targetTopIds = d_top.as<int32_t>();
  ap.verifyTokenIds = d_verify.as<int32_t>();
  ap.acceptedTokens = acc_tok.as<int32_t>();
  ap.acceptedNodeIds = acc_node.as<int32_t>();
  ap.acceptLengths = acc_len.as<int32_t>();
  ap.batchSize = batch;
  ap.verifySize = bs;
  const double accept = median_us(stream, 20, 500, [&](int) { kernel::launchEagleAccept(ap, stream); });
  g_rows.push_back({"eagle accept (eager)", "B=64 S=16 linear", accept, -1, -1});
}

int run() {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_dflash_kernels_gpu: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  ES_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::fprintf(stderr, "device: %s, L2 %d MB\n", prop.name, prop.l2CacheSize >> 20);
  cudaStream_t stream;
  ES_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const double ceiling = copy_ceiling_gbps(stream);
  bench_kv_update<bf16>(stream, "bf16", 64, 65536, 2, ceiling, true);
  bench_kv_update<fp16>(stream, "fp16", 64, 65536, 2, ceiling, true);
  bench_kv_update<bf16>(stream, "bf16", 1, 16, 8, ceiling, false);
  bench_kv_update<bf16>(stream, "bf16", 64, 1024, 8, ceiling, false);
  bench_kv_update<fp16>(stream, "fp16", 64, 1024, 8, ceiling, false);
  bench_metadata_graph(stream, 64);
  ES_CUDA_CHECK(cudaStreamDestroy(stream));

  std::printf("\n%-34s %-36s %12s %10s %8s\n", "kernel", "shape", "median us", "GB/s", "% copy");
  for (const Row& r : g_rows) {
    if (r.gbps >= 0) {
      std::printf("%-34s %-36s %12.2f %10.1f %7.1f%%\n", r.name.c_str(), r.shape.c_str(), r.us,
                  r.gbps, r.pct);
    } else {
      std::printf("%-34s %-36s %12.2f %10s %8s\n", r.name.c_str(), r.shape.c_str(), r.us, "-", "-");
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
