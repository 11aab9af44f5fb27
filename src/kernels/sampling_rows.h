#pragma once
// Internal launcher of the sampling kernels, shared by sampleRows() and specVerify()
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

// Row status of a verification's target rows (specVerify::VerifyRow::status).
inline constexpr int32_t kSparse = 0, kDense = 1, kUniform = 2;

struct RowsArgs {
  const void* logits = nullptr;  // [rows, vocab] dtype
  DType dtype = DType::kF32;
  int32_t rows = 0;
  int32_t vocab = 0;
  int32_t rowsPerParam = 1;  // per-row parameter arrays are indexed by row / rowsPerParam
  float temperature = 1.0f;
  int32_t topK = 0;
  float topP = 1.0f;
  const float* temperatures = nullptr;
  const int32_t* topKs = nullptr;
  const float* topPs = nullptr;
  TopPMode mode = TopPMode::kNucleus;
  const float* uniforms = nullptr;           // [rows] or null
  const uint64_t* seeds = nullptr;           // [rows / rowsPerParam]
  const int64_t* positions = nullptr;        // [rows / rowsPerParam]
  RngPurpose purpose = RngPurpose::kTarget;  // of the uniforms: lane = row % rowsPerParam
  int32_t* tokens = nullptr;                 // [rows] or null
  float* probs = nullptr;                    // [rows, vocab] or null
  bool denseForSparseRows = true;            // false: rows with <= 512 kept entries skip `probs`
  bool flagNonFinite = false;  // uniform-fallback rows get kNonFiniteToken (SamplingParams)
  // A verification's rows (specVerify): every row's status, and for a row whose kept set is a
  // short list (<= 512 entries: kSparse) its draft's accept test and stop token, computed here from
  // the list (specVerify::dev::verifyListRowWarp) with `chain`. Null for sampleRows().
  specVerify::VerifyRow* verifyRows = nullptr;  // [rows] or null
  specVerify::ChainInputs chain{};
  void* workspace = nullptr;  // general-path chunk candidates (plan.workspaceBytes)
  bool smallVocab = false;
  GeneralPlan plan;  // general path only
  // Set by launchRows: every row has the scalar parameters (no per-row arrays), so the kernels
  // take scalarParams instead of recomputing them per row (a division and an IEEE reciprocal).
  bool scalarOnly = false;
  RowParams scalarParams{};
  // Set by the launcher: the chunk stage's contiguous run of (row, chunk) items per CTA, from
  // which finalFastKernel derives where each record lies (sampling_layout.h).
  int32_t chunkItemsPerCta = 0;
  // Set by the launcher: every CTA of the chunk stage walks whole rows (chunkItemsPerCta a
  // multiple of plan.chunks) and its consumed chunk buffer holds a CandShared
  // (chunkCanFinalize), so each finalizes its rows itself (the top-p cut and the outputs) and
  // finalFastKernel is not launched. Otherwise the chunk stage writes records that
  // finalFastKernel merges.
  bool chunkFinalizesRows = false;
};

void launchRows(const RowsArgs& a, cudaStream_t stream);

}  // namespace es::sampling
