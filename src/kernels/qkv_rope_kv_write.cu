// Fused QKV split / q-k RMSNorm / NeoX RoPE / paged KV write. One warp per (token, fused head):
// heads [0, Hq) are q, [Hq, Hq+Hkv) k, the rest v. The warp stages its head row in shared memory
// as fp32 (lane-strided, coalesced), normalises it (warp sum of squares), then each lane writes
// its rotated elements; the partner element of a rotary pair comes from shared memory. V is a
// plain copy. Rotation with explicit _rn products/sums (no FMA contraction), as the reference.
#include <cstdint>

#include "common/cuda_check.h"
#include "common/kv_page.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/pdl.cuh"
#include "kernels/qkv_rope_kv_write.h"

namespace es::kernel {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxDim = 256;
constexpr int32_t kPage = kv::kTokensPerPage;

struct Args {
  const void* qkv;
  const void* qNorm;
  const void* kNorm;
  float eps;
  const float* cosSin;
  int32_t maxPositions;
  const int32_t* positions;
  const int32_t* owners;
  const int32_t* table;
  void* pool;
  void* qOut;
  int32_t batch, hq, hkv, dim, rotary, numPages, maxPages;
};

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) qkvRopeKernel(Args a) {
  // Launched as a programmatic dependent (pdl.cuh) of the kernel that wrote qkv. Everything else
  // this warp needs (position, owner, page, norm weights, cos/sin: none of it written by that
  // kernel) is read before waiting for it, so only the qkv row's load is left after the wait. In
  // an ordinary launch (ES_PDL=0) the wait returns at once and the early reads are just as safe.
  constexpr int kPer = kMaxDim / 32;  // elements per lane at most
  __shared__ float buf[kWarps][kMaxDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t head = blockIdx.y * kWarps + warp;
  const int32_t heads = a.hq + 2 * a.hkv;
  if (head >= heads) return;  // warp-uniform; no block-wide barrier below
  const int64_t t = blockIdx.x;
  const int32_t dim = a.dim;
  const int32_t pos = a.positions[t];
  const int32_t b = a.owners[t];
  const bool live = pos >= 0 && pos < a.maxPositions && b >= 0 && b < a.batch;
  const bool isQ = head < a.hq, isK = !isQ && head < a.hq + a.hkv;
  T* qOut = static_cast<T*>(a.qOut);

  T* dst = nullptr;
  if (isQ) {
    dst = qOut + (t * a.hq + head) * dim;
  } else {
    if (!live) return;
    const int32_t lp = pos / kPage;
    if (lp >= a.maxPages) return;
    const int32_t slot = pos - lp * kPage;
    const int32_t* row = a.table + int64_t{b} * 2 * a.maxPages;
    const int32_t kvHead = isK ? head - a.hq : head - a.hq - a.hkv;
    int32_t page;
    if (isK) {
      page = row[lp];
      if (page < 0 || page >= a.numPages) return;
    } else {
      page = row[a.maxPages + lp];
      if (page < a.numPages || int64_t{page} >= 2 * int64_t{a.numPages}) return;
    }
    dst = static_cast<T*>(a.pool) + ((int64_t{page} * kPage + slot) * a.hkv + kvHead) * dim;
  }
  // This lane's elements i = lane + 32 j: norm weight, and the rotary pair's (cos, sin) at
  // index i mod half (identity past the rotary dims).
  const bool rotate = live && (isQ || isK);
  const T* weight = static_cast<const T*>(isQ ? a.qNorm : a.kNorm);
  const int32_t half = a.rotary / 2;
  float wv[kPer], cv[kPer], sv[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int32_t i = lane + 32 * j;
    wv[j] = cv[j] = sv[j] = 0.0f;
    if (rotate && i < dim) {
      if (weight != nullptr) wv[j] = fwd::toF(weight[i]);
      if (i < a.rotary) {
        const float* cs = a.cosSin + int64_t{pos} * a.rotary;
        const int32_t r = i < half ? i : i - half;
        cv[j] = cs[r];
        sv[j] = cs[half + r];
      }
    }
  }
  pdl::enter();

  if (isQ && !live) {
    for (int32_t i = lane; i < dim; i += 32) dst[i] = fwd::fromF<T>(0.0f);
    return;
  }
  const T* src = static_cast<const T*>(a.qkv) + t * int64_t{heads} * dim + int64_t{head} * dim;
  if (!isQ && !isK) {  // V: bit copy
    for (int32_t i = lane; i < dim; i += 32) dst[i] = src[i];
    return;
  }
  float* x = buf[warp];
  float sumSq = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int32_t i = lane + 32 * j;
    if (i < dim) {
      const float v = fwd::toF(src[i]);
      x[i] = v;
      sumSq += v * v;
    }
  }
  if (weight != nullptr) {
    sumSq = fwd::warpSum(sumSq);
    const float scale = 1.0f / sqrtf(sumSq / static_cast<float>(dim) + a.eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int32_t i = lane + 32 * j;
      if (i < dim) x[i] = __fmul_rn(__fmul_rn(x[i], scale), wv[j]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int32_t i = lane + 32 * j;
    if (i >= dim) continue;
    float o;
    if (i < half) {
      o = __fsub_rn(__fmul_rn(x[i], cv[j]), __fmul_rn(x[i + half], sv[j]));
    } else if (i < a.rotary) {
      o = __fadd_rn(__fmul_rn(x[i], cv[j]), __fmul_rn(x[i - half], sv[j]));
    } else {
      o = x[i];
    }
    dst[i] = fwd::fromF<T>(o);
  }
}

}  // namespace

void launchQkvRopeKvWrite(const QkvRopeKvWriteParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  const Args a{.qkv = p.qkv,
               .qNorm = p.qNormWeight,
               .kNorm = p.kNormWeight,
               .eps = p.normEps,
               .cosSin = p.cosSin,
               .maxPositions = p.maxPositions,
               .positions = p.positions,
               .owners = p.tokenToSequence,
               .table = p.pageTable,
               .pool = p.kvPool,
               .qOut = p.qOut,
               .batch = p.batchSize,
               .hq = p.numQHeads,
               .hkv = p.numKVHeads,
               .dim = p.headDim,
               .rotary = p.rotaryDim,
               .numPages = p.numPages,
               .maxPages = p.maxPagesPerSeq};
  const int32_t heads = p.numQHeads + 2 * p.numKVHeads;
  const dim3 grid(static_cast<unsigned>(p.numTokens),
                  static_cast<unsigned>((heads + kWarps - 1) / kWarps));
  fwd::dispatchDtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(qkvRopeKernel<T>, grid, dim3(kWarps * 32), 0, stream, a);
  });
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
