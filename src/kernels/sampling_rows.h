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
#include "kernels/spec_verify_chain.h"

namespace es::sampling {

// Row status of a verification's target rows (spec_verify::VerifyRow::status).
inline constexpr int32_t kSparse = 0, kDense = 1, kUniform = 2;

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
  // A verification's rows (spec_verify): every row's status, and for a row whose kept set is a
  // short list (<= 512 entries: kSparse) its draft's accept test and stop token, computed here from
  // the list (spec_verify::dev::verify_list_row_warp) with `chain`. Null for sample_rows().
  spec_verify::VerifyRow* verify_rows = nullptr;  // [rows] or null
  spec_verify::ChainInputs chain{};
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
  // multiple of plan.chunks) and its consumed chunk buffer holds a CandShared
  // (chunk_can_finalize), so each finalizes its rows itself (the top-p cut and the outputs) and
  // final_fast_kernel is not launched. Otherwise the chunk stage writes records that
  // final_fast_kernel merges.
  bool chunk_finalizes_rows = false;
};

void launch_rows(const RowsArgs& a, cudaStream_t stream);

}  // namespace es::sampling
