#pragma once
// Device pieces both gemv kernels use (kernels/linear_gemv.cu, kernels/linear_quant_gemv.cu):
// packed 16-bit conversions, the 16-byte load of x, and the m16n8k16 tensor-core product.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.h"
#include "kernels/forward_ops_device.cuh"

namespace es::kernel {

// The 8 T values of a 16-byte chunk as floats, and back (rounded).
template <typename T>
__device__ __forceinline__ void unpack8(const uint4 v, float (&a)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = fwd::toF(T{static_cast<uint16_t>(w[i] & 0xffffu)});
    a[2 * i + 1] = fwd::toF(T{static_cast<uint16_t>(w[i] >> 16)});
  }
}
template <typename T>
__device__ __forceinline__ uint4 pack8(const float (&a)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] =
        uint32_t{fwd::fromF<T>(a[2 * i]).bits} | (uint32_t{fwd::fromF<T>(a[2 * i + 1]).bits} << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// 16 bytes of x: read by every CTA, so cached in L1. Zeros and no access when !pred.
__device__ __forceinline__ uint4 loadX(const void* ptr, bool pred) {
  uint4 v;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      "}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "r"(static_cast<int>(pred)));
  return v;
}

// c += A · B for one m16n8k16 tile, fp32 accumulators. A: {a0, a1, a2, a3} = (row g, k pair lo),
// (row g + 8, k pair lo), (row g, k pair hi), (row g + 8, k pair hi); B: {b0, b1} = (k pair lo,
// column g), (k pair hi, column g); c: (row g, columns 2t, 2t+1), (row g + 8, same columns).
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

}  // namespace es::kernel
