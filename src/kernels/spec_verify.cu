// Probabilistic chain verification (spec §3.7).
//
// Stage 1 computes the filtered target probabilities of all batch * (L + 1) rows with the
// sampling kernels (one batched launch, so the whole GPU reads the logits once): rows whose kept
// set has <= 512 entries become compact index-sorted (index, prob) lists, others dense rows in the
// workspace. Stage 2 verifies each sequence's chain on its rows (kernels/spec_verify_chain.cuh):
// verify_kernel, one CTA per sequence, or the sampling chunk stage itself when it finalizes every
// row (RowsArgs::chain: one kernel for the whole verification).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "kernels/pdl.cuh"
#include "kernels/sampling_rows.h"
#include "kernels/spec_verify.h"
#include "kernels/spec_verify_chain.cuh"
#include "kernels/spec_verify_layout.h"

namespace es::spec_verify {
namespace {

__global__ void __launch_bounds__(kThreads) verify_kernel(VerifyArgs a) {
  __shared__ VerifyShared vs;
  __shared__ BlockScratch scratch;
  // Launched as a dependent of the sampling kernels: their rows are visible after the wait.
  verify_chain(a, blockIdx.x, vs, scratch, [] { kernel::pdl::wait(); });
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

  spec_verify::VerifyArgs& v = a.chain;
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
  a.chain_on = true;
  a.chain_counters = reinterpret_cast<uint32_t*>(ws + plan.counters_offset);
  if (sampling::launch_rows(a, stream)) return;  // the chunk stage verified the chains
  kernel::pdl::launch(spec_verify::verify_kernel, dim3(p.batch), dim3(sampling::kThreads), 0, stream, v);
}

}  // namespace es::kernel
