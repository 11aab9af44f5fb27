#include "model/gguf_dequant.h"

#include <cstring>

#include "common/errors.h"

namespace es::model {
namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float halfAt(const uint8_t* p) { return to_float(fp16{le16(p)}); }

void dequantQ8_0(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += 34, dst += 32) {
    const float d = halfAt(src);
    for (int j = 0; j < 32; ++j) dst[j] = d * static_cast<float>(static_cast<int8_t>(src[2 + j]));
  }
}

void dequantQ4_0(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += 18, dst += 32) {
    const float d = halfAt(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantQ4_1(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += 20, dst += 32) {
    const float d = halfAt(src);
    const float m = halfAt(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      // x * d + m, rounded after each step as in ggml (the build does not contract to fma).
      const float lo = static_cast<float>(qs[j] & 0x0F) * d;
      const float hi = static_cast<float>(qs[j] >> 4) * d;
      dst[j] = lo + m;
      dst[j + 16] = hi + m;
    }
  }
}

}  // namespace

bool ggmlTypeDequantizable(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
    case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ4_1:
      return true;
    default:
      return false;
  }
}

void dequantizeToF32(uint32_t type, std::span<const uint8_t> src, std::span<float> dst, std::string_view what) {
  const auto traits = ggmlTypeTraits(type);
  if (!traits || !ggmlTypeDequantizable(type)) {
    ES_THROW(FormatError, what, ": ggml type ", ggmlTypeName(type),
             " cannot be dequantised (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)");
  }
  const uint64_t n = dst.size();
  if (n % traits->block_elems != 0 || src.size() != n / traits->block_elems * traits->block_bytes) {
    ES_THROW(FormatError, what, ": ", n, " ", traits->name, " elements need ",
             n % traits->block_elems != 0 ? std::string("whole blocks of ") + std::to_string(traits->block_elems)
                                          : std::to_string(n / traits->block_elems * traits->block_bytes) + " bytes",
             " but ", src.size(), " bytes were given");
  }
  if (n == 0) return;  // an empty tensor: the spans may hold null pointers (no memcpy on them)
  const size_t blocks = static_cast<size_t>(n / traits->block_elems);
  const uint8_t* s = src.data();
  float* d = dst.data();
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(d, s, n * 4);  // little-endian host, as the file
      break;
    case GgmlType::kF16:
      for (size_t i = 0; i < n; ++i) d[i] = to_float(fp16{le16(s + 2 * i)});
      break;
    case GgmlType::kBF16:
      for (size_t i = 0; i < n; ++i) d[i] = to_float(bf16{le16(s + 2 * i)});
      break;
    case GgmlType::kQ8_0: dequantQ8_0(s, d, blocks); break;
    case GgmlType::kQ4_0: dequantQ4_0(s, d, blocks); break;
    case GgmlType::kQ4_1: dequantQ4_1(s, d, blocks); break;
    default: break;  // rejected above
  }
}

std::vector<float> dequantizeTensor(const GgufFile& file, const GgufTensorInfo& tensor) {
  std::vector<float> out(static_cast<size_t>(tensor.numel));
  dequantizeToF32(tensor.type, file.bytes(tensor), out, file.path().string() + ": tensor '" + tensor.name + "'");
  return out;
}

void convertF32(std::span<const float> src, std::span<bf16> dst) {
  ES_CHECK_ARG(src.size() == dst.size(), "convertF32", "dst.size()", dst.size(), "must equal src.size() = ", src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = to_bf16(src[i]);
}

void convertF32(std::span<const float> src, std::span<fp16> dst) {
  ES_CHECK_ARG(src.size() == dst.size(), "convertF32", "dst.size()", dst.size(), "must equal src.size() = ", src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = to_fp16(src[i]);
}

}  // namespace es::model
