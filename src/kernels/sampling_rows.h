#pragma once
// Internal launcher of the sampling kernels, shared by sample_rows() and spec_verify()
// (CUDA builds; plain C++ declarations). Rows are described once; the outputs say what to write.
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"
#include "kernels/sampling.h"
#include "kernels/sampling_layout.h"
#include "kernels/sampling_math.h"

namespace es::sampling {

// Compact per-row target probabilities for verification: a status, the kept count and, for
// status kSparse, the kept (index, prob) pairs sorted by index.
struct SparseRow {
  int32_t status;  // kSparse, kDense (probabilities in the dense buffer), kUniform (fallback)
  int32_t count;
  int32_t index[kMaxCandidateTopK];
  float prob[kMaxCandidateTopK];
};
inline constexpr int32_t kSparse = 0, kDense = 1, kUniform = 2;

// Drafted chains to verify (spec §3.7) on the rows' outputs, filled by kernel::spec_verify:
// sequence b's target rows are rows b (L + 1) .. b (L + 1) + L (RowsArgs::rows_per_param = L + 1).
// Run by spec_verify's verify_kernel, or by the chunk stage itself (RowsArgs::chain).
struct ChainArgs {
  const int32_t* drafts = nullptr;       // [batch, draft_stride]
  int32_t draft_stride = 0;
  const float* draft_probs = nullptr;    // [batch, probs_stride, V] or null (onehot)
  int32_t probs_stride = 0;              // rows between sequences of draft_probs
  int32_t batch = 0, L = 0, V = 0;
  const float* uniforms = nullptr;       // [batch, 2L + 1] or null
  const uint64_t* seeds = nullptr;       // [batch]
  const int64_t* anchors = nullptr;      // [batch]
  const SparseRow* sparse = nullptr;     // [batch * (L + 1)]
  const float* dense = nullptr;          // [batch * (L + 1), V] or null
  int32_t* out = nullptr;                // [batch, L + 1]
  int32_t* num_accepted = nullptr;       // [batch]
};

struct RowsArgs {
  const void* logits = nullptr;  // [rows, vocab] dtype
  DType dtype = DType::kF32;
  int32_t rows = 0;
  int32_t vocab = 0;
  int32_t rows_per_param = 1;  // per-row parameter arrays are indexed by row / rows_per_param
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  const float* temperatures = nullptr;
  const int32_t* top_ks = nullptr;
  const float* top_ps = nullptr;
  TopPMode mode = TopPMode::kNucleus;
  const float* uniforms = nullptr;  // [rows] or null
  const uint64_t* seeds = nullptr;  // [rows / rows_per_param]
  const int64_t* positions = nullptr;  // [rows / rows_per_param]
  RngPurpose purpose = RngPurpose::kTarget;  // of the uniforms: lane = row % rows_per_param
  int32_t* tokens = nullptr;        // [rows] or null
  float* probs = nullptr;           // [rows, vocab] or null
  bool dense_for_sparse_rows = true;  // false: rows with <= 512 kept entries skip `probs`
  SparseRow* sparse = nullptr;      // [rows] or null
  void* workspace = nullptr;        // general-path chunk candidates (plan.workspace_bytes)
  bool small_vocab = false;
  GeneralPlan plan;                 // general path only
  // Set by launch_rows: every row has the scalar parameters (no per-row arrays), so the kernels
  // take scalar_params instead of recomputing them per row (a division and an IEEE reciprocal).
  bool scalar_only = false;
  RowParams scalar_params{};
  // Set by the launcher: the chunk stage's contiguous run of (row, chunk) items per CTA, from
  // which final_fast_kernel derives where each record lies (sampling_layout.h).
  int32_t chunk_items_per_cta = 0;
  // Set by the launcher: every CTA of the chunk stage walks whole rows (chunk_items_per_cta a
  // multiple of plan.chunks), so each finalizes its rows itself (the top-p cut and the outputs)
  // and final_fast_kernel is not launched. ES_CHUNK_FINALIZE=0 keeps the two kernels.
  bool chunk_finalizes_rows = false;
  // Set by kernel::spec_verify: chains to verify once their rows are final, and a [chain.batch]
  // u32 workspace. When the chunk stage finalizes every row (chunk_finalizes_rows, no full-row
  // rows), the CTA that finalizes a sequence's last row (a counter per sequence, zeroed before the
  // launch) verifies that sequence's chain (kernels/spec_verify_chain.cuh): no verify_kernel.
  // ES_CHAIN_IN_CHUNK=0 keeps verify_kernel.
  bool chain_on = false;
  ChainArgs chain{};
  uint32_t* chain_counters = nullptr;
  bool chain_in_chunk = false;  // set by the launcher
};

// Launches the kernels of a.rows rows. Returns true when they also verified a.chain (the chunk
// stage did, see RowsArgs::chain); false: the caller runs the verification.
bool launch_rows(const RowsArgs& a, cudaStream_t stream);

}  // namespace es::sampling
