// Paged attention, the simple correct kernel: one CTA of kWarps warps per (query row, query
// head). Each warp walks the visible keys j = lo + warp, lo + warp + kWarps, ... (keys read
// through the page table; each lane owns D/32 consecutive dims, so a key row is one coalesced
// access), keeps an online softmax in fp32 (running max, sum, weighted V), and the warps are
// merged through shared memory at the end. Masks, windows, unmapped pages and padding rows as
// paged_attention.h; the mask decision depends on the key only, so it is warp-uniform.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/paged_attention.h"
#include "kv/page_geometry.h"

namespace es::kernel {
namespace {

constexpr int kWarps = 4;
constexpr int32_t kPage = kv::kTokensPerPage;

struct Args {
  const void* q;
  void* out;
  const int32_t* cu_q;
  const int32_t* q_pos;
  int32_t total_q;
  int32_t words;
  int32_t hq;
  const void* pool;
  const int32_t* table;
  int32_t num_pages, max_pages, hkv;
  const int32_t* kv_lens;
  int32_t mask;
  const int32_t* packed;
  int32_t window;
  int32_t batch;
  float scale;
};

template <typename T, int D, bool ALIGNED>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(Args a) {
  constexpr int kEpt = D / 32;  // dims per lane
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t r = blockIdx.x;
  const int32_t h = blockIdx.y;
  T* out = static_cast<T*>(a.out) + (int64_t{r} * a.hq + h) * D;

  // Owning sequence: the largest b < batch with cu_q[b] <= r (it then has r < cu_q[b + 1]
  // unless r lies past every sequence).
  int32_t lo_b = 0, hi_b = a.batch - 1, b = -1;
  while (lo_b <= hi_b) {
    const int32_t mid = (lo_b + hi_b) >> 1;
    if (a.cu_q[mid] <= r) {
      b = mid;
      lo_b = mid + 1;
    } else {
      hi_b = mid - 1;
    }
  }
  const int32_t pos = a.q_pos[r];
  if (b < 0 || r >= a.cu_q[b + 1] || pos < 0) {
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = fwd::from_f<T>(0.0f);
    return;
  }
  const int32_t q_len = a.cu_q[b + 1] - a.cu_q[b];
  const int32_t kv_len = a.kv_lens[b];
  const int32_t past = kv_len - q_len;
  const int32_t hk = h / (a.hq / a.hkv);

  float q[kEpt];
  fwd::load_span<T, kEpt, ALIGNED>(static_cast<const T*>(a.q) + (int64_t{r} * a.hq + h) * D +
                                       lane * kEpt,
                                   q);
  int64_t lo = 0, hi = kv_len;
  if (a.mask == static_cast<int32_t>(AttentionMask::kCausal)) hi = min(hi, int64_t{pos} + 1);
  if (a.window > 0) lo = max(lo, int64_t{pos} - a.window + 1);
  const bool tree = a.mask == static_cast<int32_t>(AttentionMask::kPackedTree);
  const int32_t* trow = a.table + int64_t{b} * 2 * a.max_pages;
  const int32_t* mrow = tree ? a.packed + int64_t{r} * a.words : nullptr;
  const T* pool = static_cast<const T*>(a.pool);

  float m = -INFINITY, l = 0.0f, acc[kEpt];
#pragma unroll
  for (int e = 0; e < kEpt; ++e) acc[e] = 0.0f;
  for (int64_t j64 = lo + warp; j64 < hi; j64 += kWarps) {
    const int32_t j = static_cast<int32_t>(j64);
    if (tree && j >= past) {
      const int32_t c = j - past;
      if (c >= a.words * 32) continue;
      if (((static_cast<uint32_t>(mrow[c >> 5]) >> (c & 31)) & 1u) == 0) continue;
    }
    const int32_t lp = j / kPage;
    if (lp >= a.max_pages) continue;
    const int32_t kp = trow[lp], vp = trow[a.max_pages + lp];
    if (kp < 0 || kp >= a.num_pages) continue;
    if (vp < a.num_pages || int64_t{vp} >= 2 * int64_t{a.num_pages}) continue;
    const int32_t slot = j - lp * kPage;
    float k[kEpt], v[kEpt];
    fwd::load_span<T, kEpt, ALIGNED>(pool + ((int64_t{kp} * kPage + slot) * a.hkv + hk) * D +
                                         lane * kEpt,
                                     k);
    fwd::load_span<T, kEpt, ALIGNED>(pool + ((int64_t{vp} * kPage + slot) * a.hkv + hk) * D +
                                         lane * kEpt,
                                     v);
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kEpt; ++e) dot += q[e] * k[e];
    const float s = fwd::warp_sum(dot) * a.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int e = 0; e < kEpt; ++e) acc[e] = acc[e] * corr + p * v[e];
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kEpt; ++e) s_acc[warp][lane * kEpt + e] = acc[e];
  __syncthreads();
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  if (m_all == -INFINITY) {  // no visible key
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) out[d] = fwd::from_f<T>(0.0f);
    return;
  }
  float weight[kWarps], denom = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = s_m[w] == -INFINITY ? 0.0f : expf(s_m[w] - m_all);
    denom += s_l[w] * weight[w];
  }
  for (int32_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += s_acc[w][d] * weight[w];
    out[d] = fwd::from_f<T>(o / denom);
  }
}

template <typename T, int D>
void launch(const Args& a, bool aligned, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.total_q), static_cast<unsigned>(a.hq));
  if (aligned) {
    attention_kernel<T, D, true><<<grid, kWarps * 32, 0, stream>>>(a);
  } else {
    attention_kernel<T, D, false><<<grid, kWarps * 32, 0, stream>>>(a);
  }
}

}  // namespace

void launchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (!validate(p)) return;
  ES_CHECK_ARG(p.query.numQHeads <= 65535, "launchPagedAttention", "query.numQHeads",
               p.query.numQHeads, "must be <= 65535 (grid y)");
  const Args a{p.query.q,        p.query.out,        p.query.cuQSeqLens, p.query.qPositions,
               p.query.totalQ,   (p.query.maxQSeqLen + 31) / 32,         p.query.numQHeads,
               p.kv.pool,        p.kv.pageTable,     p.kv.numPages,      p.kv.maxPagesPerSeq,
               p.kv.numKVHeads,  p.kvLengths,        static_cast<int32_t>(p.mask),
               p.packedMask,     p.slidingWindow,    p.batchSize,        p.scale};
  const bool aligned = fwd::aligned16(p.query.q) && fwd::aligned16(p.query.out) &&
                       fwd::aligned16(p.kv.pool);
  fwd::dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (p.headDim) {
      case 64: launch<T, 64>(a, aligned, stream); break;
      case 128: launch<T, 128>(a, aligned, stream); break;
      default: launch<T, 256>(a, aligned, stream); break;
    }
  });
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
