// Probabilistic chain verification (spec §3.7).
//
// Stage 1 computes the filtered target probabilities of all batch * (L + 1) rows with the
// sampling kernels (one batched launch, so the whole GPU reads the logits once). A row whose kept
// set has <= 512 entries (status kSparse) is verified there, by the CTA that holds its kept list:
// its draft's accept test and the token the chain emits if it stops at that row (the residual
// sample after a rejection, the bonus sample for row L) go to its VerifyRow
// (spec_verify_device.cuh). Other rows (dense probabilities in the workspace, or the uniform
// fallback) are left to stage 2. Stage 2, one CTA per sequence: every draft's accept test depends
// only on its own row and uniform, so the warps test all L drafts in parallel (warp w: s = w,
// w + kWarps, ...) and one block-wide min finds the first rejection; the token at that position
// is the row's stop token, or for a dense or uniform row the residual or bonus sample drawn
// block-wide with the reference's inverse-CDF arithmetic.
//
// Stage 2 does little arithmetic: its time is the chain of dependent global-memory round trips
// after pdl::wait(). So every input that does not come from stage 1 is loaded before the wait,
// and a warp loads its row's words (status, accept result, stop token, a dense row's p(x)) in
// one round trip. The residual draw of a list row runs in stage 1, for every row at once, where
// a CTA's tail overlaps the others' streaming, rather than here after the walk on one warp of
// each sequence, where it would add to that chain.
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "common/rng.h"
#include "kernels/sampling_device.h"
#include "kernels/sampling_rows.h"
#include "kernels/spec_verify.h"
#include "kernels/spec_verify_device.cuh"
#include "kernels/spec_verify_layout.h"

namespace es::specVerify {
namespace {

using namespace es::sampling;
using namespace es::sampling::dev;
using namespace es::specVerify::dev;

struct VerifyArgs {
  ChainInputs chain;      // one CTA per sequence: gridDim.x is the batch
  const VerifyRow* rows;  // [batch * (L + 1)]
  const float* dense;     // [batch * (L + 1), V] or null
  int32_t* out;           // [batch, L + 1]
  int32_t* numAccepted;   // [batch]
  bool flagNonFinite;     // a uniform (non-finite) row rejects its draft, token kNonFiniteToken
};

// What the verification of draft s needs besides its target row: none of it comes from the
// sampling kernels, so it can be loaded before pdl::wait().
struct Draft {
  int x;     // the drafted token
  float qx;  // Q_s(x), 1 for onehot drafts
  float uAccept, uResidual;
};

__device__ Draft loadDraft(const ChainInputs& c, int b, int s) {
  Draft d;
  d.x = draftRow(c, b)[s];
  const float* q = draftProbRow(c, b, s);
  d.qx = q ? q[d.x] : 1.0f;
  d.uAccept = chainUniform(c, b, RngPurpose::kAccept, s);
  d.uResidual = chainUniform(c, b, RngPurpose::kResidual, s);
  return d;
}

// A target row as stage 2 reads it (the same in every lane of the warp that loaded it).
struct RowWords {
  int status, accepted, token;  // accepted, token: VerifyRow's, for status kSparse
  float densePx;  // p(x) of a dense row (read speculatively; meaningless for other rows)
};

// Loads target row `row` in one round trip: p(x) of the dense buffer is read whatever the
// status, since waiting for the status first would cost a second trip. x < 0: no draft (the
// bonus row).
__device__ RowWords loadRow(const VerifyArgs& a, int row, int x) {
  const VerifyRow& r = a.rows[row];
  RowWords t;
  t.status = r.status;
  t.accepted = r.accepted;
  t.token = r.token;
  const bool denseOk = a.dense && static_cast<unsigned>(x) < static_cast<unsigned>(a.chain.V);
  t.densePx = denseOk ? a.dense[static_cast<size_t>(row) * a.chain.V + x] : 0.0f;
  return t;
}

// Accept test of draft d on its target row r (the same in every lane).
__device__ bool acceptDraft(const VerifyArgs& a, const RowWords& r, const Draft& d) {
  if (r.status == kSparse) return r.accepted != 0;
  if (r.status == kUniform && a.flagNonFinite) return false;
  const float px = r.status == kUniform ? fdivRn(1.0f, static_cast<float>(a.chain.V)) : r.densePx;
  return acceptTest(px, d.qx, d.uAccept);
}

struct VerifyShared {
  int status, x, token;  // from the warp holding the row at the stop position to the block
  float u;
};

// Sample of a dense or uniform target row `row` with uniform u (block-wide; result valid in
// every thread).
__device__ int targetFullRow(const VerifyArgs& a, int row, int status, float u,
                             BlockScratch& scratch) {
  if (status == kUniform) return uniformRowToken(u, a.chain.V);
  const float* p = a.dense + static_cast<size_t>(row) * a.chain.V;  // [V]
  return fullRowSample([&](int i) { return p[i]; }, a.chain.V, u, scratch);
}

// Residual sample at rejected draft s (token x, uniform u) of sequence b on a dense or uniform
// target row (block-wide; result valid in every thread): max(P - Q, 0), Q = onehot(x) when there
// are no draft probabilities; the target row when the residual mass is <= kResidualMassFloor.
__device__ int residualFullRow(const VerifyArgs& a, int b, int s, int status, int x, float u,
                               BlockScratch& scratch) {
  const int V = a.chain.V;
  const int row = b * (a.chain.L + 1) + s;
  const float* q = draftProbRow(a.chain, b, s);  // [V] or null
  const float* p = status == kDense ? a.dense + static_cast<size_t>(row) * V : nullptr;  // [V]
  const float pu = fdivRn(1.0f, static_cast<float>(V));
  auto resAt = [&](int i) { return reluSub(p ? p[i] : pu, q ? q[i] : (i == x ? 1.0f : 0.0f)); };
  const float mass = fullRowTotal(resAt, V, scratch);
  if (mass > kResidualMassFloor) return fullRowSearch(resAt, V, fmulRn(u, mass), scratch);
  return targetFullRow(a, row, status, u, scratch);
}

__global__ void __launch_bounds__(kThreads) verifyKernel(VerifyArgs a) {
  __shared__ VerifyShared vs;
  __shared__ BlockScratch scratch;
  const ChainInputs& c = a.chain;
  const int b = blockIdx.x, L = c.L, w = warpId();
  // Before the wait: the drafts, draft probabilities, uniforms, seeds and anchors were written
  // by kernels that completed before the first sampling kernel passed its wait (an ordinary
  // launch, or chunkFastKernel, which waits before it lets this grid be scheduled). Only the
  // sampling kernels' rows (VerifyRow, dense) need the wait.
  // For most chains (L <= kWarps) a warp tests one draft, its first: load that one's inputs.
  const Draft first = w < L ? loadDraft(c, b, w) : Draft{};
  const float uBonus = chainUniform(c, b, RngPurpose::kBonus, 0);
  // Accepted drafts are written back: thread j holds draft j.
  const int myDraft = static_cast<int>(threadIdx.x) < L ? draftRow(c, b)[threadIdx.x] : -1;
  kernel::pdl::wait();  // launched as a dependent of the sampling kernels: their rows are visible
                        // after this
  kernel::pdl::trigger();  // the next kernel (e.g. the next call's chunk stage) may become resident

  // The chain stops at its first rejection. A warp's own drafts are tested in increasing s, so
  // its first rejection is its smallest; the block-wide min over the warps is the chain's.
  // The warp keeps the rejected draft and its row: it holds the token if that is the chain's.
  int firstRejected = L;
  Draft d{};
  RowWords row{};
  for (int s = w; s < L; s += kWarps) {
    d = s == w ? first : loadDraft(c, b, s);
    row = loadRow(a, b * (L + 1) + s, d.x);
    if (!acceptDraft(a, row, d)) {
      firstRejected = s;
      break;
    }
  }
  // The bonus row, read by the warp that would draw it (draft L's warp), unless that warp
  // rejected a draft (then the chain stops before L). For L < kWarps an idle warp: in parallel.
  if (firstRejected == L && w == L % kWarps) row = loadRow(a, b * (L + 1) + L, -1);
  const int accepted = blockMinInt(firstRejected, scratch);

  // The outputs that do not depend on the sampled token: accepted drafts, then -1.
  int32_t* out = a.out + static_cast<size_t>(b) * (L + 1);  // [L + 1]
  for (int j = threadIdx.x; j <= L; j += kThreads) {
    if (j == accepted) continue;
    // j != threadIdx.x: j >= kThreads, only for L > kThreads.
    out[j] = j > accepted ? -1 : j == static_cast<int>(threadIdx.x) ? myDraft : draftRow(c, b)[j];
  }
  if (threadIdx.x == 0) a.numAccepted[b] = accepted;

  // The token at position `accepted`: a list row's stop token, computed in stage 1; other rows
  // are drawn block-wide below.
  if (w == accepted % kWarps && laneId() == 0) {
    vs.status = row.status;
    vs.x = d.x;
    vs.u = accepted < L ? d.uResidual : uBonus;
    vs.token = row.token;
  }
  __syncthreads();
  int token = vs.token;
  if (vs.status == kUniform && a.flagNonFinite) {
    token = kNonFiniteToken;
  } else if (vs.status != kSparse) {
    token = accepted < L ? residualFullRow(a, b, accepted, vs.status, vs.x, vs.u, scratch)
                         : targetFullRow(a, b * (L + 1) + L, vs.status, vs.u, scratch);
  }
  if (threadIdx.x == 0) out[accepted] = token;
}

}  // namespace
}  // namespace es::specVerify

namespace es::kernel {

void specVerify(const SpecVerifyParams& p, cudaStream_t stream) {
  const char* where = "kernel::spec_verify";
  validateSpecVerifyParams(p, where);
  if (p.batch == 0) return;
  const specVerify::VerifyPlan plan = specVerify::plan(p);
  ES_CHECK_ARG(p.workspaceBytes >= plan.workspaceBytes, where, "workspace_bytes", p.workspaceBytes,
               "must be >= ", plan.workspaceBytes, " (spec_verify_workspace_bytes)");
  ES_CHECK_ARG(p.workspace != nullptr, where, "workspace", "null", "must be non-null");
  uint8_t* ws = static_cast<uint8_t*>(p.workspace);
  sampling::RowsArgs a;
  a.logits = p.targetLogits;
  a.dtype = p.logitsDtype;
  a.rows = static_cast<int32_t>(plan.rows);
  a.vocab = p.vocab;
  a.rowsPerParam = p.numDraft + 1;
  a.temperature = p.temperature;
  a.topK = p.topK;
  a.topP = p.topP;
  a.temperatures = p.temperatures;
  a.topKs = p.topKs;
  a.topPs = p.topPs;
  a.mode = p.topPMode;
  a.probs = plan.denseBytes ? reinterpret_cast<float*>(ws + plan.denseOffset) : nullptr;
  a.denseForSparseRows = false;
  specVerify::ChainInputs& c = a.chain;
  c.L = p.numDraft;
  c.V = p.vocab;
  c.drafts = p.draftTokens;
  c.draftStride = p.draftTokensStride > 0 ? p.draftTokensStride : p.numDraft;
  c.draftProbs = p.draftProbs;
  c.probsStride = p.draftProbsStride > 0 ? p.draftProbsStride : p.numDraft;
  c.uniforms = p.uniforms;
  c.seeds = p.seeds;
  c.anchors = p.anchors;
  a.verifyRows = reinterpret_cast<specVerify::VerifyRow*>(ws + plan.rowsOffset);
  a.workspace = ws;
  a.smallVocab = p.path == SamplingPath::kSmallVocab ||
                 (p.path == SamplingPath::kAuto && p.vocab <= kSmallVocabMax);
  a.plan = plan.general;
  sampling::launchRows(a, stream);

  specVerify::VerifyArgs v;
  v.chain = c;
  v.rows = a.verifyRows;
  v.dense = a.probs;
  v.out = p.outTokens;
  v.numAccepted = p.numAccepted;
  v.flagNonFinite = p.flagNonFinite;
  kernel::pdl::launch(specVerify::verifyKernel, dim3(p.batch), dim3(sampling::kThreads), 0, stream,
                      v);
}

}  // namespace es::kernel
