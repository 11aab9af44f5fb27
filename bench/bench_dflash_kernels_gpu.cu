// GPU benchmark of the DFlash runtime kernels (CUDA events, median of many iterations after
// warm-up). Prints, in one run:
//   (a) the device-to-device cudaMemcpy bandwidth ceiling (bytes read + written), measured before
//       and after the KV rows; "% copy" is relative to the larger of the two;
//   (b) launchDFlashTargetKVCacheUpdate at T = 65536, Hkv 8, D 128 (bf16 and fp16): GB/s of K/V
//       read + written + cos/sin read, and % of the copy ceiling (target >= 80%). Inputs (random
//       values, never zeros) rotate between two sets, each far larger than the 60 MB L2. Each
//       kernel variant is timed in 3 rounds (dtype order alternating, variant order rotating);
//       the row is the median of the 3 round medians, "spread" their max - min. Variants: "old"
//       = the previous per-chunk kernel (a scratch copy kept in this file only), "lib" = the
//       public launcher, and the pair kernel of src/kernels/dflash_kv_update_kernel.cuh with 1 or
//       2 tokens per thread, with ("stream") or without ("plain") streaming cache hints. Each
//       variant is first checked bit-exact against "old" on the same inputs (a MISMATCH row
//       appears if not);
//   (c) the KV update at the decode shapes T = 16 (B = 1) and T = 1024 (B = 64), in us, old vs lib;
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

#include "common/buffer.h"
#include "bench_gpu_util.cuh"
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
std::vector<Row> g_rows;

Buffer device(int64_t bytes) {
  Buffer b = Buffer::allocate(MemorySpace::kDevice, bytes);
  ES_CUDA_CHECK(cudaMemset(b.data(), 0, bytes));
  return b;
}



double copy_ceiling_gbps(cudaStream_t stream, const char* name, int warmup, int iters) {
  const int64_t bytes = int64_t{1} << 30;  // 1 GiB each way
  Buffer a = device(bytes), b = device(bytes);
  const double us = median_us(stream, warmup, iters, [&](int) {
    ES_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double gbps = 2.0 * double(bytes) / (us * 1e3);
  g_rows.push_back({name, "1 GiB", us, gbps, 100.0});
  return gbps;
}

// ---- scratch copy of the previous KV-update kernel (comparison only; not in src/) --------------
// One thread per 8-element chunk of one (token, head) for both planes; loads K, V, the rotate-half
// partner K chunk (a second read of K through L1/L2) and cos/sin.
namespace old_kv {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_f32(uint16_t bits, fp16) { return __half2float(__ushort_as_half(bits)); }
__device__ __forceinline__ float to_f32(uint16_t bits, bf16) { return __bfloat162float(__ushort_as_bfloat16(bits)); }
__device__ __forceinline__ uint16_t from_f32(float v, fp16) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ uint16_t from_f32(float v, bf16) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

struct alignas(16) Chunk8 {
  uint16_t e[8];
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    kernel(const T* __restrict__ k_delta, const T* __restrict__ v_delta, T* __restrict__ kv_cache,
           const float* __restrict__ cos_sin, const int32_t* __restrict__ positions,
           const int32_t* __restrict__ owners, const int32_t* __restrict__ page_table,
           int32_t num_tokens, int32_t batch, int32_t hkv, int32_t head_dim, int32_t rotary_dim,
           int32_t num_pages, int32_t max_pages, int32_t chunks_per_head, int32_t tokens_per_cta) {
  constexpr int VEC = 8;
  const int32_t items_per_token = hkv * chunks_per_head;
  const int32_t span = tokens_per_cta * items_per_token;
  const int32_t half = rotary_dim / 2;
  for (int32_t w = threadIdx.x; w < span; w += kThreads) {
    const int32_t local = w / items_per_token;
    const int32_t item = w - local * items_per_token;
    const int64_t token = int64_t{blockIdx.x} * tokens_per_cta + local;
    if (token >= num_tokens) return;
    const int32_t head = item / chunks_per_head;
    const int32_t d0 = (item - head * chunks_per_head) * VEC;
    const int32_t pos = __ldg(positions + token);
    const int32_t b = __ldg(owners + token);
    if (b < 0 || b >= batch || pos < 0) continue;
    const int32_t logical_page = pos / kPage;
    if (logical_page >= max_pages) continue;
    const int32_t slot = pos - logical_page * kPage;
    const int64_t src = (token * hkv + head) * head_dim + d0;
    const auto* kc = reinterpret_cast<const Chunk8*>(k_delta);
    const auto* vc = reinterpret_cast<const Chunk8*>(v_delta);
    const Chunk8 v = vc[src / VEC];
    Chunk8 k = kc[src / VEC];
    const bool rotary = d0 < rotary_dim;
    Chunk8 partner{};
    float c[VEC], s[VEC];
    if (rotary) {
      const bool first_half = d0 < half;
      const int32_t j = first_half ? d0 : d0 - half;
      partner = kc[(src + (first_half ? half : -half)) / VEC];
      const float* row = cos_sin + token * rotary_dim;
      const float4 c0 = __ldg(reinterpret_cast<const float4*>(row + j));
      const float4 c1 = __ldg(reinterpret_cast<const float4*>(row + j + 4));
      const float4 s0 = __ldg(reinterpret_cast<const float4*>(row + half + j));
      const float4 s1 = __ldg(reinterpret_cast<const float4*>(row + half + j + 4));
      c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
      s[0] = s0.x, s[1] = s0.y, s[2] = s0.z, s[3] = s0.w, s[4] = s1.x, s[5] = s1.y, s[6] = s1.z, s[7] = s1.w;
    }
    const int32_t* table_row = page_table + int64_t{b} * 2 * max_pages;
    const int32_t k_page = __ldg(table_row + logical_page);
    const int32_t v_page = __ldg(table_row + max_pages + logical_page);
    if (k_page >= 0 && k_page < num_pages) {
      if (rotary) {
        const float sign = d0 < half ? -1.0f : 1.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float x = __fmul_rn(to_f32(k.e[e], T{}), c[e]);
          const float y = __fmul_rn(to_f32(partner.e[e], T{}), s[e]);
          k.e[e] = from_f32(__fadd_rn(x, sign * y), T{});
        }
      }
      const int64_t dst = ((int64_t{k_page} * kPage + slot) * hkv + head) * head_dim + d0;
      reinterpret_cast<Chunk8*>(kv_cache)[dst / VEC] = k;
    }
    if (v_page >= num_pages && int64_t{v_page} < 2 * int64_t{num_pages}) {
      const int64_t dst = ((int64_t{v_page} * kPage + slot) * hkv + head) * head_dim + d0;
      reinterpret_cast<Chunk8*>(kv_cache)[dst / VEC] = v;
    }
  }
}

template <typename T>
void launch(const kernel::DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  const int32_t chunks_per_head = p.headDim / 8;
  const int32_t items_per_token = p.numKVHeads * chunks_per_head;
  const int32_t tokens_per_cta = items_per_token >= kThreads ? 1 : kThreads / items_per_token;
  const int32_t grid = static_cast<int32_t>((int64_t{p.numDeltaTokens} + tokens_per_cta - 1) / tokens_per_cta);
  kernel<T><<<grid, kThreads, 0, stream>>>(p.kDelta, p.vDelta, p.kvCache, p.tokenAlignedCosSin,
                                           p.deltaPositions, p.deltaTokenToSequence, p.pageTable,
                                           p.numDeltaTokens, p.batchSize, p.numKVHeads, p.headDim,
                                           p.rotaryDim, p.numPages, p.maxPagesPerSeq,
                                           chunks_per_head, tokens_per_cta);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace old_kv

// ---- KV-update variants ------------------------------------------------------------------------
enum class KvVariant { kOld, kLib, kPair1Stream, kPair1Plain, kPair2Stream, kPair2Plain };
constexpr KvVariant kAllVariants[] = {KvVariant::kOld,         KvVariant::kLib,
                                      KvVariant::kPair1Stream, KvVariant::kPair1Plain,
                                      KvVariant::kPair2Stream, KvVariant::kPair2Plain};
const char* variant_name(KvVariant v) {
  switch (v) {
    case KvVariant::kOld: return "KV update old (per chunk)";
    case KvVariant::kLib: return "KV update lib (launcher)";
    case KvVariant::kPair1Stream: return "KV update pair tok1 stream";
    case KvVariant::kPair1Plain: return "KV update pair tok1 plain";
    case KvVariant::kPair2Stream: return "KV update pair tok2 stream";
    case KvVariant::kPair2Plain: return "KV update pair tok2 plain";
  }
  return "?";
}

template <typename T>
void launch_variant(KvVariant v, const kernel::DFlashTargetKVCacheUpdateParams<T>& p,
                    cudaStream_t stream) {
  namespace ku = kernel::kvupdate;
  if (v == KvVariant::kLib) {
    kernel::launchDFlashTargetKVCacheUpdate(p, stream);
    return;
  }
  if (!ku::pair_path_applies(p)) throw std::runtime_error("bench shape must take the 16-byte path");
  switch (v) {
    case KvVariant::kOld: old_kv::launch(p, stream); return;
    case KvVariant::kPair1Stream: ku::launch_pair<1, true>(p, stream); break;
    case KvVariant::kPair1Plain: ku::launch_pair<1, false>(p, stream); break;
    case KvVariant::kPair2Stream: ku::launch_pair<2, true>(p, stream); break;
    case KvVariant::kPair2Plain: ku::launch_pair<2, false>(p, stream); break;
    default: break;
  }
  ES_CUDA_CHECK_LAUNCH();
}

// Random finite values (never zeros: METHOD.md), deterministic per (seed, index).
template <typename T>
__global__ void fill_random(T* out, int64_t n, uint32_t seed, float lo, float hi) {
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
  fill_random<T><<<1024, 256>>>(b.as<T>(), b.bytes() / int64_t(sizeof(T)), seed, lo, hi);
  ES_CUDA_CHECK_LAUNCH();
}
__global__ void count_mismatch(const uint16_t* a, const uint16_t* b, int64_t n,
                               unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    local += a[i] != b[i];
  }
  if (local) atomicAdd(count, local);
}

// One KV-update problem: B sequences of T/B delta tokens after 256 tokens of old context, identity
// page table, `sets` independent input sets (rotated so no iteration reads what the last left in L2).
template <typename T>
struct KvProblem {
  static constexpr int32_t kHkv = 8, kDim = 128, kRotary = 128;
  int32_t batch = 0, tokens = 0, max_pages = 0, num_pages = 0;
  int64_t kv_bytes = 0, cs_bytes = 0, pool_bytes = 0;
  Buffer d_pos, d_own, d_table;
  std::vector<Buffer> k, v, cs, pool;

  KvProblem(int32_t batch_, int32_t tokens_, int sets, uint32_t seed) : batch(batch_), tokens(tokens_) {
    const int32_t per_seq = tokens / batch;
    max_pages = (per_seq + 256 + kPage - 1) / kPage;
    num_pages = batch * max_pages;
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
    d_pos = upload(positions);
    d_own = upload(owners);
    d_table = upload(table);
    kv_bytes = int64_t{tokens} * kHkv * kDim * int64_t(sizeof(T));
    cs_bytes = int64_t{tokens} * kRotary * 4;
    pool_bytes = int64_t{2} * num_pages * kPage * kHkv * kDim * int64_t(sizeof(T));
    for (int s = 0; s < sets; ++s) {
      k.push_back(Buffer::allocate(MemorySpace::kDevice, kv_bytes));
      v.push_back(Buffer::allocate(MemorySpace::kDevice, kv_bytes));
      cs.push_back(Buffer::allocate(MemorySpace::kDevice, cs_bytes));
      pool.push_back(Buffer::allocate(MemorySpace::kDevice, pool_bytes));
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
    p.deltaPositions = d_pos.as<int32_t>();
    p.deltaTokenToSequence = d_own.as<int32_t>();
    p.pageTable = d_table.as<int32_t>();
    p.numDeltaTokens = tokens;
    p.batchSize = batch;
    p.numKVHeads = kHkv;
    p.headDim = kDim;
    p.rotaryDim = kRotary;
    p.numPages = num_pages;
    p.maxPagesPerSeq = max_pages;
    return p;
  }
  double bytes_moved() const { return 4.0 * double(kv_bytes) + double(cs_bytes); }
  int sets() const { return int(k.size()); }
  double time_us(cudaStream_t stream, KvVariant var, int warmup, int iters) {
    return median_us(stream, warmup, iters,
                     [&](int i) { launch_variant(var, params(i % sets()), stream); });
  }
  // Pool elements differing from what "old" writes on set 0 (both start from the same pool).
  unsigned long long mismatches(cudaStream_t stream, KvVariant var) {
    Buffer want = Buffer::allocate(MemorySpace::kDevice, pool_bytes);
    Buffer count = device(sizeof(unsigned long long));
    fill<T>(pool[0], 99, -4.0f, 4.0f);  // legacy stream: synchronise before using it on `stream`
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    launch_variant(KvVariant::kOld, params(0), stream);
    ES_CUDA_CHECK(cudaMemcpyAsync(want.data(), pool[0].data(), pool_bytes, cudaMemcpyDeviceToDevice, stream));
    ES_CUDA_CHECK(cudaStreamSynchronize(stream));
    fill<T>(pool[0], 99, -4.0f, 4.0f);
    ES_CUDA_CHECK(cudaDeviceSynchronize());
    launch_variant(var, params(0), stream);
    count_mismatch<<<1024, 256, 0, stream>>>(want.as<uint16_t>(), pool[0].as<uint16_t>(),
                                             pool_bytes / 2, count.as<unsigned long long>());
    ES_CUDA_CHECK_LAUNCH();
    unsigned long long n = 0;
    ES_CUDA_CHECK(cudaMemcpyAsync(&n, count.data(), sizeof(n), cudaMemcpyDeviceToHost, stream));
    ES_CUDA_CHECK(cudaStreamSynchronize(stream));
    return n;
  }
};

// T = 65536, B = 64: every variant, both dtypes, 3 rounds (dtype order alternating, variant order
// rotating), 20 warm-up + 100 timed launches per measurement.
void bench_kv_large(cudaStream_t stream) {
  constexpr int kRounds = 3, kWarmup = 20, kIters = 100;
  constexpr int kVariants = int(sizeof(kAllVariants) / sizeof(kAllVariants[0]));
  KvProblem<bf16> pb(64, 65536, 2, 100);
  KvProblem<fp16> ph(64, 65536, 2, 200);
  for (const KvVariant var : kAllVariants) {
    if (var == KvVariant::kOld) continue;
    const unsigned long long nb = pb.mismatches(stream, var), nh = ph.mismatches(stream, var);
    std::fprintf(stderr, "parity vs old: %-28s bf16 %llu fp16 %llu mismatching pool elements\n",
                 variant_name(var), nb, nh);
    if (nb != 0 || nh != 0) {
      g_rows.push_back({std::string("MISMATCH ") + variant_name(var), "bf16+fp16 elements",
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
        t[dtype][vi].push_back(dtype == 0 ? pb.time_us(stream, var, kWarmup, kIters)
                                          : ph.time_us(stream, var, kWarmup, kIters));
      }
    }
  }
  for (int dtype = 0; dtype < 2; ++dtype) {
    for (int vi = 0; vi < kVariants; ++vi) {
      std::vector<double>& r = t[dtype][vi];
      std::sort(r.begin(), r.end());
      const double us = r[r.size() / 2];
      const double gbps = (dtype == 0 ? pb.bytes_moved() : ph.bytes_moved()) / (us * 1e3);
      char shape[96];
      std::snprintf(shape, sizeof(shape), "%s T=65536 B=64 Hkv=8 D=128", dtype == 0 ? "bf16" : "fp16");
      Row row{variant_name(kAllVariants[vi]), shape, us, gbps, 0.0};
      row.spread = r.back() - r.front();
      g_rows.push_back(row);
    }
  }
}

// Decode shapes (fit in L2; 8 sets rotate anyway): old vs lib, 50 warm-up + 300 timed launches.
template <typename T>
void bench_kv_decode(cudaStream_t stream, const char* type, int32_t batch, int32_t tokens) {
  KvProblem<T> prob(batch, tokens, 8, 300 + tokens);
  for (const KvVariant var : {KvVariant::kOld, KvVariant::kLib}) {
    const double us = prob.time_us(stream, var, 50, 300);
    char shape[96];
    std::snprintf(shape, sizeof(shape), "%s T=%d B=%d Hkv=8 D=128", type, tokens, batch);
    g_rows.push_back({variant_name(var), shape, us, -1, -1});
  }
}

// The metadata of one DFlash step at batch B, block size 16, captured in one graph.
void bench_metadata_graph(cudaStream_t stream, int32_t batch) {
  const int32_t bs = 16, width = 16;
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
         vmask = device(i4 * batch * bs), vpos = device(i4 * batch * bs), vselect = device(8 * batch * bs),
         vctx = device(i4 * batch), draft = device(i4 * batch * bs), vtokens = device(i4 * batch * bs),
         vtree = device(int64_t{batch} * bs * bs);
  // The four launches; `side1`/`side2` let independent ones run on forked capture streams.
  auto step = [&](cudaStream_t main, cudaStream_t side1, cudaStream_t side2) {
    kernel::launchDFlashPrepareDeltaMetadata({.oldDraftCacheLengths = d_lens.as<int32_t>(),
                                              .deltaLengths = d_delta.as<int32_t>(),
                                              .deltaWidth = width,
                                              .deltaPositions = delta_pos.as<int32_t>(),
                                              .deltaTokenToSequence = delta_own.as<int32_t>(),
                                              .batchSize = batch},
                                             main);
    kernel::launchDFlashPrepareProposalInputs({.oldDraftCacheLengths = d_lens.as<int32_t>(),
                                               .deltaLengths = d_delta.as<int32_t>(),
                                               .blockSize = bs,
                                               .packedAttentionMask = mask.as<int32_t>(),
                                               .attentionPosId = pos_id.as<int32_t>(),
                                               .contextLengths = ctx.as<int32_t>(),
                                               .positions = positions.as<int32_t>(),
                                               .queryStartOffsets = qstart.as<int32_t>(),
                                               .queryLengths = qlen.as<int32_t>(),
                                               .pastLengths = past.as<int32_t>(),
                                               .attentionSequenceLengths = seqlen.as<int32_t>(),
                                               .stateIndices = d_state.as<int32_t>(),
                                               .causalProposalMask = false,
                                               .batchSize = batch},
                                              side1);
    kernel::launchDFlashPrepareBaseVerifyInputs({.baseKVCacheLengths = d_lens.as<int32_t>(),
                                                 .verifySize = bs,
                                                 .packedAttentionMask = vmask.as<int32_t>(),
                                                 .attentionPosId = vpos.as<int32_t>(),
                                                 .selectTokenIndices = vselect.as<int64_t>(),
                                                 .contextLengths = vctx.as<int32_t>(),
                                                 .batchSize = batch},
                                                side1);
    kernel::launchDFlashBuildLinearVerifyInputs({.lastAcceptedTokens = d_anchor.as<int32_t>(),
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
    std::snprintf(shape, sizeof(shape), "B=%d BS=16, 4 kernels %s", batch, forked ? "forked" : "serial");
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
  g_rows.push_back({"metadata eager launches", "B=64 BS=16, 4 kernels", eager, -1, -1});
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
  cudaDeviceProp prop{};
  cudaStream_t stream = bench::openDeviceStream("bench_dflash_kernels_gpu", &prop);
  if (stream == nullptr) return 1;

  // Clocks up before anything is timed (70 x 1 GiB copies, ~35 ms).
  double ceiling = copy_ceiling_gbps(stream, "cudaMemcpy D2D (before)", 10, 60);
  const size_t first_kv_row = g_rows.size();
  bench_kv_large(stream);
  bench_kv_decode<bf16>(stream, "bf16", 1, 16);
  bench_kv_decode<bf16>(stream, "bf16", 64, 1024);
  bench_kv_decode<fp16>(stream, "fp16", 64, 1024);
  ceiling = std::max(ceiling, copy_ceiling_gbps(stream, "cudaMemcpy D2D (after)", 3, 20));
  // % of the larger of the two copy measurements (the conservative ceiling).
  for (size_t i = 0; i < g_rows.size(); ++i) {
    if (g_rows[i].gbps >= 0 && (i >= first_kv_row || g_rows[i].name.rfind("cudaMemcpy", 0) == 0)) {
      g_rows[i].pct = 100.0 * g_rows[i].gbps / ceiling;
    }
  }
  bench_metadata_graph(stream, 64);
  ES_CUDA_CHECK(cudaStreamDestroy(stream));

  std::printf("\n%-34s %-36s %12s %10s %8s %9s\n", "kernel", "shape", "median us", "GB/s",
              "% copy", "spread us");
  for (const Row& r : g_rows) {
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
