// Split full-row inverse CDF kernels (design: kernels/sampling_cdf_split.h; arithmetic:
// kernels/sampling_cdf_chunks.h). Bit-exact with spec §3.5's sequential fp32 running sum, so
// the tokens equal fullRowKernel's own draw and the CPU reference's.
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

__device__ __forceinline__ float loadValue(const float* x, int i) { return x[i]; }
__device__ __forceinline__ float loadValue(const fp16* x, int i) { return to_float(x[i]); }

// Entry i's probability: fullRowKernel's probAt, from the parameters it handed over.
template <typename T>
struct RowProb {
  const T* x;  // [V] logits of the row
  CdfRowParams p;
  __device__ __forceinline__ float operator()(int i) const {
    return fullRowProb(scaleLogit(loadValue(x, i), p.invT, p.greedy != 0), i, p.cc, p.partial != 0,
                       p.last, p.rowMax, p.norm);
  }
};

struct CdfPtrs {
  CdfRowParams* params;        // [rows]
  float* chunkSum;             // [rows][chunks]
  int32_t* lastPos;            // [rows][chunks]
  cdf::ChunkSummary* summary;  // [rows][chunks][2]
};

__host__ __device__ inline CdfPtrs cdfPtrs(const RowsArgs& a) {
  uint8_t* base = static_cast<uint8_t*>(a.workspace) + a.plan.cdfOffset;
  const CdfLayout l = cdfLayout(a.rows, a.plan.cdfChunks);
  return {reinterpret_cast<CdfRowParams*>(base + l.params),
          reinterpret_cast<float*>(base + l.chunkSum), reinterpret_cast<int32_t*>(base + l.lastPos),
          reinterpret_cast<cdf::ChunkSummary*>(base + l.summary)};
}

__device__ __forceinline__ float blockSumF32(float v, BlockScratch& sh) {
  for (int o = 16; o; o >>= 1) v += shflXor(v, o);
  if (laneId() == 0) sh.slot[warpId()] = f2u(v);
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kWarps; ++w) r += u2f(static_cast<uint32_t>(sh.slot[w]));
  __syncthreads();
  return r;
}

// Composition, in entry order, of the steps of a chunk's positive entries for binade e. Thread t
// owns the consecutive entries [t * kPer, (t + 1) * kPer) of the chunk (values in v[]).
constexpr int kPer = kCdfChunk / kThreads;
__device__ cdf::Step chunkStepBlock(const float (&v)[kPer], int e, BlockScratch& sh) {
  SeqStep mine = {0, 0};
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (v[k] > 0.0f) {
      const cdf::Step s = cdf::stepOf(v[k], e);
      mine = seqThen(mine, SeqStep{s.c0, s.c1});
    }
  }
  SeqStep all;
  blockExclusiveScanSteps(mine, sh, &all);
  return {all.c0, all.c1};
}

// A1: each chunk's float sum of positive probabilities (a guess only) and last positive index.
template <typename T>
__global__ void __launch_bounds__(kThreads) cdfChunkSumKernel(RowsArgs a) {
  __shared__ BlockScratch scratch;
  const int chunk = blockIdx.x, row = blockIdx.y, chunks = a.plan.cdfChunks;
  const CdfPtrs w = cdfPtrs(a);
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
  sum = blockSumF32(sum, scratch);
  last = blockMaxInt(last, scratch);
  if (threadIdx.x == 0) {
    w.chunkSum[static_cast<size_t>(row) * chunks + chunk] = sum;
    w.lastPos[static_cast<size_t>(row) * chunks + chunk] = last;
  }
}

// A2: the chunk's summaries for the two binades its approximate start suggests.
template <typename T>
__global__ void __launch_bounds__(kThreads) cdfChunkSummaryKernel(RowsArgs a) {
  __shared__ BlockScratch scratch;
  __shared__ int binades[2];
  const int chunk = blockIdx.x, row = blockIdx.y, chunks = a.plan.cdfChunks;
  const CdfPtrs w = cdfPtrs(a);
  const CdfRowParams p = w.params[row];
  if (p.active == 0) return;
  if (threadIdx.x == 0) {
    float approx = 0.0f;  // within ~V 2^-24 relative of the exact start: enough for a guess
    for (int c = 0; c < chunk; ++c) approx += w.chunkSum[static_cast<size_t>(row) * chunks + c];
    cdf::guessBinades(approx, &binades[0], &binades[1]);
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
    const cdf::Step s = chunkStepBlock(v, e, scratch);
    if (threadIdx.x == 0) out[j] = cdf::ChunkSummary{e, 0, s};
  }
}

// BC: exact chunk starts (summary or replay), then the token: cdf::chainAndSearch, whose
// block-uniformity rule (every value that steers the CTA comes from shared memory after a
// barrier) keeps sequentialCdf's collective loop in step across the threads.
struct CtaBlock {
  __device__ __forceinline__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
};

template <typename T>
__global__ void __launch_bounds__(kThreads) cdfChainSearchKernel(RowsArgs a) {
  __shared__ BlockScratch scratch;
  __shared__ float start[kCdfMaxChunks + 1];  // start[c]: exact sum before chunk c; [chunks]: total
  __shared__ cdf::ChunkSummary summ[kCdfMaxChunks * 2];  // staged: thread 0's walk is latency-bound
  __shared__ cdf::ChainShared chain;
  const int row = blockIdx.x, chunks = a.plan.cdfChunks;
  const CdfPtrs w = cdfPtrs(a);
  const CdfRowParams p = w.params[row];
  if (p.active == 0) return;
  const RowProb<T> prob{static_cast<const T*>(a.logits) + static_cast<size_t>(row) * a.vocab, p};
  for (int j = threadIdx.x; j < 2 * chunks; j += kThreads)
    summ[j] = w.summary[static_cast<size_t>(row) * chunks * 2 + j];
  __syncthreads();
  auto chunkLen = [&](int c) { return min(a.vocab, (c + 1) * kCdfChunk) - c * kCdfChunk; };
  auto replay = [&](int c, float r0) {
    float end = 0.0f;
    sequentialCdf([&](int i) { return prob(c * kCdfChunk + i); }, chunkLen(c), false, 0.0f, &end,
                  scratch, r0);
    return end;
  };
  auto search = [&](int c, float r0, float threshold) {  // >= 0: chunk c's end exceeds threshold
    return sequentialCdf([&](int i) { return prob(c * kCdfChunk + i); }, chunkLen(c), true,
                         threshold, nullptr, scratch, r0);
  };
  auto lastPositive = [&] {
    int last = -1;
    for (int j = 0; j < chunks; ++j)
      last = max(last, w.lastPos[static_cast<size_t>(row) * chunks + j]);
    return last;
  };
  const int token = cdf::chainAndSearch(CtaBlock{}, chunks, kCdfChunk, summ, p.u, start, chain,
                                        replay, search, lastPositive);
  if (threadIdx.x == 0) a.tokens[row] = token;
}

template <typename T>
void launchTyped(const RowsArgs& a, cudaStream_t stream) {
  const dim3 grid(a.plan.cdfChunks, a.rows);
  cdfChunkSumKernel<T><<<grid, kThreads, 0, stream>>>(a);
  ES_CUDA_CHECK_LAUNCH();
  cdfChunkSummaryKernel<T><<<grid, kThreads, 0, stream>>>(a);
  ES_CUDA_CHECK_LAUNCH();
  cdfChainSearchKernel<T><<<a.rows, kThreads, 0, stream>>>(a);
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launchCdfSplit(const RowsArgs& a, cudaStream_t stream) {
  ES_CHECK_ARG(a.plan.cdfSplit && a.tokens != nullptr && a.workspace != nullptr, "sample_rows",
               "cdf_split", a.plan.cdfSplit, "needs tokens and a workspace");
  if (a.dtype == DType::kF32) {
    launchTyped<float>(a, stream);
  } else {
    launchTyped<fp16>(a, stream);
  }
}

}  // namespace es::sampling
