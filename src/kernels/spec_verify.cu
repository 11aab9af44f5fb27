// Probabilistic chain verification (spec §3.7).
//
// Stage 1 computes the filtered target probabilities of all batch * (L + 1) rows with the
// sampling kernels (one batched launch, so the whole GPU reads the logits once): rows whose kept
// set has <= 512 entries become compact index-sorted (index, prob) lists, others dense rows in the
// workspace. Stage 2, one CTA per sequence: every draft's accept test depends only on its own row
// and uniform, so the warps test all L drafts in parallel (warp w: s = w, w + kWarps, ...) and
// one block-wide min finds the first rejection; then the residual sample at that position, or
// the bonus sample from row L, with the same inverse-CDF arithmetic as the reference.
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "common/rng.h"
#include "kernels/sampling_device.h"
#include "kernels/sampling_rows.h"
#include "kernels/spec_verify.h"
#include "kernels/spec_verify_layout.h"

namespace es::spec_verify {
namespace {

using namespace es::sampling;
using namespace es::sampling::dev;

struct VerifyArgs {
  const int32_t* drafts;      // [batch, draft_stride]
  int draft_stride;
  const float* draft_probs;   // [batch, probs_stride, V] or null (onehot)
  int32_t probs_stride;       // rows between sequences of draft_probs
  int32_t batch, L, V;
  const float* uniforms;      // [batch, 2L + 1] or null
  const uint64_t* seeds;      // [batch]
  const int64_t* anchors;     // [batch]
  const SparseRow* sparse;    // [batch * (L + 1)]
  const float* dense;         // [batch * (L + 1), V] or null
  int32_t* out;               // [batch, L + 1]
  int32_t* num_accepted;      // [batch]
};

__device__ float verify_uniform(const VerifyArgs& a, int b, RngPurpose purpose, int lane) {
  if (a.uniforms) {
    const int slot = purpose == RngPurpose::kAccept ? lane
                     : purpose == RngPurpose::kResidual ? a.L + lane
                                                        : 2 * a.L;
    return a.uniforms[static_cast<size_t>(b) * (2 * a.L + 1) + slot];
  }
  return request_uniform(a.seeds[b], a.anchors[b], purpose, static_cast<uint32_t>(lane));
}

__device__ __forceinline__ float relu_sub(float p, float q) {
  const float r = fsub_rn(p, q);
  return r < 0.0f ? 0.0f : r;  // std::max(r, 0.0f) of the reference
}

struct VerifyShared {
  int32_t idx[kMaxCandidateTopK];
  float val[kMaxCandidateTopK];
  int token;
};

// Warp 0: sequential fp32 mass of a short list (the reference's order: index order).
__device__ float list_mass_warp(const float* val, int m) {
  float total = 0.0f;
  for (int base = 0; base < m; base += 32) {
    const float v = base + lane_id() < m ? val[base + lane_id()] : 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const float x = __shfl_sync(kFull, v, j);
      if (x > 0.0f) total = fadd_rn(total, x);
    }
  }
  return total;
}

// p(x) of a sparse row (one warp; the same in every lane): the prob of the entry whose index is
// x, 0 when x is not in the list. Each lane compares every 32nd entry; the loads do not depend on
// each other, so the lookup costs about one memory round trip instead of a dependent search.
__device__ float sparse_prob_warp(const SparseRow& r, int x) {
  const int m = r.count;
  int hit = -1;
#pragma unroll
  for (int j = 0; j < kMaxCandidateTopK / 32; ++j) {
    const int i = j * 32 + lane_id();
    if (i < m && r.index[i] == x) hit = i;
  }
  const unsigned lanes = __ballot_sync(kFull, hit >= 0);  // indices are unique: one lane at most
  const float p = hit >= 0 ? r.prob[hit] : 0.0f;
  return lanes ? __shfl_sync(kFull, p, __ffs(lanes) - 1) : 0.0f;
}

// Accept test of draft s of sequence b (one warp; the same in every lane). Reads target row s of
// the sequence only.
__device__ bool accept_draft(const VerifyArgs& a, int b, int s) {
  const int row = b * (a.L + 1) + s;
  const SparseRow& r = a.sparse[row];
  const int status = r.status;
  const int x = a.drafts[static_cast<size_t>(b) * a.draft_stride + s];
  float px;
  if (status == kSparse) {
    px = sparse_prob_warp(r, x);
  } else {
    px = status == kUniform ? fdiv_rn(1.0f, static_cast<float>(a.V))
                            : a.dense[static_cast<size_t>(row) * a.V + x];
  }
  const float qx =
      a.draft_probs ? a.draft_probs[(static_cast<size_t>(b) * a.probs_stride + s) * a.V + x] : 1.0f;
  float alpha = 1.0f;
  if (!(qx <= kDraftProbFloor)) {
    const float ratio = fdiv_rn(px, qx);
    alpha = ratio < 1.0f ? ratio : 1.0f;
  }
  return px > 0.0f && verify_uniform(a, b, RngPurpose::kAccept, s) <= alpha;
}

// Sample of target row `row` with uniform u (block-wide; result valid in every thread).
__device__ int sample_target(const VerifyArgs& a, int row, float u, VerifyShared& vs,
                             BlockScratch& scratch) {
  const SparseRow& r = a.sparse[row];
  if (r.status == kUniform) return uniform_row_token(u, a.V);
  if (r.status == kSparse) {
    if (warp_id() == 0) {
      const int t = sample_sorted_list_warp(r.index, r.prob, r.count, u);
      if (lane_id() == 0) vs.token = t;
    }
    __syncthreads();
    const int t = vs.token;
    __syncthreads();
    return t;
  }
  const float* p = a.dense + static_cast<size_t>(row) * a.V;
  return full_row_sample([&](int i) { return p[i]; }, a.V, u, scratch);
}

// Sample at rejected draft s of sequence b (block-wide; result valid in every thread): the
// residual max(P - Q, 0), Q = onehot(x) when there are no draft probabilities; the target row
// when the residual mass is <= kResidualMassFloor.
__device__ int residual_sample(const VerifyArgs& a, int b, int s, VerifyShared& vs,
                               BlockScratch& scratch) {
  const int V = a.V;
  const int row = b * (a.L + 1) + s;
  const SparseRow& r = a.sparse[row];
  const int status = r.status;
  const int x = a.drafts[static_cast<size_t>(b) * a.draft_stride + s];
  const float* qrow =
      a.draft_probs ? a.draft_probs + (static_cast<size_t>(b) * a.probs_stride + s) * V : nullptr;
  const float u = verify_uniform(a, b, RngPurpose::kResidual, s);
  auto q_at = [&](int i) { return qrow ? qrow[i] : (i == x ? 1.0f : 0.0f); };
  if (status == kSparse) {
    const int m = r.count;
    for (int i = threadIdx.x; i < m; i += kThreads) {
      vs.idx[i] = r.index[i];
      vs.val[i] = relu_sub(r.prob[i], q_at(r.index[i]));
    }
    __syncthreads();
    if (warp_id() == 0) {
      const float mass = list_mass_warp(vs.val, m);
      const int t = mass > kResidualMassFloor ? sample_sorted_list_warp(vs.idx, vs.val, m, u)
                                              : sample_sorted_list_warp(r.index, r.prob, m, u);
      if (lane_id() == 0) vs.token = t;
    }
    __syncthreads();
    return vs.token;
  }
  const float* prow = status == kDense ? a.dense + static_cast<size_t>(row) * V : nullptr;
  const float pu = fdiv_rn(1.0f, static_cast<float>(V));
  auto res_at = [&](int i) { return relu_sub(prow ? prow[i] : pu, q_at(i)); };
  const float mass = full_row_total(res_at, V, scratch);
  if (mass > kResidualMassFloor) return full_row_search(res_at, V, fmul_rn(u, mass), scratch);
  return sample_target(a, row, u, vs, scratch);
}

__global__ void __launch_bounds__(kThreads) verify_kernel(VerifyArgs a) {
  __shared__ VerifyShared vs;
  __shared__ BlockScratch scratch;
  const int b = blockIdx.x, L = a.L;
  kernel::pdl::wait();  // launched as a dependent of the sampling kernels: their rows are visible after this
  // The chain stops at its first rejection. A warp's own drafts are tested in increasing s, so
  // its first rejection is its smallest; the block-wide min over the warps is the chain's.
  int first_rejected = L;
  for (int s = warp_id(); s < L; s += kWarps) {
    if (!accept_draft(a, b, s)) {
      first_rejected = s;
      break;
    }
  }
  const int accepted = block_min_int(first_rejected, scratch);
  const int token =
      accepted < L ? residual_sample(a, b, accepted, vs, scratch)
                   : sample_target(a, b * (L + 1) + L, verify_uniform(a, b, RngPurpose::kBonus, 0),
                                   vs, scratch);
  // Accepted drafts, the sampled token (the same in every thread), then -1.
  int32_t* out = a.out + static_cast<size_t>(b) * (L + 1);
  for (int j = threadIdx.x; j <= L; j += kThreads) {
    out[j] = j < accepted    ? a.drafts[static_cast<size_t>(b) * a.draft_stride + j]
             : j == accepted ? token
                             : -1;
  }
  if (threadIdx.x == 0) a.num_accepted[b] = accepted;
}

}  // namespace
}  // namespace es::spec_verify

namespace es::kernel {

void spec_verify(const SpecVerifyParams& p, cudaStream_t stream) {
  const char* where = "kernel::spec_verify";
  validate_spec_verify_params(p, where);
  if (p.batch == 0) return;
  const spec_verify::VerifyPlan plan = spec_verify::plan(p);
  ES_CHECK_ARG(p.workspace_bytes >= plan.workspace_bytes, where, "workspace_bytes",
               p.workspace_bytes, "must be >= ", plan.workspace_bytes,
               " (spec_verify_workspace_bytes)");
  ES_CHECK_ARG(p.workspace != nullptr, where, "workspace", "null", "must be non-null");
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  sampling::RowsArgs a;
  a.logits = p.target_logits;
  a.dtype = p.logits_dtype;
  a.rows = static_cast<int32_t>(plan.rows);
  a.vocab = p.vocab;
  a.rows_per_param = p.num_draft + 1;
  a.temperature = p.temperature;
  a.top_k = p.top_k;
  a.top_p = p.top_p;
  a.temperatures = p.temperatures;
  a.top_ks = p.top_ks;
  a.top_ps = p.top_ps;
  a.mode = p.top_p_mode;
  a.probs = plan.dense_bytes ? reinterpret_cast<float*>(ws + plan.dense_offset) : nullptr;
  a.dense_for_sparse_rows = false;
  a.sparse = reinterpret_cast<sampling::SparseRow*>(ws + plan.sparse_offset);
  a.workspace = ws;
  a.small_vocab = p.path == SamplingPath::kSmallVocab ||
                  (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  a.plan = plan.general;
  sampling::launch_rows(a, stream);

  spec_verify::VerifyArgs v;
  v.drafts = p.draft_tokens;
  v.draft_stride = p.draft_tokens_stride > 0 ? p.draft_tokens_stride : p.num_draft;
  v.draft_probs = p.draft_probs;
  v.probs_stride = p.draft_probs_stride > 0 ? p.draft_probs_stride : p.num_draft;
  v.batch = p.batch;
  v.L = p.num_draft;
  v.V = p.vocab;
  v.uniforms = p.uniforms;
  v.seeds = p.seeds;
  v.anchors = p.anchors;
  v.sparse = a.sparse;
  v.dense = a.probs;
  v.out = p.out_tokens;
  v.num_accepted = p.num_accepted;
  kernel::pdl::launch(spec_verify::verify_kernel, dim3(p.batch), dim3(sampling::kThreads),
                                  0, stream, v);
}

}  // namespace es::kernel
