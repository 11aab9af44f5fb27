#pragma once
// Device helpers shared by the model-forward kernels (embedding, rmsnorm, qkv_rope_kv_write,
// swiglu, paged_attention, linear bias): element conversions with the same rounding as the CPU
// references (round-to-nearest-even), N-element span loads/stores that use 16/8/4-byte accesses
// when the caller guarantees alignment, warp/block sums, and dtype dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/dtype.h"
#include "common/errors.h"

namespace es::kernel::fwd {

__device__ __forceinline__ float toF(float v) { return v; }
__device__ __forceinline__ float toF(bf16 v) { return __uint_as_float(uint32_t{v.bits} << 16); }
__device__ __forceinline__ float toF(fp16 v) { return __half2float(__ushort_as_half(v.bits)); }

template <typename T>
__device__ __forceinline__ T fromF(float v);
template <>
__device__ __forceinline__ float fromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 fromF<bf16>(float v) {
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}
template <>
__device__ __forceinline__ fp16 fromF<fp16>(float v) {
  return fp16{__half_as_ushort(__float2half_rn(v))};
}

// Raw storage of N elements of T, loaded/stored with the widest access that BYTES allows.
template <typename T, int N>
struct alignas((N * sizeof(T)) >= 16 ? 16 : (N * sizeof(T))) Span {
  T v[N];
};

// Loads N consecutive elements at p as floats. ALIGNED: p is aligned to min(16, N*sizeof(T)).
template <typename T, int N, bool ALIGNED>
__device__ __forceinline__ void loadSpan(const T* p, float (&out)[N]) {
  if constexpr (ALIGNED && (N * sizeof(T)) % 4 == 0) {
    constexpr int kBytes = N * sizeof(T);
    constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
    constexpr int kPer = kChunk / sizeof(T);
#pragma unroll
    for (int c = 0; c < N / kPer; ++c) {
      const Span<T, kPer> s = *reinterpret_cast<const Span<T, kPer>*>(p + c * kPer);
#pragma unroll
      for (int i = 0; i < kPer; ++i) out[c * kPer + i] = toF(s.v[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = toF(p[i]);
  }
}

template <typename T, int N, bool ALIGNED>
__device__ __forceinline__ void storeSpan(T* p, const float (&in)[N]) {
  if constexpr (ALIGNED && (N * sizeof(T)) % 4 == 0) {
    constexpr int kBytes = N * sizeof(T);
    constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
    constexpr int kPer = kChunk / sizeof(T);
#pragma unroll
    for (int c = 0; c < N / kPer; ++c) {
      Span<T, kPer> s;
#pragma unroll
      for (int i = 0; i < kPer; ++i) s.v[i] = fromF<T>(in[c * kPer + i]);
      *reinterpret_cast<Span<T, kPer>*>(p + c * kPer) = s;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = fromF<T>(in[i]);
  }
}

// SwiGLU of one feature in fp32: silu(g) * u with silu(g) = g / (1 + exp(-g)) (IEEE division,
// accurate expf). The swiglu kernel and the gemv's fused epilogue both call this, so the two
// paths give the same bits.
__device__ __forceinline__ float siluTimes(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float blockSum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float t = lane < warps ? partial[lane] : 0.0f;
  return warpSum(t);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Calls f(T{}) with T = float, fp16 or bf16 for dtype (validated before).
template <typename F>
void dispatchDtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      break;
    case DType::kF16:
      f(fp16{});
      break;
    case DType::kBF16:
      f(bf16{});
      break;
    default:
      ES_THROW(InvalidArgument, "forward op: unsupported dtype ", dtype_name(dtype));
  }
}

}  // namespace es::kernel::fwd
