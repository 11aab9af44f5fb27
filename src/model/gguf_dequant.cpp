#include "model/gguf_dequant.h"

#include <cstring>

#include "common/errors.h"
#include "common/quant_dequant.h"

namespace es::model {
namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

bool ggmlTypeDequantizable(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void dequantizeToF32(uint32_t type, std::span<const uint8_t> src, std::span<float> dst,
                     std::string_view what) {
  const auto traits = ggmlTypeTraits(type);
  if (!traits || !ggmlTypeDequantizable(type)) {
    ES_THROW(
        FormatError, what, ": ggml type ", ggmlTypeName(type),
        " cannot be dequantised (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)");
  }
  const uint64_t n = dst.size();
  if (n % traits->block_elems != 0 || src.size() != n / traits->block_elems * traits->block_bytes) {
    ES_THROW(FormatError, what, ": ", n, " ", traits->name, " elements need ",
             n % traits->block_elems != 0
                 ? std::string("whole blocks of ") + std::to_string(traits->block_elems)
                 : std::to_string(n / traits->block_elems * traits->block_bytes) + " bytes",
             " but ", src.size(), " bytes were given");
  }
  if (n == 0) return;  // an empty tensor: the spans may hold null pointers (no memcpy on them)
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
    default: {
      // The quantized kinds: the whole tensor as one row of n elements (blocks run along it).
      const QuantFormat format = *quantFormatOfGgmlType(type);
      dequantizeRow({.format = format, .data = s, .group = ggufBlockElems(format)},
                    static_cast<int64_t>(n), 0, dst);
      break;
    }
  }
}

std::vector<float> dequantizeTensor(const GgufFile& file, const GgufTensorInfo& tensor) {
  std::vector<float> out(static_cast<size_t>(tensor.numel));
  std::vector<uint8_t> stored(static_cast<size_t>(tensor.bytes));
  file.readBytes(tensor, stored);
  dequantizeToF32(tensor.type, stored, out,
                  file.path().string() + ": tensor " + quoteShort(tensor.name));
  return out;
}

void convertF32(std::span<const float> src, std::span<bf16> dst) {
  ES_CHECK_ARG(src.size() == dst.size(), "convertF32", "dst.size()", dst.size(),
               "must equal src.size() = ", src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = to_bf16(src[i]);
}

void convertF32(std::span<const float> src, std::span<fp16> dst) {
  ES_CHECK_ARG(src.size() == dst.size(), "convertF32", "dst.size()", dst.size(),
               "must equal src.size() = ", src.size());
  for (size_t i = 0; i < src.size(); ++i) dst[i] = to_fp16(src[i]);
}

}  // namespace es::model
