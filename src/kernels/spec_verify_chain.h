#pragma once
// What a verification's target rows need besides their logits (spec §3.7): the drafted chain
// and its uniforms. specVerify() hands it to the sampling kernels (RowsArgs::chain), which test
// each draft on its row while they hold the row's kept list, and to its walk kernel. Plain C++.
#include <cstdint>

namespace es::specVerify {

struct ChainInputs {
  int32_t L = 0;                    // drafts per sequence; rows are [batch, L + 1]
  int32_t V = 0;                    // vocabulary
  const int32_t* drafts = nullptr;  // [batch, draftStride]: draft s of sequence b at b * stride + s
  int32_t draftStride = 0;
  const float* draftProbs = nullptr;  // [batch, probsStride, V] or null (onehot drafts)
  int32_t probsStride = 0;            // rows between sequences of draftProbs
  const float* uniforms = nullptr;    // [batch, 2L + 1] (accept s, residual s, bonus) or null
  const uint64_t* seeds = nullptr;    // [batch], with anchors when uniforms is null
  const int64_t* anchors = nullptr;   // [batch]
};

// One target row's verification outcome, written by the sampling kernels for every row (status)
// and, for a row whose kept set is a short list (status kSparse), the result of its own draft's
// test and the token the chain emits if it stops at this row.
struct VerifyRow {
  int32_t status;    // sampling::kSparse, kDense (probabilities in the dense buffer), kUniform
  int32_t count;     // kept entries (kSparse), informative only
  int32_t accepted;  // kSparse and s < L: draft s passed its accept test (1) or not (0)
  int32_t token;     // kSparse: s < L and rejected: the residual sample; s = L: the bonus sample
};

}  // namespace es::specVerify
