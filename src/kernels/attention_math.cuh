#pragma once
// Softmax arithmetic shared by the attention kernels (paged_attention.cu's split-KV kernel and the
// wgmma prefill kernel of paged_attention_prefill.cu): 2^x on the SFU and the rounding of two
// fp32 softmax weights into one register of the storage type (the A operand of P V).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.h"

namespace es::kernel::attn {

// 2^x on the SFU alone (ex2.approx.ftz: results below 2^-126 flush to zero, far below what a
// softmax weight rounded to bf16/f16 next to the row's maximum weight 1 can carry); exp2f adds a
// range check and two predicated multiplies per call to keep denormal results.
__device__ __forceinline__ float exp2Ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats -> one register of two 16-bit values (lo in the low half), round to nearest even.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  if constexpr (std::is_same_v<T, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

}  // namespace es::kernel::attn
