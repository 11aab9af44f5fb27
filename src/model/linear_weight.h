#pragma once
// A model's linear-layer weight W [n, k] on a backend: dense (one Buffer of `dtype`, or a table
// owned elsewhere such as a tied embedding) or quantized (data / scales / zeros Buffers in the
// backend layout of common/quant_format.h). Every linear of the target and the DFlash draft is
// one of these; fill() is the one place that turns it into LinearParams.
//
// loadLinear keeps a checkpoint's quantized matrix quantized exactly where the backend runs the
// format (ops::Backend::runsQuantized), else dequantizes it to the dense dtype at upload, so
// every model loads on every backend. Rows of several store tensors are concatenated (q | k | v,
// gate | up): quantized rows are row-independent, so this is a row copy of each array. Tensors
// of differing formats (a GGUF Q4_K_M file's Q4_K q and k with a Q6_K v) cannot share one
// quantized matrix: where the caller allows it they load as row parts, each its own matrix, run
// one linear each (runLinear); elsewhere the fused matrix loads dense.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/quant_format.h"
#include "kernels/linear.h"
#include "model/weight_store.h"
#include "ops/backend.h"

namespace es::model {

struct LinearWeight {
  int64_t n = 0;  // rows (output features)
  int64_t k = 0;  // columns (input features)
  // Dense: [n, k] dtype in `dense`, or at `shared` (not owned) when `dense` is empty.
  DType dtype = DType::kF32;
  Buffer dense;
  const void* shared = nullptr;
  // Quantized when set: data [n, dataRowBytes], scales [n, scaleRowBytes] (or empty), zeros
  // [n, zeroRowBytes] (or empty).
  std::optional<QuantFormat> format;
  int32_t group = 0;
  Buffer data, scales, zeros;

  // Row parts, top to bottom, when non-empty: W is their concatenation and holds no arrays of its
  // own (loadLinear with allowParts, for tensors of differing formats).
  std::vector<LinearWeight> parts;

  // Quantized, or split into parts of which one is.
  bool quantized() const;
  bool empty() const { return n == 0; }
  // Backend bytes this weight owns (0 for a shared table).
  int64_t bytes() const;
  // "bf16", "f32", the quantized format's name ("q4_k", "int4"), or the parts' names joined by
  // '|' ("q4_k|q6_k").
  std::string formatName() const;

  // Sets p.w, p.weightDtype and p.quantized for rows [firstRow, firstRow + p.n) of W; the rest
  // of p (x, y, m, n, k = this->k, dtype, ...) is the caller's. p.dtype must already be set:
  // weightDtype is left empty where it equals dtype. For a W in parts the rows must lie in one
  // part (InvalidArgument otherwise); runLinear runs a whole one.
  void fill(kernel::LinearParams& p, int64_t firstRow = 0) const;
};

// backend.linear(p) with W = w (p.n = w.n; p.w / weightDtype / quantized are set here). A W in
// parts runs one linear per part into `scratch` ([p.m, largest part's n] of p.outDtype; unused
// otherwise) and copies its columns into y, so y and the bias are those of the whole W; not
// with p.accumulate.
void runLinear(ops::Backend& backend, const LinearWeight& w, kernel::LinearParams p, void* scratch);

// A dense W [n, k] of `dtype` at `w` in backend memory that stays owned by someone else.
LinearWeight sharedLinear(const void* w, int64_t n, int64_t k, DType dtype);

// The rows of `names` (each [rows_i, k]) concatenated into one W on `backend`: quantized when
// every one is quantized in the same format and group (WeightStore::quantFormat /
// readQuantized) and backend.runsQuantized(format), else dense in `dtype` (quantized tensors
// dequantized, common/quant_dequant.h). Quantized rows that do not fit the tensor's shape or the
// format's layout are a FormatError naming the store and the tensor. With allowParts, names of
// differing formats where the backend runs one of them quantized load as parts instead (runs of
// consecutive names of one format each). The store must already have passed checkWeights.
LinearWeight loadLinear(ops::Backend& backend, const WeightStore& store,
                        const std::vector<std::string>& names, DType dtype,
                        bool allowParts = false);

// The [2 * features, k] gate/up W (gate rows, then up rows) reordered into
// kernel::GateUpLayout::kInterleaved8, dense or quantized (the same row order for data, scales
// and zeros); features % 8 == 0; not for a W in parts.
void interleaveGateUp(ops::Backend& backend, LinearWeight& w, int64_t features);

}  // namespace es::model
