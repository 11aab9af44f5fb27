// W [n, k] quantized -> dense [n, k] (quant_dequant.h). One thread per 16 consecutive elements of
// a row (every format's scale groups and blocks are multiples of 16, and fp8 rows are), each
// element computed with the operations of common/quant_dequant.cpp in its order, every product
// and sum rounded on its own (__fmul_rn / __fadd_rn: no contraction to fused multiply-adds), then
// rounded once to the output dtype. Byte reads: the prefill path reads W once per call, which is
// small beside the GEMM that follows.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "common/errors.h"
#include "kernels/forward_ops_device.cuh"
#include "kernels/quant_dequant.h"

namespace es::kernel {
namespace {

__device__ __forceinline__ float halfBytes(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

// The f32 value of an FP8 E4M3 byte (0x7f / 0xff NaN), exact: the hardware conversion to f16 (all
// e4m3 values are f16 values), then to f32.
__device__ __forceinline__ float fp8Value(uint8_t q) {
  uint32_t h;
  asm("{\n"
      "  .reg .b16 lo;\n"
      "  cvt.u16.u32 lo, %1;\n"
      "  cvt.rn.f16x2.e4m3x2 %0, lo;\n"
      "}\n"
      : "=r"(h)
      : "r"(uint32_t{q}));
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffffu)));
}

// The 6-bit scale (s) and min (m) of sub-block j of a Q4_K / Q5_K super-block's 12 scale bytes.
__device__ __forceinline__ void kScaleMin(const uint8_t* sc, int j, int& s, int& m) {
  if (j < 4) {
    s = sc[j] & 63;
    m = sc[j + 4] & 63;
  } else {
    s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
    m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

// Elements [c0, c0 + 16) of row `row` into v.
// rowBytes: dataRowBytes of the layout.
__device__ void decode16(const QuantizedWeightView& w, int64_t k, int64_t rowBytes, int64_t row,
                         int64_t c0, float (&v)[16]) {
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + row * rowBytes;
  switch (w.format) {
    case QuantFormat::kInt4: {
      const int64_t groups = k / w.group, g = c0 / w.group;
      const float s = halfBytes(static_cast<const uint8_t*>(w.scales) + 2 * (row * groups + g));
      const int z = static_cast<const uint8_t*>(w.zeros)[row * groups + g];
      for (int e = 0; e < 16; ++e) {
        const int64_t i = c0 + e;
        const int q = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0x0f);
        v[e] = __fmul_rn(static_cast<float>(q - z), s);
      }
      return;
    }
    case QuantFormat::kFp8E4M3: {
      const int64_t groups = (k + w.group - 1) / w.group;
      const float s = static_cast<const float*>(w.scales)[row * groups + c0 / w.group];
      for (int e = 0; e < 16; ++e) v[e] = __fmul_rn(fp8Value(src[c0 + e]), s);
      return;
    }
    case QuantFormat::kGgufQ8_0: {
      const uint8_t* blk = src + c0 / 32 * 34;
      const float d = halfBytes(blk);
      for (int e = 0; e < 16; ++e) {
        const int j = static_cast<int>(c0 % 32) + e;
        v[e] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(blk[2 + j])));
      }
      return;
    }
    case QuantFormat::kGgufQ4_0:
    case QuantFormat::kGgufQ4_1: {
      const bool q41 = w.format == QuantFormat::kGgufQ4_1;
      const uint8_t* blk = src + c0 / 32 * (q41 ? 20 : 18);
      const uint8_t* qs = blk + (q41 ? 4 : 2);
      const float d = halfBytes(blk);
      const float m = q41 ? halfBytes(blk + 2) : 0.0f;
      for (int e = 0; e < 16; ++e) {
        const int j = static_cast<int>(c0 % 32) + e;  // element j: low nibble of byte j (< 16)
        const int nib = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
        v[e] = q41 ? __fadd_rn(__fmul_rn(static_cast<float>(nib), d), m)
                   : __fmul_rn(static_cast<float>(nib - 8), d);
      }
      return;
    }
    case QuantFormat::kGgufQ4_K:
    case QuantFormat::kGgufQ5_K: {
      const bool q5 = w.format == QuantFormat::kGgufQ5_K;
      const uint8_t* blk = src + c0 / 256 * (q5 ? 176 : 144);
      const int l0 = static_cast<int>(c0 % 256);
      const int sub = l0 / 32, c = sub / 2;  // sub-block, 64-element chunk
      int sc, mn;
      kScaleMin(blk + 4, sub, sc, mn);
      const float d0 = __fmul_rn(halfBytes(blk), static_cast<float>(sc));
      const float min0 = __fmul_rn(halfBytes(blk + 2), static_cast<float>(mn));
      const uint8_t* qs = blk + (q5 ? 48 : 16) + 32 * c;
      for (int e = 0; e < 16; ++e) {
        const int l = l0 % 32 + e;
        int q = (sub & 1) ? (qs[l] >> 4) : (qs[l] & 0x0f);
        if (q5) q |= ((blk[16 + l] >> sub) & 1) << 4;
        v[e] = __fsub_rn(__fmul_rn(d0, static_cast<float>(q)), min0);
      }
      return;
    }
    case QuantFormat::kGgufQ6_K: {
      const uint8_t* blk = src + c0 / 256 * 210;
      const int l0 = static_cast<int>(c0 % 256);
      const int hf = l0 / 128, kk = (l0 % 128) / 32;
      const uint8_t* ql = blk + 64 * hf + 32 * (kk & 1);
      const uint8_t* qh = blk + 128 + 32 * hf;
      const int shift = kk < 2 ? 0 : 4;
      const float d = halfBytes(blk + 208);
      for (int e = 0; e < 16; ++e) {
        const int l = l0 % 32 + e;
        const int q = (((ql[l] >> shift) & 0x0f) | (((qh[l] >> (2 * kk)) & 3) << 4)) - 32;
        const float s =
            static_cast<float>(static_cast<int8_t>(blk[192 + 8 * hf + 2 * kk + l / 16]));
        v[e] = __fmul_rn(__fmul_rn(d, s), static_cast<float>(q));
      }
      return;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(256) dequantizeKernel(QuantizedWeightView w, int64_t n, int64_t k,
                                                        int64_t rowBytes, T* __restrict__ out) {
  const int64_t chunks = k / 16;
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n * chunks) return;
  const int64_t row = idx / chunks, c0 = (idx - row * chunks) * 16;
  float v[16];
  decode16(w, k, rowBytes, row, c0, v);
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
