// Split full-row inverse CDF kernels (design: kernels/sampling_cdf_split.h; arithmetic:
// kernels/sampling_cdf_chunks.h). Bit-exact with spec §3.5's sequential fp32 running sum, so
// the tokens equal full_row_kernel's own draw and the CPU reference's.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "kernels/sampling_cdf_chunks.h"
#include "kernels/sampling_cdf_split.h"
#include "kernels/sampling_device.h"
#include "kernels/sampling_rows.h"

namespace es::sampling {
namespace {

using namespace es::sampling::dev;

__device__ __forceinline__ float load_value(const float* x, int i) { return x[i]; }
__device__ __forceinline__ float load_value(const fp16* x, int i) { return to_float(x[i]); }

// Entry i's probability: full_row_kernel's prob_at, from the parameters it handed over.
template <typename T>
struct RowProb {
  const T* x;  // [V] logits of the row
  CdfRowParams p;
  __device__ __forceinline__ float operator()(int i) const {
    return full_row_prob(scale_logit(load_value(x, i), p.inv_t, p.greedy != 0), i, p.cc, p.partial != 0, p.last,
                         p.row_max, p.norm);
  }
};

struct CdfPtrs {
  CdfRowParams* params;         // [rows]
  float* chunk_sum;             // [rows][chunks]
  int32_t* last_pos;            // [rows][chunks]
  cdf::ChunkSummary* summary;   // [rows][chunks][2]
};

__host__ __device__ inline CdfPtrs cdf_ptrs(const RowsArgs& a) {
  uint8_t* base = static_cast<uint8_t*>(a.workspace) + a.plan.cdf_offset;
  const CdfLayout l = cdf_layout(a.rows, a.plan.cdf_chunks);
  return {reinterpret_cast<CdfRowParams*>(base + l.params), reinterpret_cast<float*>(base + l.chunk_sum),
          reinterpret_cast<int32_t*>(base + l.last_pos),
          reinterpret_cast<cdf::ChunkSummary*>(base + l.summary)};
}

__device__ __forceinline__ float block_sum_f32(float v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v += shfl_xor(v, o);
  if (lane_id() == 0) sh.slot[warp_id()] = f2u(v);
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kWarps; ++w) r += u2f(static_cast<uint32_t>(sh.slot[w]));
  __syncthreads();
  return r;
}

// Composition, in entry order, of the steps of a chunk's positive entries for binade e. Thread t
// owns the consecutive entries [t * kPer, (t + 1) * kPer) of the chunk (values in v[]).
constexpr int kPer = kCdfChunk / kThreads;
__device__ cdf::Step chunk_step_block(const float (&v)[kPer], int e, BlockScratch& sh) {
  SeqStep mine = {0, 0};
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (v[k] > 0.0f) {
      const cdf::Step s = cdf::step_of(v[k], e);
      mine = seq_then(mine, SeqStep{s.c0, s.c1});
    }
  }
  SeqStep all;
  block_exclusive_scan_steps(mine, sh, &all);
  return {all.c0, all.c1};
}

// A1: each chunk's float sum of positive probabilities (a guess only) and last positive index.
template <typename T>
__global__ void __launch_bounds__(kThreads) cdf_chunk_sum_kernel(RowsArgs a) {
  __shared__ BlockScratch scratch;
  const int chunk = blockIdx.x, row = blockIdx.y, chunks = a.plan.cdf_chunks;
  const CdfPtrs w = cdf_ptrs(a);
  const CdfRowParams p = w.params[row];
  if (p.active == 0) return;
  const RowProb<T> prob{static_cast<const T*>(a.logits) + static_cast<size_t>(row) * a.vocab, p};
  const int begin = chunk * kCdfChunk, end = min(a.vocab, begin + kCdfChunk);
  float sum = 0.0f;
  int last = -1;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const float v = prob(i);
    if (v > 0.0f) {
      sum += v;
      last = i;
    }
  }
  sum = block_sum_f32(sum, scratch);
  last = block_max_int(last, scratch);
  if (threadIdx.x == 0) {
    w.chunk_sum[static_cast<size_t>(row) * chunks + chunk] = sum;
    w.last_pos[static_cast<size_t>(row) * chunks + chunk] = last;
  }
}

// A2: the chunk's summaries for the two binades its approximate start suggests.
template <typename T>
__global__ void __launch_bounds__(kThreads) cdf_chunk_summary_kernel(RowsArgs a) {
  __shared__ BlockScratch scratch;
  __shared__ int binades[2];
  const int chunk = blockIdx.x, row = blockIdx.y, chunks = a.plan.cdf_chunks;
  const CdfPtrs w = cdf_ptrs(a);
  const CdfRowParams p = w.params[row];
  if (p.active == 0) return;
  if (threadIdx.x == 0) {
    float approx = 0.0f;  // within ~V 2^-24 relative of the exact start: enough for a guess
    for (int c = 0; c < chunk; ++c) approx += w.chunk_sum[static_cast<size_t>(row) * chunks + c];
    cdf::guess_binades(approx, &binades[0], &binades[1]);
  }
  const RowProb<T> prob{static_cast<const T*>(a.logits) + static_cast<size_t>(row) * a.vocab, p};
  const int first = chunk * kCdfChunk + static_cast<int>(threadIdx.x) * kPer;
  float v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) v[k] = first + k < a.vocab ? prob(first + k) : 0.0f;
  __syncthreads();
  cdf::ChunkSummary* out = w.summary + (static_cast<size_t>(row) * chunks + chunk) * 2;
  for (int j = 0; j < 2; ++j) {
    const int e = binades[j];
    const cdf::Step s = chunk_step_block(v, e, scratch);
    if (threadIdx.x == 0) out[j] = cdf::ChunkSummary{e, 0, s};
  }
}

// BC: exact chunk starts (summary or replay), then the token: cdf::chain_and_search, whose
// block-uniformity rule (every value that steers the CTA comes from shared memory after a
// barrier) keeps sequential_cdf's collective loop in step across the threads.
struct CtaBlock {
  __device__ __forceinline__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
};

template <typename T>
__global__ void __launch_bounds__(kThreads) cdf_chain_search_kernel(RowsArgs a) {
  __shared__ BlockScratch scratch;
  __shared__ float start[kCdfMaxChunks + 1];  // start[c]: exact sum before chunk c; [chunks]: total
  __shared__ cdf::ChunkSummary summ[kCdfMaxChunks * 2];  // staged: thread 0's walk is latency-bound
  __shared__ cdf::ChainShared chain;
  const int row = blockIdx.x, chunks = a.plan.cdf_chunks;
  const CdfPtrs w = cdf_ptrs(a);
  const CdfRowParams p = w.params[row];
  if (p.active == 0) return;
  const RowProb<T> prob{static_cast<const T*>(a.logits) + static_cast<size_t>(row) * a.vocab, p};
  for (int j = threadIdx.x; j < 2 * chunks; j += kThreads) summ[j] = w.summary[static_cast<size_t>(row) * chunks * 2 + j];
  __syncthreads();
  auto chunk_len = [&](int c) { return min(a.vocab, (c + 1) * kCdfChunk) - c * kCdfChunk; };
  auto replay = [&](int c, float r0) {
    float end = 0.0f;
    sequential_cdf([&](int i) { return prob(c * kCdfChunk + i); }, chunk_len(c), false, 0.0f, &end, scratch, r0);
    return end;
  };
  auto search = [&](int c, float r0, float threshold) {  // >= 0: chunk c's end exceeds threshold
    return sequential_cdf([&](int i) { return prob(c * kCdfChunk + i); }, chunk_len(c), true, threshold,
                          nullptr, scratch, r0);
  };
  auto last_positive = [&] {
    int last = -1;
    for (int j = 0; j < chunks; ++j) last = max(last, w.last_pos[static_cast<size_t>(row) * chunks + j]);
    return last;
  };
  const int token = cdf::chain_and_search(CtaBlock{}, chunks, kCdfChunk, summ, p.u, start, chain, replay,
                                          search, last_positive);
  if (threadIdx.x == 0) a.tokens[row] = token;
}

template <typename T>
void launch_typed(const RowsArgs& a, cudaStream_t stream) {
  const dim3 grid(a.plan.cdf_chunks, a.rows);
  cdf_chunk_sum_kernel<T><<<grid, kThreads, 0, stream>>>(a);
  ES_CUDA_CHECK_LAUNCH();
  cdf_chunk_summary_kernel<T><<<grid, kThreads, 0, stream>>>(a);
  ES_CUDA_CHECK_LAUNCH();
  cdf_chain_search_kernel<T><<<a.rows, kThreads, 0, stream>>>(a);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_cdf_split(const RowsArgs& a, cudaStream_t stream) {
  ES_CHECK_ARG(a.plan.cdf_split && a.tokens != nullptr && a.workspace != nullptr, "sample_rows",
               "cdf_split", a.plan.cdf_split, "needs tokens and a workspace");
  if (a.dtype == DType::kF32) {
    launch_typed<float>(a, stream);
  } else {
    launch_typed<fp16>(a, stream);
  }
}

}  // namespace es::sampling
