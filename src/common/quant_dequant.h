#pragma once
// The definition of every quantized format's values (common/quant_format.h), as plain loops:
// the CPU backend's quantized linear, the GPU kernels' tests and the GGUF-to-dense conversion all
// take their numbers from here. GGUF blocks decode in ggml's order of f32 operations (no fused
// multiply-adds: the file is built with -ffp-contract=off), so they match llama.cpp's
// dequantize_row_* bit for bit.
#include <cstdint>
#include <span>

#include "common/quant_format.h"

namespace es {

// The f32 value of an FP8 E4M3 byte (OCP: bias 7, subnormals, 0x7f / 0xff are NaN, max 448):
// common/dtype.h's to_float(fp8e4m3), the one decoder, for callers holding bytes.
float fp8E4M3ToFloat(uint8_t q);

// Row `row` of W [n, k] held as `w`, in f32: out.size() must be k. The layout must be valid
// (quantLayoutRejection(w.format, k, w.group) == nullptr); not checked here (hot loop).
void dequantizeRow(const QuantizedWeightView& w, int64_t k, int64_t row, std::span<float> out);

}  // namespace es
