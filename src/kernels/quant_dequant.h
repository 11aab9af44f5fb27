#pragma once
// Dequantization of a quantized W [n, k] (common/quant_format.h) into a dense [n, k] matrix on the
// device: the prefill path of a quantized linear layer runs cuBLASLt on it (linear_cuda.cpp). Each
// element is the f32 value common/quant_dequant.h defines (the same operations in the same order,
// no fused multiply-adds), rounded once to the output dtype.
#include <cstdint>

#include "common/dtype.h"
#include "common/quant_format.h"
#include "common/stream.h"

namespace es::kernel {

// out [n, k] dtype (f32, f16 or bf16) = dequant(w). InvalidArgument (naming the argument) for an
// invalid layout (quantLayoutRejection), null arrays, n <= 0 or another dtype (CUDA builds).
void launchDequantizeWeight(const QuantizedWeightView& w, int32_t n, int32_t k, DType dtype,
                            void* out, cudaStream_t stream);

}  // namespace es::kernel
