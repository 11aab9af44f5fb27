// Probabilistic chain verification (spec §3.7).
//
// Stage 1 computes the filtered target probabilities of all batch * (L + 1) rows with the
// sampling kernels (one batched launch, so the whole GPU reads the logits once): rows whose kept
// set has <= 512 entries become compact index-sorted (index, prob) lists, others dense rows in the
// workspace. Stage 2, one CTA per sequence: every draft's accept test depends only on its own row
// and uniform, so the warps test all L drafts in parallel (warp w: s = w, w + kWarps, ...) and
// one block-wide min finds the first rejection; then the residual sample at that position, or
// the bonus sample from row L, with the same inverse-CDF arithmetic as the reference.
//
// Stage 2 does little arithmetic: its time is the chain of dependent global-memory round trips
// after pdl::wait() (each ~1 us). So every input that does not come from stage 1 is loaded before
// the wait, a warp loads its whole target row (status, count, 512 (index, prob) pairs, the dense
// p(x)) in one round trip and keeps it in registers, and the warp that found the first rejection
// draws the residual of a list row from those registers. For a list row the chain after the
// wait is: the row (1), q at the listed indices when there are draft probabilities (2), the
// output token (stored).
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

__device__ __forceinline__ const int32_t* draft_row(const VerifyArgs& a, int b) {  // [L]
  return a.drafts + static_cast<size_t>(b) * a.draft_stride;
}

// Q_s of sequence b ([V]), or null for onehot drafts.
__device__ __forceinline__ const float* draft_prob_row(const VerifyArgs& a, int b, int s) {
  return a.draft_probs ? a.draft_probs + (static_cast<size_t>(b) * a.probs_stride + s) * a.V
                       : nullptr;
}

// What the verification of draft s needs besides its target row: none of it comes from the
// sampling kernels, so it can be loaded before pdl::wait().
struct Draft {
  int x;          // the drafted token
  float qx;       // Q_s(x), 1 for onehot drafts
  float u_accept, u_residual;
};

__device__ Draft load_draft(const VerifyArgs& a, int b, int s) {
  Draft d;
  d.x = draft_row(a, b)[s];
  const float* q = draft_prob_row(a, b, s);
  d.qx = q ? q[d.x] : 1.0f;
  d.u_accept = verify_uniform(a, b, RngPurpose::kAccept, s);
  d.u_residual = verify_uniform(a, b, RngPurpose::kResidual, s);
  return d;
}

// A target row in the registers of one warp: lane l holds entries i = j * 32 + l (j < kPerLane)
// of the list, the same layout as the sequential sums' tiles (sorted_list_mass_warp).
constexpr int kPerLane = kMaxCandidateTopK / 32;
struct RowRegs {
  int status, count;
  int32_t index[kPerLane];  // entries i >= count hold stale values: ignore them
  float prob[kPerLane];
  float dense_px;  // p(x) of a dense row (read speculatively; meaningless for other rows)
};

// Loads target row `row` in one round trip: every load is issued before any is used (a sparse
// row's arrays are always kMaxCandidateTopK long, so reading past `count` stays in bounds), and
// p(x) of the dense buffer is read whatever the status, since waiting for the status first would
// cost a second trip. x < 0: no draft (the bonus row).
__device__ RowRegs load_row(const VerifyArgs& a, int row, int x) {
  const SparseRow& r = a.sparse[row];
  RowRegs t;
  t.status = r.status;
  t.count = r.count;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    t.index[j] = r.index[j * 32 + lane_id()];
    t.prob[j] = r.prob[j * 32 + lane_id()];
  }
  const bool dense_ok = a.dense && static_cast<unsigned>(x) < static_cast<unsigned>(a.V);
  t.dense_px = dense_ok ? a.dense[static_cast<size_t>(row) * a.V + x] : 0.0f;
  return t;
}

// p(x) of a list row (the same in every lane): the prob of the entry whose index is x, 0 when x
// is not in the list.
__device__ float list_prob_warp(const RowRegs& r, int x) {
  float p = 0.0f;
  bool hit = false;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    if (j * 32 + lane_id() < r.count && r.index[j] == x) {
      p = r.prob[j];
      hit = true;
    }
  }
  const unsigned lanes = __ballot_sync(kFull, hit);  // indices are unique: one lane at most
  return lanes ? __shfl_sync(kFull, p, __ffs(lanes) - 1) : 0.0f;
}

// Accept test of draft d on its target row r (one warp; the same in every lane).
__device__ bool accept_draft(const VerifyArgs& a, const RowRegs& r, const Draft& d) {
  const float px = r.status == kSparse    ? list_prob_warp(r, d.x)
                   : r.status == kUniform ? fdiv_rn(1.0f, static_cast<float>(a.V))
                                          : r.dense_px;
  float alpha = 1.0f;
  if (!(d.qx <= kDraftProbFloor)) {
    const float ratio = fdiv_rn(px, d.qx);
    alpha = ratio < 1.0f ? ratio : 1.0f;
  }
  return px > 0.0f && d.u_accept <= alpha;
}

struct VerifyShared {
  int32_t idx[kMaxCandidateTopK];  // the drawing warp's list
  float val[kMaxCandidateTopK];
  int status, x, token;  // from the drawing warp to the block
  float u;
};

// Copies the warp's list (indices and val) to shared memory, where the sequential sums read it
// in list order. Returns after the warp's copies are visible to it.
__device__ void stage_list_warp(const RowRegs& r, const float (&val)[kPerLane], VerifyShared& vs) {
  __syncwarp();  // earlier reads of vs.val by this warp are done
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = j * 32 + lane_id();
    if (i < r.count) {
      vs.idx[i] = r.index[j];
      vs.val[i] = val[j];
    }
  }
  __syncwarp();
}

// Sample of a list row with uniform u (one warp, from its registers).
__device__ int target_list_warp(const RowRegs& r, float u, VerifyShared& vs) {
  stage_list_warp(r, r.prob, vs);
  return sample_sorted_list_warp(vs.idx, vs.val, r.count, u);
}

// Residual sample max(P - Q, 0) of a list row with uniform u (one warp, from its registers), or
// the target row when the residual mass is <= kResidualMassFloor. Outside the list P = 0, so the
// residual is 0 there and the list holds all of its mass. q: Q_s or null (onehot(x)).
__device__ int residual_list_warp(const RowRegs& r, const float* q, int x, float u,
                                  VerifyShared& vs) {
  float qi[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {  // all loads first: one round trip
    const bool listed = j * 32 + lane_id() < r.count;  // only listed indices are valid addresses
    qi[j] = q ? (listed ? q[r.index[j]] : 0.0f) : (r.index[j] == x ? 1.0f : 0.0f);
  }
  float res[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) res[j] = relu_sub(r.prob[j], qi[j]);
  stage_list_warp(r, res, vs);
  const float mass = sorted_list_mass_warp(vs.val, r.count);
  if (mass > kResidualMassFloor) {
    return sorted_list_search_warp(vs.idx, vs.val, r.count, fmul_rn(u, mass));
  }
  return target_list_warp(r, u, vs);
}

// Sample of a dense or uniform target row `row` with uniform u (block-wide; result valid in
// every thread).
__device__ int target_full_row(const VerifyArgs& a, int row, int status, float u,
                               BlockScratch& scratch) {
  if (status == kUniform) return uniform_row_token(u, a.V);
  const float* p = a.dense + static_cast<size_t>(row) * a.V;  // [V]
  return full_row_sample([&](int i) { return p[i]; }, a.V, u, scratch);
}

// Residual sample at rejected draft s (token x, uniform u) of sequence b on a dense or uniform
// target row (block-wide; result valid in every thread): max(P - Q, 0), Q = onehot(x) when there
// are no draft probabilities; the target row when the residual mass is <= kResidualMassFloor.
__device__ int residual_full_row(const VerifyArgs& a, int b, int s, int status, int x, float u,
                                 BlockScratch& scratch) {
  const int V = a.V;
  const int row = b * (a.L + 1) + s;
  const float* q = draft_prob_row(a, b, s);                                          // [V] or null
  const float* p = status == kDense ? a.dense + static_cast<size_t>(row) * V : nullptr;  // [V]
  const float pu = fdiv_rn(1.0f, static_cast<float>(V));
  auto res_at = [&](int i) {
    return relu_sub(p ? p[i] : pu, q ? q[i] : (i == x ? 1.0f : 0.0f));
  };
  const float mass = full_row_total(res_at, V, scratch);
  if (mass > kResidualMassFloor) return full_row_search(res_at, V, fmul_rn(u, mass), scratch);
  return target_full_row(a, row, status, u, scratch);
}

__global__ void __launch_bounds__(kThreads) verify_kernel(VerifyArgs a) {
  __shared__ VerifyShared vs;
  __shared__ BlockScratch scratch;
  const int b = blockIdx.x, L = a.L, w = warp_id();
  // Before the wait: the drafts, draft probabilities, uniforms, seeds and anchors were written
  // by kernels that completed before the first sampling kernel passed its wait (an ordinary
  // launch, or chunk_fast_kernel, which waits before it lets this grid be scheduled). Only the
  // sampling kernels' rows (sparse, dense) need the wait.
  // For most chains (L <= kWarps) a warp tests one draft, its first: load that one's inputs.
  const Draft first = w < L ? load_draft(a, b, w) : Draft{};
  const float u_bonus = verify_uniform(a, b, RngPurpose::kBonus, 0);
  // Accepted drafts are written back: thread j holds draft j.
  const int my_draft = static_cast<int>(threadIdx.x) < L ? draft_row(a, b)[threadIdx.x] : -1;
  kernel::pdl::wait();  // launched as a dependent of the sampling kernels: their rows are visible after this
  kernel::pdl::trigger();  // the next kernel (e.g. the next call's chunk stage) may become resident

  // The chain stops at its first rejection. A warp's own drafts are tested in increasing s, so
  // its first rejection is its smallest; the block-wide min over the warps is the chain's.
  // The warp keeps the rejected draft and its row: it draws the residual if that is the chain's.
  int first_rejected = L;
  Draft d{};
  RowRegs row{};
  for (int s = w; s < L; s += kWarps) {
    d = s == w ? first : load_draft(a, b, s);
    row = load_row(a, b * (L + 1) + s, d.x);
    if (!accept_draft(a, row, d)) {
      first_rejected = s;
      break;
    }
  }
  // The bonus row, read by the warp that would draw it (draft L's warp), unless that warp
  // rejected a draft (then the chain stops before L). For L < kWarps an idle warp: in parallel.
  if (first_rejected == L && w == L % kWarps) row = load_row(a, b * (L + 1) + L, -1);
  const int accepted = block_min_int(first_rejected, scratch);

  // The outputs that do not depend on the sampled token: accepted drafts, then -1.
  int32_t* out = a.out + static_cast<size_t>(b) * (L + 1);  // [L + 1]
  for (int j = threadIdx.x; j <= L; j += kThreads) {
    if (j == accepted) continue;
    // j != threadIdx.x: j >= kThreads, only for L > kThreads.
    out[j] = j > accepted                        ? -1
             : j == static_cast<int>(threadIdx.x) ? my_draft
                                                  : draft_row(a, b)[j];
  }
  if (threadIdx.x == 0) a.num_accepted[b] = accepted;

  // The draw at position `accepted`, by the warp holding its row: a list row from registers,
  // other rows block-wide below.
  if (w == accepted % kWarps) {
    const float u = accepted < L ? d.u_residual : u_bonus;
    int token = -1;
    if (row.status == kSparse) {
      token = accepted < L ? residual_list_warp(row, draft_prob_row(a, b, accepted), d.x, u, vs)
                           : target_list_warp(row, u, vs);
    }
    if (lane_id() == 0) {
      vs.status = row.status;
      vs.x = d.x;
      vs.u = u;
      vs.token = token;
    }
  }
  __syncthreads();
  int token = vs.token;
  if (vs.status != kSparse) {
    token = accepted < L ? residual_full_row(a, b, accepted, vs.status, vs.x, vs.u, scratch)
                         : target_full_row(a, b * (L + 1) + L, vs.status, vs.u, scratch);
  }
  if (threadIdx.x == 0) out[accepted] = token;
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
