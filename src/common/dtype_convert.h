#pragma once
// Elements of an f32 / f16 / bf16 array addressed by a runtime DType, converted to and from f32
// (each store rounds once, to nearest even). f8_e4m3 arrays load too (exactly); nothing here
// rounds to FP8, so storing to one is rejected. Host code only: the CPU references, weight upload,
// and host copies of backend buffers all go through these. Accesses go through memcpy, so the
// array need not be aligned (tensors of an unpadded safetensors header are not).
#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "common/errors.h"

namespace es {

namespace detail {
[[noreturn]] inline void throwUnconvertible(DType t, const char* supported) {
  ES_THROW(InvalidArgument, "dtype conversion: argument 'dtype' = ", dtype_name(t), " must be ",
           supported);
}
}  // namespace detail

// Element i as float.
inline float loadAsFloat(const void* base, DType t, int64_t i) {
  const auto* bytes = static_cast<const uint8_t*>(base);
  switch (t) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, bytes + 4 * i, 4);
      return v;
    }
    case DType::kF16: {
      fp16 v;
      std::memcpy(&v, bytes + 2 * i, 2);
      return to_float(v);
    }
    case DType::kBF16: {
      bf16 v;
      std::memcpy(&v, bytes + 2 * i, 2);
      return to_float(v);
    }
    case DType::kF8E4M3:
      return to_float(fp8e4m3{bytes[i]});
    default:
      detail::throwUnconvertible(t, "f32, f16, bf16 or f8_e4m3");
  }
}

// v rounded once to t, stored as element i.
inline void storeFromFloat(void* base, DType t, int64_t i, float v) {
  auto* bytes = static_cast<uint8_t*>(base);
  switch (t) {
    case DType::kF32:
      std::memcpy(bytes + 4 * i, &v, 4);
      break;
    case DType::kF16: {
      const fp16 h = to_fp16(v);
      std::memcpy(bytes + 2 * i, &h, 2);
      break;
    }
    case DType::kBF16: {
      const bf16 b = to_bf16(v);
      std::memcpy(bytes + 2 * i, &b, 2);
      break;
    }
    default:
      detail::throwUnconvertible(t, "f32, f16 or bf16");
  }
}

// n elements starting at element `first`, as floats into dst[0, n).
inline void loadFloats(const void* base, DType t, int64_t first, int64_t n, float* dst) {
  if (t == DType::kF32) {
    std::memcpy(dst, static_cast<const float*>(base) + first, static_cast<size_t>(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = loadAsFloat(base, t, first + i);
}

// src[0, n) rounded to t into elements [first, first + n).
inline void storeFloats(const float* src, DType t, int64_t first, int64_t n, void* base) {
  for (int64_t i = 0; i < n; ++i) storeFromFloat(base, t, first + i, src[i]);
}

}  // namespace es
