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

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from its 12 packed
// bytes: sub-blocks 0-3 keep theirs in the low 6 bits of bytes j (scale) and j + 4 (min);
// sub-blocks 4-7 take their low 4 bits from the nibbles of byte j + 4 (scale low, min high) and
// their top 2 bits from the spare top bits of bytes j - 4 (scale) and j (min).
void kScaleMin(const uint8_t* s, int j, float* scale, float* min) {
  int sc = 0, m = 0;
  if (j < 4) {
    sc = s[j] & 0x3F;
    m = s[j + 4] & 0x3F;
  } else {
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
  *scale = static_cast<float>(sc);
  *min = static_cast<float>(m);
}

// Q4_K (144 bytes / 256 elements): d, dmin, scales[12], qs[128]. Four chunks of 64 elements;
// chunk c reads qs[32c .. 32c + 31]: low nibbles are elements 64c + l (sub-block 2c), high
// nibbles elements 64c + 32 + l (sub-block 2c + 1). x = (d * scale) * q - (dmin * min), the
// products rounded to f32 first as in ggml.
// Q5_K (176 bytes / 256 elements): d, dmin, scales[12], qh[32], qs[128]. As Q4_K, plus a fifth
// bit per element: element 64c + l takes bit 2c of qh[l], element 64c + 32 + l bit 2c + 1.
// One loop serves both: kFifthBit selects the Q5_K layout.
template <bool kFifthBit>
void dequantQ45_K(const uint8_t* src, float* dst, size_t blocks) {
  constexpr size_t kBlockBytes = kFifthBit ? 176 : 144;
  for (size_t b = 0; b < blocks; ++b, src += kBlockBytes, dst += 256) {
    const float d = halfAt(src);
    const float dmin = halfAt(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qh = src + 16;  // Q5_K only
    const uint8_t* qs = src + (kFifthBit ? 48 : 16);
    for (int c = 0; c < 4; ++c) {
      float sc0, m0, sc1, m1;
      kScaleMin(scales, 2 * c, &sc0, &m0);
      kScaleMin(scales, 2 * c + 1, &sc1, &m1);
      const float d0 = d * sc0, min0 = dmin * m0, d1 = d * sc1, min1 = dmin * m1;
      const uint8_t* q = qs + 32 * c;
      float* y = dst + 64 * c;
      for (int l = 0; l < 32; ++l) {
        int lo = q[l] & 0x0F, hi = q[l] >> 4;
        if constexpr (kFifthBit) {
          lo |= ((qh[l] >> (2 * c)) & 1) << 4;
          hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        y[l] = d0 * static_cast<float>(lo) - min0;
        y[l + 32] = d1 * static_cast<float>(hi) - min1;
      }
    }
  }
}

// Q6_K (210 bytes / 256 elements): ql[128], qh[64], int8 scales[16], d. Two halves of 128
// elements; half h uses ql[64h ..], qh[32h ..], scales[8h ..]. Within a half, element
// 32k + l (k = 0..3, l = 0..31) has its low 4 bits in ql[l + 32 (k & 1)] (low nibble for
// k < 2, high nibble for k >= 2) and its top 2 bits in bits 2k, 2k + 1 of qh[l]; the 6-bit value
// is offset by -32 and scaled by scales[8h + 2k + l / 16] (one int8 scale per 16 elements).
// x = (d * scale) * q, as ggml rounds it.
void dequantQ6_K(const uint8_t* src, float* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += 210, dst += 256) {
    const float d = halfAt(src + 208);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = src + 64 * h;
      const uint8_t* qh = src + 128 + 32 * h;
      const auto* sc = reinterpret_cast<const int8_t*>(src + 192 + 8 * h);
      float* y = dst + 128 * h;
      for (int k = 0; k < 4; ++k) {
        const uint8_t* low = ql + 32 * (k & 1);
        const int shift = k < 2 ? 0 : 4;
        for (int l = 0; l < 32; ++l) {
          const int q = (((low[l] >> shift) & 0x0F) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
          y[32 * k + l] = d * static_cast<float>(sc[2 * k + l / 16]) * static_cast<float>(q);
        }
      }
    }
  }
}

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
    case GgmlType::kQ8_0:
      dequantQ8_0(s, d, blocks);
      break;
    case GgmlType::kQ4_0:
      dequantQ4_0(s, d, blocks);
      break;
    case GgmlType::kQ4_1:
      dequantQ4_1(s, d, blocks);
      break;
    case GgmlType::kQ4_K:
      dequantQ45_K<false>(s, d, blocks);
      break;
    case GgmlType::kQ5_K:
      dequantQ45_K<true>(s, d, blocks);
      break;
    case GgmlType::kQ6_K:
      dequantQ6_K(s, d, blocks);
      break;
    default:
      break;  // rejected above
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
