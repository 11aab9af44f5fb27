// Sampling kernels (spec §3.1-3.6, §3.8) and their launcher.
//
//  small_vocab_kernel  V <= 4096: one CTA per row, the row's order keys in shared memory.
//                      k <= 512: radix select + candidate bitonic sort; else a full bitonic sort.
//  chunk_kernel        general path, k <= kcap: the row is split into chunks (one CTA each, so
//                      batch 1 spreads over ~75 SMs for V = 151936); each writes its local top-k
//                      candidates (sorted composites) to the workspace.
//  final_kernel        one CTA per row merges the chunk candidates (radix select again), then the
//                      same finalisation and emission as the small-vocab candidate mode.
//  full_row_kernel     general path, top-k off or k > kcap: one CTA per row, or for up to 64
//                      long rows (plan.fullrow_split) one cluster of 2-16 CTAs per row; radix
//                      threshold searches over the row (4 passes each, by count for top-k and by
//                      exact fixed-point mass for top-p), never O(k) passes.
// All paths share kernels/sampling_device.h, so they produce bit-identical probabilities.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "common/rng.h"
#include "kernels/cluster_launch.cuh"
#include "kernels/sampling.h"
#include "kernels/sampling_cdf_split.h"
#include "kernels/sampling_device.h"
#include "kernels/sampling_fullrow_cut.h"
#include "kernels/sampling_fullrow_groups.cuh"
#include "kernels/sampling_rows.h"

namespace es::sampling {
namespace {

using namespace es::sampling::dev;

__device__ __forceinline__ float load_logit(const float* x, int i) { return x[i]; }
__device__ __forceinline__ float load_logit(const fp16* x, int i) { return to_float(x[i]); }

// Loads entries [0, len) (len <= kN) of x into v[kN / kThreads], every load of the thread issued
// before any is used. fp32 rows that are 16-byte aligned use 16-byte loads (layout: slot
// j = 4r + e holds entry 4 (t + r kThreads) + e); otherwise scalar loads (slot j holds entry
// t + j kThreads). Absent entries read 0. Returns the layout (block-uniform) for entry_index().
template <int kN, typename T>
__device__ __forceinline__ bool load_entries(const T* x, int len, float (&v)[kN / kThreads]) {
  constexpr int kPer = kN / kThreads;
  if constexpr (std::is_same_v<T, float>) {
    if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
      float4 w[kPer / 4];
#pragma unroll
      for (int r = 0; r < kPer / 4; ++r) {
        const int b = 4 * (static_cast<int>(threadIdx.x) + r * kThreads);
        if (b + 4 <= len) {
          w[r] = __ldg(reinterpret_cast<const float4*>(x + b));
        } else {
          w[r].x = b < len ? __ldg(x + b) : 0.0f;
          w[r].y = b + 1 < len ? __ldg(x + b + 1) : 0.0f;
          w[r].z = b + 2 < len ? __ldg(x + b + 2) : 0.0f;
          w[r].w = b + 3 < len ? __ldg(x + b + 3) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < kPer / 4; ++r) {
        v[4 * r] = w[r].x;
        v[4 * r + 1] = w[r].y;
        v[4 * r + 2] = w[r].z;
        v[4 * r + 3] = w[r].w;
      }
      return true;
    }
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = threadIdx.x + r * kThreads;
    v[r] = i < len ? load_logit(x, i) : 0.0f;
  }
  return false;
}
__device__ __forceinline__ int entry_index(int j, bool vec) {
  return vec ? 4 * (static_cast<int>(threadIdx.x) + (j >> 2) * kThreads) + (j & 3)
             : static_cast<int>(threadIdx.x) + j * kThreads;
}

__device__ __forceinline__ RowParams row_params(const RowsArgs& a, int row) {
  const int pi = row / a.rows_per_param;
  const float t = a.temperatures ? a.temperatures[pi] : a.temperature;
  const int32_t k = a.top_ks ? a.top_ks[pi] : a.top_k;
  const float p = a.top_ps ? a.top_ps[pi] : a.top_p;
  return make_row_params(t, k, p, a.vocab);
}

__device__ __forceinline__ float row_uniform(const RowsArgs& a, int row) {
  const int q = row / a.rows_per_param;
  return a.uniforms ? a.uniforms[row]
                    : request_uniform(a.seeds[q], a.positions[q], a.purpose,
                                      static_cast<uint32_t>(row - q * a.rows_per_param));
}

constexpr uint32_t kMinusInfKey = fullrow::kMinusInfKey;

// Shared memory of the candidate modes.
struct alignas(16) CandShared {
  uint64_t cand[kMaxCandidateTopK];  // sorted composites
  uint64_t aux[kMaxCandidateTopK];   // prefix masses, then (index, prob) packs
  float prob[kMaxCandidateTopK];     // by sorted position
  int32_t idx_sorted[kMaxCandidateTopK];  // kept entries by index
  float val_sorted[kMaxCandidateTopK];
};

__device__ void emit_uniform(const RowsArgs& a, int row) {
  const int V = a.vocab;
  if (a.probs) {
    const float pu = fdiv_rn(1.0f, static_cast<float>(V));
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) out[i] = pu;
  }
  if (threadIdx.x == 0) {
    if (a.tokens) a.tokens[row] = uniform_row_token(row_uniform(a, row), V);
    if (a.sparse) {
      a.sparse[row].status = kUniform;
      a.sparse[row].count = 0;
    }
  }
}

// Outputs of a candidate-mode row: entries [0, cut) of `sorted` with probabilities prob[].
__device__ void emit_candidates(const RowsArgs& a, int row, const uint64_t* sorted, int cut,
                                CandShared& cs) {
  // Sort the kept entries by index: each entry's position is the number of kept entries with a
  // lower index (indices are distinct), counted over the composites (lower index = larger ~index).
  for (int i = threadIdx.x; i < cut; i += kThreads) cs.aux[i] = sorted[i];
  if ((cut & 1) && threadIdx.x == 0) cs.aux[cut] = 0;  // never counted: ~0u index is impossible
  __syncthreads();
  {
    const uint2* lo = reinterpret_cast<const uint2*>(cs.aux);  // .x: ~index (low word)
    const int np = (cut + 1) >> 1;
    for (int i = threadIdx.x; i < cut; i += kThreads) {
      const uint32_t ni = static_cast<uint32_t>(cs.aux[i]);  // ~index of entry i
      int r = 0;
#pragma unroll 4
      for (int j = 0; j < np; ++j) {
        const uint4 w = reinterpret_cast<const uint4*>(lo)[j];
        r += (w.x > ni ? 1 : 0) + (w.z > ni ? 1 : 0);
      }
      cs.idx_sorted[r] = static_cast<int32_t>(~ni);
      cs.val_sorted[r] = cs.prob[i];
    }
  }
  __syncthreads();
  const int V = a.vocab;
  if (a.probs && a.dense_for_sparse_rows) {
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) out[i] = 0.0f;
    __syncthreads();  // zeros before the scatter (same addresses, other threads)
    for (int i = threadIdx.x; i < cut; i += kThreads) out[cs.idx_sorted[i]] = cs.val_sorted[i];
  }
  if (a.sparse) {
    SparseRow& r = a.sparse[row];
    for (int i = threadIdx.x; i < cut; i += kThreads) {
      r.index[i] = cs.idx_sorted[i];
      r.prob[i] = cs.val_sorted[i];
    }
    if (threadIdx.x == 0) {
      r.status = kSparse;
      r.count = cut;
    }
  }
  if (a.tokens && warp_id() == 0) {
    const int token = sample_sorted_list_warp(cs.idx_sorted, cs.val_sorted, cut, row_uniform(a, row));
    if (lane_id() == 0) a.tokens[row] = token;
  }
}

// ---------------------------------------------------------------------------------------------
// Small-vocab path.

__host__ __device__ inline size_t align8(size_t x) { return (x + 7) & ~size_t{7}; }

template <typename T>
__global__ void __launch_bounds__(kThreads) small_vocab_kernel(RowsArgs a, int full_cap) {
  extern __shared__ __align__(16) uint8_t dyn[];
  __shared__ CandShared cs;
  __shared__ SelectShared ss;
  __shared__ BlockScratch scratch;
  const int row = blockIdx.x, V = a.vocab;
  const RowParams rp = row_params(a, row);
  const T* x = static_cast<const T*>(a.logits) + static_cast<size_t>(row) * V;
  uint32_t* keys = reinterpret_cast<uint32_t*>(dyn);  // [V]
  kernel::pdl::trigger();
  uint64_t local = 0;
  constexpr int kPer = kSmallVocabMax / kThreads;  // all loads issued before any is used
  float raw[kPer];
  const bool vec = load_entries<kSmallVocabMax>(x, V, raw);
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = entry_index(r, vec);
    if (i < V) {
      const float s = scale_logit(raw[r], rp.inv_t, rp.greedy);
      const uint32_t key = order_key(s);
      keys[i] = key;
      local = umax64(local, (poisons_row(s) ? (1ull << 32) : 0ull) | key);
    }
  }
  const uint64_t red = block_max_u64(local, scratch);  // also publishes keys[]
  if ((red >> 32) != 0 || static_cast<uint32_t>(red) == kMinusInfKey) {
    emit_uniform(a, row);
    return;
  }
  const int kept = rp.k;
  if (kept <= kMaxCandidateTopK) {
    select_top_candidates([&](int i) { return composite(keys[i], static_cast<uint32_t>(i)); }, V,
                          kept, cs.cand, ss, scratch);
    const int cut = finalize_sorted(cs.cand, kept, rp, a.mode, cs.aux, cs.prob, scratch);
    emit_candidates(a, row, cs.cand, cut, cs);
    return;
  }
  // Full sort of the row (top-k off or k > 512); full_cap = pow2 >= V was provisioned.
  uint64_t* sorted = reinterpret_cast<uint64_t*>(dyn + align8(static_cast<size_t>(V) * 4));
  uint64_t* mass = sorted + full_cap;
  float* prob = reinterpret_cast<float*>(mass + V);
  for (int i = threadIdx.x; i < full_cap; i += kThreads) {
    sorted[i] = i < V ? composite(keys[i], static_cast<uint32_t>(i)) : 0;
  }
  bitonic_sort(sorted, full_cap, true);  // starts with a barrier: keys[] reads are done after it
  const int cut = finalize_sorted(sorted, kept, rp, a.mode, mass, prob, scratch);
  float* by_index = reinterpret_cast<float*>(keys);
  for (int i = threadIdx.x; i < V; i += kThreads) by_index[i] = 0.0f;
  __syncthreads();
  for (int j = threadIdx.x; j < cut; j += kThreads) by_index[composite_index(sorted[j])] = prob[j];
  __syncthreads();
  if (a.probs) {
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = threadIdx.x; i < V; i += kThreads) out[i] = by_index[i];
  }
  if (a.sparse && threadIdx.x == 0) {
    a.sparse[row].status = kDense;
    a.sparse[row].count = cut;
  }
  if (a.tokens) {
    const int token = full_row_sample([&](int i) { return by_index[i]; }, V, row_uniform(a, row), scratch);
    if (threadIdx.x == 0) a.tokens[row] = token;
  }
}

// ---------------------------------------------------------------------------------------------
// General path, candidate mode.

__device__ __forceinline__ bool candidate_row(const RowsArgs& a, const RowParams& rp) {
  return a.plan.any_candidate && rp.k <= a.plan.kcap;
}
__device__ __forceinline__ size_t chunk_stride(const RowsArgs& a) {  // u64 words per chunk record
  return static_cast<size_t>(min(a.plan.kcap, a.plan.chunk_len)) + 1;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) chunk_kernel(RowsArgs a) {
  __shared__ uint32_t keys[kMaxChunk];
  __shared__ uint64_t cand[kMaxCandidateTopK];
  __shared__ SelectShared ss;
  __shared__ BlockScratch scratch;
  const int row = blockIdx.y, chunk = blockIdx.x, V = a.vocab;
  const RowParams rp = row_params(a, row);
  if (!candidate_row(a, rp)) return;
  const int start = chunk * a.plan.chunk_len;
  const int len = min(a.plan.chunk_len, V - start);
  const T* x = static_cast<const T*>(a.logits) + static_cast<size_t>(row) * V + start;
  kernel::pdl::trigger();  // the final kernel may be scheduled as the last chunk CTAs start
  uint64_t local = 0;
  constexpr int kPer = kMaxChunk / kThreads;  // all loads issued before any is used
  float raw[kPer];
  const bool vec = load_entries<kMaxChunk>(x, len, raw);
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = entry_index(r, vec);
    if (i < len) {
      const float s = scale_logit(raw[r], rp.inv_t, rp.greedy);
      keys[i] = order_key(s);
      local |= poisons_row(s) ? 1ull : 0ull;
    }
  }
  const uint64_t poisoned = block_max_u64(local, scratch);
  const int kc = min(rp.k, len);
  select_top_candidates(
      [&](int i) { return composite(keys[i], static_cast<uint32_t>(start + i)); }, len, kc, cand,
      ss, scratch);
  uint64_t* out = static_cast<uint64_t*>(a.workspace) +
                  (static_cast<size_t>(row) * a.plan.chunks + chunk) * chunk_stride(a);
  for (int j = threadIdx.x; j < kc; j += kThreads) out[j] = cand[j];
  if (threadIdx.x == 0) out[chunk_stride(a) - 1] = poisoned;
}

__global__ void __launch_bounds__(kThreads) final_kernel(RowsArgs a) {
  extern __shared__ __align__(16) uint8_t dyn[];
  __shared__ CandShared cs;
  __shared__ SelectShared ss;
  __shared__ BlockScratch scratch;
  const int row = blockIdx.x, V = a.vocab;
  const RowParams rp = row_params(a, row);
  if (!candidate_row(a, rp)) return;
  kernel::pdl::trigger();
  kernel::pdl::wait();  // launched as a dependent of chunk_kernel: its candidates are visible after this
  uint64_t* buf = reinterpret_cast<uint64_t*>(dyn);
  const int chunks = a.plan.chunks;
  const int kfull = min(rp.k, a.plan.chunk_len);
  const int klast = min(rp.k, V - (chunks - 1) * a.plan.chunk_len);
  const int n = (chunks - 1) * kfull + klast;
  const size_t stride = chunk_stride(a);
  const uint64_t* ws = static_cast<const uint64_t*>(a.workspace) + static_cast<size_t>(row) * chunks * stride;
  uint64_t local = 0;
  constexpr int kPer = kMaxFinalCandidates / kThreads;  // all loads issued before any is used
  uint64_t vals[kPer];
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = threadIdx.x + r * kThreads;
    const int c = i / kfull;
    vals[r] = i < n ? __ldcg(reinterpret_cast<const unsigned long long*>(ws) + c * stride + (i - c * kfull)) : 0;
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int i = threadIdx.x + r * kThreads;
    if (i < n) {
      buf[i] = vals[r];
      local = umax64(local, static_cast<uint64_t>(composite_key(vals[r])));
    }
  }
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    if (ws[c * stride + stride - 1] != 0) local |= 1ull << 32;
  }
  const uint64_t red = block_max_u64(local, scratch);  // also publishes buf[]
  if ((red >> 32) != 0 || static_cast<uint32_t>(red) == kMinusInfKey) {
    emit_uniform(a, row);
    return;
  }
  select_top_candidates([&](int i) { return buf[i]; }, n, rp.k, cs.cand, ss, scratch);
  const int cut = finalize_sorted(cs.cand, rp.k, rp, a.mode, cs.aux, cs.prob, scratch);
  emit_candidates(a, row, cs.cand, cut, cs);
}

// ---------------------------------------------------------------------------------------------
// General path, full-row mode.

// One row's probabilities over a group (a CTA, or a cluster of CTAs with blockIdx.x = rank):
// the cut by fullrow::decide_cut (kernels/sampling_fullrow_cut.h, the same template the CPU test
// runs on a model of the group), then each CTA writes its slice of the probabilities. The lead
// CTA (rank 0) writes the row's status, the split CDF's parameters, or draws the token itself.
template <typename T, bool kCluster>
__global__ void __launch_bounds__(kThreads) full_row_kernel(RowsArgs a) {
  __shared__ FullGroupShared gs;
  __shared__ BlockScratch scratch;
  const int row = kCluster ? blockIdx.y : blockIdx.x, V = a.vocab;
  const RowParams rp = row_params(a, row);
  kernel::pdl::trigger();
  using Group = std::conditional_t<kCluster, ClusterGroup, CtaGroup>;
  Group g = [&] {
    if constexpr (kCluster) {
      return ClusterGroup(gs, scratch, V);
    } else {
      return CtaGroup{gs, scratch, 0, V};
    }
  }();
  // Split CDF (sampling_cdf_split.cu) draws the token: inactive unless this row reaches the draw.
  const bool split_cdf = a.plan.cdf_split && a.tokens != nullptr;
  CdfRowParams* cdf_params = split_cdf ? reinterpret_cast<CdfRowParams*>(
                                             static_cast<uint8_t*>(a.workspace) + a.plan.cdf_offset) + row
                                       : nullptr;
  if (split_cdf && g.lead() && threadIdx.x == 0) cdf_params->active = 0;
  if (candidate_row(a, rp)) return;  // the same for every CTA of the row: before any cluster barrier
  const T* x = static_cast<const T*>(a.logits) + static_cast<size_t>(row) * V;
  auto scaled = [&](int i) { return scale_logit(load_logit(x, i), rp.inv_t, rp.greedy); };
  const fullrow::Cut cut = fullrow::decide_cut(g, scaled, V, rp, a.mode);  // group-uniform
  if (cut.uniform) {
    if (g.lead()) emit_uniform(a, row);
    g.finish();
    return;
  }
  auto prob_at = [&](int i) { return fullrow::cut_prob(cut, scaled(i), i); };
  if (a.probs) {
    float* out = a.probs + static_cast<size_t>(row) * V;
    for (int i = g.begin + threadIdx.x; i < g.end; i += kThreads) out[i] = prob_at(i);
  }
  if (a.sparse && g.lead() && threadIdx.x == 0) {
    a.sparse[row].status = kDense;
    a.sparse[row].count = -1;
  }
  g.finish();  // after the last cluster collective; the draw below reads global memory only
  if (split_cdf) {  // prob_at's inputs: the split CDF's kernels recompute full_row_prob from them
    if (g.lead() && threadIdx.x == 0) {
      *cdf_params = CdfRowParams{cut.cc,    cut.norm, cut.last, rp.inv_t, cut.row_max, row_uniform(a, row),
                                 rp.greedy, cut.partial, 1,     {0, 0}};
    }
  } else if (a.tokens && g.lead()) {  // the lead CTA draws over the whole row (the others are done)
    const int token = full_row_sample(prob_at, V, row_uniform(a, row), scratch);
    if (threadIdx.x == 0) a.tokens[row] = token;
  }
}

// SMs of the current device (cached per thread: a thread stays on one device here).
int device_sm_count() {
  static thread_local const int sms = [] {
    int device = 0, n = 0;
    ES_CUDA_CHECK(cudaGetDevice(&device));
    ES_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return sms;
}

// The widest cluster a full-row row may be split over: 16 (non-portable) where the device can
// co-schedule such a cluster of this kernel, else 8 (portable), as argmax.cu does. Cached.
template <typename T>
int full_row_cluster_ranks() {
  static thread_local const int ranks =
      kernel::cluster::widest_size(full_row_kernel<T, true>, kMaxClusterRanks, kThreads);
  return ranks;
}

template <typename T>
void launch_full_row(const RowsArgs& a, cudaStream_t stream) {
  if (!(a.plan.fullrow_split && fullrow_split_enabled())) {
    full_row_kernel<T, false><<<a.rows, kThreads, 0, stream>>>(a);
    ES_CUDA_CHECK_LAUNCH();
    return;
  }
  const int ranks = fullrow_split_ranks(a.rows, full_row_cluster_ranks<T>(), device_sm_count());
  kernel::cluster::launch(full_row_kernel<T, true>, dim3(ranks, a.rows, 1), dim3(kThreads), ranks,
                          stream, a);
}

// Prepares `kernel` for a launch with `bytes` of dynamic shared memory. Without the opt-in
// attribute a CTA gets at most 48 KB of static + dynamic shared memory together, so the
// attribute is needed whenever static + dynamic > 48 KB (not only when dynamic alone is); the
// opt-in ceiling (227 KB on sm_90) bounds static + dynamic. Checked here with a clear error
// instead of an invalid launch. The attribute is raised once per kernel and size (cached).
template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, size_t bytes, const char* name) {
  struct Entry {
    const void* func;
    int device;
    size_t static_bytes;
    int optin;
    size_t allowed;  // dynamic bytes currently allowed (default: 48 KB - static)
  };
  static thread_local Entry cache[8];
  static thread_local int used = 0;
  int device = 0;
  ES_CUDA_CHECK(cudaGetDevice(&device));
  const void* func = reinterpret_cast<const void*>(kernel);
  Entry* e = nullptr;
  for (int i = 0; i < used; ++i) {
    if (cache[i].func == func && cache[i].device == device) e = &cache[i];
  }
  if (e == nullptr) {
    cudaFuncAttributes attr{};
    ES_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    Entry fresh{func, device, attr.sharedSizeBytes, 0,
                static_cast<size_t>(attr.maxDynamicSharedSizeBytes)};
    ES_CUDA_CHECK(cudaDeviceGetAttribute(&fresh.optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    e = &cache[used < 8 ? used++ : 7];
    *e = fresh;
  }
  ES_CHECK_ARG(e->static_bytes + bytes <= static_cast<size_t>(e->optin), "sample_rows",
               "shared memory", e->static_bytes + bytes, "bytes (", e->static_bytes, " static + ",
               bytes, " dynamic) for ", name, " must be <= ", e->optin,
               " (per-block opt-in limit)");
  if (bytes > e->allowed) {
    ES_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
    e->allowed = bytes;
  }
}

template <typename T>
void launch_typed(const RowsArgs& a, cudaStream_t stream) {
  if (a.small_vocab) {
    const RowParams scalar = make_row_params(1.0f, a.top_k, 1.0f, a.vocab);
    const bool full_possible = a.top_ks != nullptr || scalar.k > kMaxCandidateTopK;
    int cap = 1;
    while (cap < a.vocab) cap <<= 1;
    const size_t bytes = align8(static_cast<size_t>(a.vocab) * 4) +
                         (full_possible ? static_cast<size_t>(cap) * 8 + static_cast<size_t>(a.vocab) * 12 : 0);
    allow_dynamic_smem(small_vocab_kernel<T>, bytes, "small_vocab_kernel");
    small_vocab_kernel<T><<<a.rows, kThreads, bytes, stream>>>(a, full_possible ? cap : 0);
    ES_CUDA_CHECK_LAUNCH();
    return;
  }
  if (a.plan.any_candidate) {
    ES_CHECK_ARG(a.rows <= 65535, "sample_rows", "rows", a.rows,
                 "must be <= 65535 for the general path's chunked launch");
    chunk_kernel<T><<<dim3(a.plan.chunks, a.rows), kThreads, 0, stream>>>(a);
    ES_CUDA_CHECK_LAUNCH();
    const size_t bytes = static_cast<size_t>(a.plan.chunks) * std::min(a.plan.kcap, a.plan.chunk_len) * 8;
    allow_dynamic_smem(final_kernel, bytes, "final_kernel");
    kernel::pdl::launch(final_kernel, dim3(a.rows), dim3(kThreads), bytes, stream, a);
  }
  if (a.plan.any_full || !a.plan.any_candidate) {
    launch_full_row<T>(a, stream);
    if (a.plan.cdf_split && a.tokens != nullptr) launch_cdf_split(a, stream);
  }
}

}  // namespace

bool fullrow_split_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ES_FULLROW_SPLIT");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

void launch_rows(const RowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.dtype == DType::kF32) {
    launch_typed<float>(a, stream);
  } else {
    launch_typed<fp16>(a, stream);
  }
}

}  // namespace es::sampling

namespace es::kernel {

void sample_rows(const SamplingParams& p, cudaStream_t stream) {
  validate_sampling_params(p, "kernel::sample_rows");
  if (p.batch == 0) return;
  sampling::RowsArgs a;
  a.logits = p.logits;
  a.dtype = p.logits_dtype;
  a.rows = p.batch;
  a.vocab = p.vocab;
  a.temperature = p.temperature;
  a.top_k = p.top_k;
  a.top_p = p.top_p;
  a.temperatures = p.temperatures;
  a.top_ks = p.top_ks;
  a.top_ps = p.top_ps;
  a.mode = p.top_p_mode;
  a.rows_per_param = p.rows_per_request;
  a.uniforms = p.uniforms;
  a.seeds = p.seeds;
  a.positions = p.positions;
  a.purpose = p.purpose;
  a.tokens = p.tokens;
  a.probs = p.probs;
  a.small_vocab = p.path == SamplingPath::kSmallVocab ||
                  (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  if (!a.small_vocab) {
    a.plan = sampling::plan_general(p);
    a.plan.cdf_split = a.plan.cdf_split && sampling::cdf_split_enabled();  // A/B: ES_CDF_SPLIT=0
    ES_CHECK_ARG(p.workspace_bytes >= a.plan.workspace_bytes, "kernel::sample_rows",
                 "workspace_bytes", p.workspace_bytes, "must be >= ", a.plan.workspace_bytes,
                 " (sampling_workspace_bytes)");
    ES_CHECK_ARG(a.plan.workspace_bytes == 0 || p.workspace != nullptr, "kernel::sample_rows",
                 "workspace", "null", "must be non-null");
    a.workspace = p.workspace;
  }
  sampling::launch_rows(a, stream);
}

}  // namespace es::kernel
