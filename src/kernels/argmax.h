#pragma once
// Row argmax: logits rows -> int32 ids, ties to the lower index (spec §3.2). Consumed by the
// DFlash greedy accept kernel. NaN counts as larger than every number (torch.argmax), so a row
// with NaN returns its first NaN; with flagNonFinite a row whose maximum is not finite (NaN or
// +inf somewhere, or every entry -inf) returns kNonFiniteToken instead. Plain C++ header.
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"
#include "kernels/sampling_non_finite.h"

namespace es {

struct ArgmaxParams {
  const void* logits = nullptr;  // [rows, vocab] dtype, row r starts at r * rowStride elements
  DType dtype = DType::kF32;     // kF32, kF16 or kBF16
  int32_t rows = 0;
  int32_t vocab = 0;
  int64_t rowStride = 0;   // elements between rows; 0 means vocab
  int32_t* out = nullptr;  // [rows] i32
  // true: a row whose maximum is NaN, +inf or -inf gets kNonFiniteToken (the target's rows,
  // which the runtime turns into an error); false: its first NaN / +inf index, or 0.
  bool flagNonFinite = false;
};

void validateArgmaxParams(const ArgmaxParams& p, const char* where);

namespace kernel {
// Batch 1..few: a thread-block cluster of up to 16 CTAs splits each row (distributed shared
// memory merges the partial maxima); larger batches: one CTA per row. No workspace.
void argmaxRows(const ArgmaxParams& p, cudaStream_t stream);
}  // namespace kernel

namespace ref {
void argmaxRows(const ArgmaxParams& p);  // host pointers
}  // namespace ref

}  // namespace es
