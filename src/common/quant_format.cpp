#include "common/quant_format.h"

namespace es {

namespace {

// ggml's type ids (model/gguf.h GgmlType) of the GGUF formats.
constexpr uint32_t kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8, kGgmlQ4_K = 12, kGgmlQ5_K = 13,
                   kGgmlQ6_K = 14;

bool isGguf(QuantFormat format) {
  return format != QuantFormat::kInt4 && format != QuantFormat::kFp8E4M3;
}

}  // namespace

std::string_view quantFormatName(QuantFormat format) {
  switch (format) {
    case QuantFormat::kInt4:
      return "int4";
    case QuantFormat::kFp8E4M3:
      return "fp8-e4m3";
    case QuantFormat::kGgufQ8_0:
      return "q8_0";
    case QuantFormat::kGgufQ4_0:
      return "q4_0";
    case QuantFormat::kGgufQ4_1:
      return "q4_1";
    case QuantFormat::kGgufQ4_K:
      return "q4_k";
    case QuantFormat::kGgufQ5_K:
      return "q5_k";
    case QuantFormat::kGgufQ6_K:
      return "q6_k";
  }
  return "?";
}

uint32_t ggmlTypeOf(QuantFormat format) {
  switch (format) {
    case QuantFormat::kGgufQ8_0:
      return kGgmlQ8_0;
    case QuantFormat::kGgufQ4_0:
      return kGgmlQ4_0;
    case QuantFormat::kGgufQ4_1:
      return kGgmlQ4_1;
    case QuantFormat::kGgufQ4_K:
      return kGgmlQ4_K;
    case QuantFormat::kGgufQ5_K:
      return kGgmlQ5_K;
    case QuantFormat::kGgufQ6_K:
      return kGgmlQ6_K;
    case QuantFormat::kInt4:
    case QuantFormat::kFp8E4M3:
      break;
  }
  return UINT32_MAX;
}

std::optional<QuantFormat> quantFormatOfGgmlType(uint32_t ggmlType) {
  switch (ggmlType) {
    case kGgmlQ8_0:
      return QuantFormat::kGgufQ8_0;
    case kGgmlQ4_0:
      return QuantFormat::kGgufQ4_0;
    case kGgmlQ4_1:
      return QuantFormat::kGgufQ4_1;
    case kGgmlQ4_K:
      return QuantFormat::kGgufQ4_K;
    case kGgmlQ5_K:
      return QuantFormat::kGgufQ5_K;
    case kGgmlQ6_K:
      return QuantFormat::kGgufQ6_K;
    default:
      return std::nullopt;
  }
}

int32_t ggufBlockElems(QuantFormat format) {
  switch (format) {
    case QuantFormat::kGgufQ8_0:
    case QuantFormat::kGgufQ4_0:
    case QuantFormat::kGgufQ4_1:
      return 32;
    case QuantFormat::kGgufQ4_K:
    case QuantFormat::kGgufQ5_K:
    case QuantFormat::kGgufQ6_K:
      return 256;
    case QuantFormat::kInt4:
    case QuantFormat::kFp8E4M3:
      break;
  }
  return 0;
}

int32_t ggufBlockBytes(QuantFormat format) {
  switch (format) {
    case QuantFormat::kGgufQ8_0:
      return 34;
    case QuantFormat::kGgufQ4_0:
      return 18;
    case QuantFormat::kGgufQ4_1:
      return 20;
    case QuantFormat::kGgufQ4_K:
      return 144;
    case QuantFormat::kGgufQ5_K:
      return 176;
    case QuantFormat::kGgufQ6_K:
      return 210;
    case QuantFormat::kInt4:
    case QuantFormat::kFp8E4M3:
      break;
  }
  return 0;
}

int64_t dataRowBytes(QuantFormat format, int64_t k, int32_t /*group*/) {
  if (format == QuantFormat::kInt4) return k / 2;
  if (format == QuantFormat::kFp8E4M3) return k;
  return k / ggufBlockElems(format) * ggufBlockBytes(format);
}

int64_t scaleRowBytes(QuantFormat format, int64_t k, int32_t group) {
  if (format == QuantFormat::kInt4) return k / group * 2;                   // f16
  if (format == QuantFormat::kFp8E4M3) return (k + group - 1) / group * 4;  // f32
  return 0;
}

int64_t zeroRowBytes(QuantFormat format, int64_t k, int32_t group) {
  return format == QuantFormat::kInt4 ? k / group : 0;
}

const char* quantLayoutRejection(QuantFormat format, int64_t k, int32_t group) {
  if (k <= 0) return "k must be positive";
  switch (format) {
    case QuantFormat::kInt4:
      if (group != 32 && group != 64 && group != 128) return "int4 group must be 32, 64 or 128";
      if (k % group != 0) return "k must be a multiple of the int4 group";
      return nullptr;
    case QuantFormat::kFp8E4M3:
      if (group <= 0) return "fp8 scale group must be positive";
      if (group != 128 && group != k) return "fp8 scale group must be 128 or k (per channel)";
      return nullptr;
    default:
      break;
  }
  if (!isGguf(format)) return "unknown quantized format";
  if (group != ggufBlockElems(format)) return "a GGUF format's group must be its block size";
  if (k % group != 0) return "k must be a multiple of the GGUF block size";
  return nullptr;
}

}  // namespace es
