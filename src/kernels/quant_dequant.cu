// W [n, k] quantized -> dense [n, k] (quant_dequant.h). One thread per 16 consecutive elements of
// a row (every format's scale groups and blocks are multiples of 16, and fp8 rows are), each
// element computed by quant::dequant16 (linear_quant_gemv_decode.h: the operations of
// common/quant_dequant.cpp in its order, no fused multiply-adds), then rounded once to the output
// dtype. Byte reads: the prefill path reads W once per call, which is
// small beside the GEMM that follows.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/linear_quant_gemv_decode.h"
#include "kernels/quant_dequant.h"

namespace es::kernel {
namespace {

template <typename T>
__global__ void __launch_bounds__(256) dequantizeKernel(QuantizedWeightView w, int64_t n, int64_t k,
                                                        int64_t rowBytes, T* __restrict__ out) {
  const int64_t chunks = k / 16;
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n * chunks) return;
  const int64_t row = idx / chunks, c0 = (idx - row * chunks) * 16;
  float v[16];
  quant::dequant16(w, k, rowBytes, row, c0, v);
  T* dst = out + row * k + c0;
#pragma unroll
  for (int e = 0; e < 16; ++e) dst[e] = fwd::fromF<T>(v[e]);
}

}  // namespace

void launchDequantizeWeight(const QuantizedWeightView& w, int32_t n, int32_t k, DType dtype,
                            void* out, cudaStream_t stream) {
  constexpr const char* kWhere = "launchDequantizeWeight";
  ES_CHECK_ARG(n > 0, kWhere, "n", n, "must be > 0");
  const char* why = quantLayoutRejection(w.format, k, w.group);
  ES_CHECK_ARG(why == nullptr, kWhere, "k", k, "does not fit ", quantFormatName(w.format),
               " with group ", w.group, ": ", why != nullptr ? why : "");
  ES_CHECK_ARG(k % 16 == 0, kWhere, "k", k, "must be a multiple of 16");
  ES_CHECK_ARG(w.data != nullptr, kWhere, "quantized.data", "null", "must not be null");
  ES_CHECK_ARG(scaleRowBytes(w.format, k, w.group) == 0 || w.scales != nullptr, kWhere,
               "quantized.scales", "null", "must not be null for ", quantFormatName(w.format));
  ES_CHECK_ARG(zeroRowBytes(w.format, k, w.group) == 0 || w.zeros != nullptr, kWhere,
               "quantized.zeros", "null", "must not be null for ", quantFormatName(w.format));
  ES_CHECK_ARG(out != nullptr, kWhere, "out", "null", "must not be null");
  // The f16 fields of GGUF blocks and int4 scales are read as 16-bit words, fp8 scales as f32.
  ES_CHECK_ARG(reinterpret_cast<uintptr_t>(w.data) % 2 == 0, kWhere, "quantized.data", w.data,
               "must be 2-byte aligned");
  const uintptr_t scaleAlign = w.format == QuantFormat::kFp8E4M3 ? 4 : 2;
  ES_CHECK_ARG(w.scales == nullptr || reinterpret_cast<uintptr_t>(w.scales) % scaleAlign == 0,
               kWhere, "quantized.scales", w.scales, "must be aligned to its element size (",
               scaleAlign, " bytes)");
  const int64_t rowBytes = dataRowBytes(w.format, k, w.group);
  const int64_t threads = int64_t{n} * (k / 16);
  const unsigned blocks = static_cast<unsigned>((threads + 255) / 256);
  switch (dtype) {
    case DType::kF32:
      dequantizeKernel<float>
          <<<blocks, 256, 0, stream>>>(w, n, k, rowBytes, static_cast<float*>(out));
      break;
    case DType::kF16:
      dequantizeKernel<fp16>
          <<<blocks, 256, 0, stream>>>(w, n, k, rowBytes, static_cast<fp16*>(out));
      break;
    case DType::kBF16:
      dequantizeKernel<bf16>
          <<<blocks, 256, 0, stream>>>(w, n, k, rowBytes, static_cast<bf16*>(out));
      break;
    default:
      ES_CHECK_ARG(false, kWhere, "dtype", dtype_name(dtype), "must be f32, f16 or bf16");
  }
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace es::kernel
