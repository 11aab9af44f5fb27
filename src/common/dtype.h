#pragma once
// Element types and 16-bit / 8-bit float storage usable from plain g++ and from device code.
// bf16 / fp16 / fp8e4m3 are storage types (bit patterns) with explicit conversions; they are
// layout compatible with __nv_bfloat16 / __half / __nv_fp8_e4m3, so a kernel may reinterpret the
// same memory.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/host_device.h"

namespace es {

struct bf16 {
  uint16_t bits;
};
struct fp16 {
  uint16_t bits;
};
// FP8 E4M3 as the OCP 8-bit floating point spec defines it (safetensors "F8_E4M3", torch
// float8_e4m3fn): 1 sign, 4 exponent (bias 7) and 3 mantissa bits, subnormals, no infinities,
// S.1111.111 (0x7f / 0xff) is NaN, largest finite magnitude 448.
struct fp8e4m3 {
  uint8_t bits;
};
static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2 && sizeof(fp8e4m3) == 1);

namespace detail {
ES_HOST_DEVICE ES_FORCE_INLINE uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
ES_HOST_DEVICE ES_FORCE_INLINE float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace detail

ES_HOST_DEVICE inline float to_float(bf16 v) {
  return detail::bits_float(static_cast<uint32_t>(v.bits) << 16);
}

// Round to nearest even; NaN stays a (quiet) NaN with its sign.
ES_HOST_DEVICE inline bf16 to_bf16(float f) {
  uint32_t x = detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((x >> 16) | 0x0040u)};
  x += 0x7fffu + ((x >> 16) & 1u);
  return bf16{static_cast<uint16_t>(x >> 16)};
}

ES_HOST_DEVICE inline float to_float(fp16 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
  const uint32_t exponent = (v.bits >> 10) & 0x1fu;
  const uint32_t mantissa = v.bits & 0x3ffu;
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return detail::bits_float(sign | 0x7f800000u | (mantissa << 13));
  return detail::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Exact: every E4M3 value is an f32.
ES_HOST_DEVICE inline float to_float(fp8e4m3 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80u) << 24;
  const uint32_t exponent = (v.bits >> 3) & 0xfu;
  const uint32_t mantissa = v.bits & 0x7u;
  if (exponent == 0) {
    // zero or subnormal: mantissa * 2^-9 (2^(1 - 7) / 8), exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 15 && mantissa == 7) return detail::bits_float(sign | 0x7fc00000u);
  return detail::bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// Round to nearest even, overflow to infinity, subnormals kept, NaN stays NaN.
ES_HOST_DEVICE inline fp16 to_fp16(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    const uint16_t nan_bits =
        absx > 0x7f800000u ? static_cast<uint16_t>(0x200u | ((absx >> 13) & 0x3ffu)) : 0;
    return fp16{static_cast<uint16_t>(sign | 0x7c00u | nan_bits)};
  }
  if (absx >= 0x477ff000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520
  if (absx < 0x38800000u) {                     // below the smallest normal half (2^-14)
    if (absx < 0x33000000u) return fp16{sign};  // below 2^-25: rounds to zero
    const uint32_t mantissa = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (absx >> 23);  // units of 2^-24
    uint32_t q = mantissa >> shift;
    const uint32_t rem = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return fp16{static_cast<uint16_t>(sign | q)};
  }
  uint32_t q = (absx - 0x38000000u) >> 13;  // rebias exponent 127 -> 15
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return fp16{static_cast<uint16_t>(sign | q)};
}

// kF8E4M3 holds fp8e4m3 elements: weights of FP8 checkpoints (model/quantized_checkpoint.h).
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kI8, kU8, kF8E4M3 };

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kI8:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kF8E4M3:
      return "f8_e4m3";
  }
  return "?";
}

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<fp16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<fp8e4m3> {
  static constexpr DType value = DType::kF8E4M3;
};
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace es
