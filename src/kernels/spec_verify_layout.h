#pragma once
// Workspace plan of the verification launcher, shared by the host size function and the
// CUDA launcher. Plain C++.
#include <cstddef>
#include <cstdint>

#include "kernels/sampling_layout.h"
#include "kernels/spec_verify.h"
#include "kernels/spec_verify_chain.h"

namespace es::specVerify {

inline size_t align(size_t x) { return (x + 255) & ~size_t{255}; }

struct VerifyPlan {
  int64_t rows = 0;                        // batch * (numDraft + 1) target rows
  sampling::GeneralPlan general;           // chunking of the target rows (general path)
  size_t rowsOffset = 0, rowsBytes = 0;    // [rows] VerifyRow (spec_verify_chain.h)
  size_t denseOffset = 0, denseBytes = 0;  // [rows, vocab] f32, or none
  size_t workspaceBytes = 0;
};

// The target rows as one sampling batch (probabilities only).
SamplingParams targetSamplingParams(const SpecVerifyParams& p);
VerifyPlan plan(const SpecVerifyParams& p);

}  // namespace es::specVerify
