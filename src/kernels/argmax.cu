// Row argmax (ties to the lower index, NaN largest). Each CTA reduces a slice of a row with
// 16-byte loads to a composite rank (order key << 32 | ~index), so "max" means larger value
// then lower index. For small batches a row is split over a thread-block cluster of 16 CTAs
// (8 where the device cannot co-schedule 16) whose partial maxima meet in rank 0's shared memory
// (distributed shared memory): no workspace, no second launch. The non-finite test
// (flagNonFinite) reads the key of the merged maximum: no work per entry.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/dtype.h"
#include "common/errors.h"
#include "kernels/argmax.h"
#include "kernels/cluster_launch.cuh"
#include "kernels/sampling_math.h"

namespace es {
namespace {

namespace cg = cooperative_groups;
constexpr int kArgmaxThreads = 512;
constexpr int kClusterSplit = 16;  // most CTAs a row is split over (one cluster)

__device__ __forceinline__ float asFloat(float v) { return v; }
__device__ __forceinline__ float asFloat(fp16 v) { return to_float(v); }
__device__ __forceinline__ float asFloat(bf16 v) { return to_float(v); }

__device__ __forceinline__ uint64_t rankOf(float v, int i) {
  const uint32_t key = (v != v) ? 0xffffffffu : sampling::orderKey(v);
  return sampling::composite(key, static_cast<uint32_t>(i));
}
__device__ __forceinline__ uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }

// The row's token from its maximum rank: with flagNonFinite, a maximum of NaN (key all ones),
// +inf (the largest number's key) or -inf (every entry -inf) gives kNonFiniteToken.
__device__ __forceinline__ int32_t tokenOf(uint64_t best, bool flagNonFinite) {
  constexpr uint32_t kMinusInfKey = 0x007fffffu, kPlusInfKey = 0xff800000u;  // orderKey(-+inf)
  const uint32_t key = sampling::compositeKey(best);
  const bool finite = key > kMinusInfKey && key < kPlusInfKey;
  return flagNonFinite && !finite ? kNonFiniteToken
                                  : static_cast<int32_t>(sampling::compositeIndex(best));
}

template <typename T>
__global__ void __launch_bounds__(kArgmaxThreads)
    argmaxKernel(const T* logits, int vocab, int64_t stride, int32_t* out, int split,
                 bool flagNonFinite) {
  constexpr int kVec = 16 / sizeof(T);
  __shared__ uint64_t warpBest[kArgmaxThreads / 32];
  __shared__ uint64_t partial[kClusterSplit];
  const int row = blockIdx.y, part = blockIdx.x;
  const int len = ((vocab + split - 1) / split + kVec - 1) / kVec * kVec;
  const int begin = min(vocab, part * len), end = min(vocab, begin + len);
  const T* r = logits + static_cast<int64_t>(row) * stride;
  uint64_t best = 0;
  // Scalar head up to 16-byte alignment, vector body, scalar tail.
  const uintptr_t addr = reinterpret_cast<uintptr_t>(r + begin);
  const int head = min(end - begin, static_cast<int>(((16 - addr % 16) % 16) / sizeof(T)));
  if (static_cast<int>(threadIdx.x) < head)
    best = umax(best, rankOf(asFloat(r[begin + threadIdx.x]), begin + threadIdx.x));
  const int vbegin = begin + head;
  const int nvec = (end - vbegin) / kVec;
  const uint4* vp = reinterpret_cast<const uint4*>(r + vbegin);
  // Batches of kBatch 16-byte loads per thread, all issued before any is used (one memory
  // round trip per batch; a B = 1 row split over 16 CTAs needs one batch).
  constexpr int kBatch = 8;
  for (int j0 = threadIdx.x; j0 < nvec; j0 += kBatch * kArgmaxThreads) {
    uint4 w[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b * kArgmaxThreads;
      w[b] = j < nvec ? __ldg(vp + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b * kArgmaxThreads;
      if (j < nvec) {
        const T* e = reinterpret_cast<const T*>(&w[b]);
#pragma unroll
        for (int t = 0; t < kVec; ++t)
          best = umax(best, rankOf(asFloat(e[t]), vbegin + j * kVec + t));
      }
    }
  }
  for (int i = vbegin + nvec * kVec + threadIdx.x; i < end; i += kArgmaxThreads) {
    best = umax(best, rankOf(asFloat(r[i]), i));
  }
  for (int o = 16; o; o >>= 1) best = umax(best, __shfl_xor_sync(0xffffffffu, best, o));
  if ((threadIdx.x & 31) == 0) warpBest[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) best = umax(best, warpBest[w]);
  }
  if (split == 1) {
    if (threadIdx.x == 0) out[row] = tokenOf(best, flagNonFinite);
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) *cluster.map_shared_rank(&partial[part], 0) = best;
  cluster.sync();  // every partial written before rank 0 reads them
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    uint64_t b = partial[0];
    for (int p = 1; p < split; ++p) b = umax(b, partial[p]);
    out[row] = tokenOf(b, flagNonFinite);
  }
}

template <typename T>
int clusterSplit() {
  static thread_local const int size =
      kernel::cluster::widestSize(argmaxKernel<T>, kClusterSplit, kArgmaxThreads);
  return size;
}

template <typename T>
void launch(const ArgmaxParams& p, cudaStream_t stream) {
  const int64_t stride = p.rowStride ? p.rowStride : p.vocab;
  // Few long rows: split each over a cluster (16 CTAs, non-portable size, where the device can
  // co-schedule it; else 8), merged through distributed shared memory.
  int split = 1;
  if (p.rows <= 32 && p.vocab >= 8 * 4096) {
    split = clusterSplit<T>();
  }
  ES_CHECK_ARG(p.rows <= 65535, "kernel::argmax_rows", "rows", p.rows, "must be <= 65535");
  kernel::cluster::launch(argmaxKernel<T>, dim3(split, p.rows, 1), dim3(kArgmaxThreads), split,
                          stream, static_cast<const T*>(p.logits), p.vocab, stride, p.out, split,
                          p.flagNonFinite);
}

}  // namespace

namespace kernel {

void argmaxRows(const ArgmaxParams& p, cudaStream_t stream) {
  validateArgmaxParams(p, "kernel::argmax_rows");
  if (p.rows == 0) return;
  switch (p.dtype) {
    case DType::kF16:
      launch<fp16>(p, stream);
      break;
    case DType::kBF16:
      launch<bf16>(p, stream);
      break;
    default:
      launch<float>(p, stream);
      break;
  }
}

}  // namespace kernel
}  // namespace es
