// The quantized formats' values (quant_dequant.h), as plain loops over one row. Built with
// -ffp-contract=off (CMakeLists.txt): every product is rounded to f32 before it is added, in the
// order ggml's dequantize_row_* uses, so GGUF rows decode bit for bit as llama.cpp decodes them.
#include "common/quant_dequant.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/dtype.h"

namespace es {
namespace {

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float halfAt(const uint8_t* p) { return to_float(fp16{le16(p)}); }

// Q8_0 (34 bytes / 32 elements): d (f16), 32 x int8 q; x = d * q.
void decodeQ8_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, dst += 32) {
    const float d = halfAt(src);
    int8_t qs[32];  // a local copy: the stores cannot alias it, so the loop vectorizes
    std::memcpy(qs, src + 2, 32);
    for (int j = 0; j < 32; ++j) dst[j] = d * static_cast<float>(qs[j]);
  }
}

// Q4_0 (18 bytes / 32 elements): d, 16 bytes; byte j holds element j in its low nibble and
// element j + 16 in its high nibble; x = (nibble - 8) * d.
void decodeQ4_0(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 18, dst += 32) {
    const float d = halfAt(src);
    uint8_t qs[16];  // a local copy: the stores below cannot alias it, so the loop vectorizes
    std::memcpy(qs, src + 2, 16);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// Q4_1 (20 bytes / 32 elements): d, m, 16 bytes of nibbles as Q4_0; x = nibble * d + m, the
// product rounded before the add.
void decodeQ4_1(const uint8_t* src, float* dst, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b, src += 20, dst += 32) {
    const float d = halfAt(src);
    const float m = halfAt(src + 2);
    uint8_t qs[16];  // a local copy: the stores below cannot alias it, so the loop vectorizes
    std::memcpy(qs, src + 4, 16);
    for (int j = 0; j < 16; ++j) {
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
void decodeQ45_K(const uint8_t* src, float* dst, int64_t blocks) {
  constexpr int64_t kBlockBytes = kFifthBit ? 176 : 144;
  uint8_t block[kBlockBytes];  // a local copy: the stores cannot alias it, so loops vectorize
  for (int64_t b = 0; b < blocks; ++b, src += kBlockBytes, dst += 256) {
    std::memcpy(block, src, kBlockBytes);
    const float d = halfAt(block);
    const float dmin = halfAt(block + 2);
    const uint8_t* scales = block + 4;
    const uint8_t* qh = block + 16;  // Q5_K only
    const uint8_t* qs = block + (kFifthBit ? 48 : 16);
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
void decodeQ6_K(const uint8_t* src, float* dst, int64_t blocks) {
  uint8_t block[210];  // a local copy: the stores cannot alias it, so the loops vectorize
  for (int64_t b = 0; b < blocks; ++b, src += 210, dst += 256) {
    std::memcpy(block, src, 210);
    const float d = halfAt(block + 208);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = block + 64 * h;
      const uint8_t* qh = block + 128 + 32 * h;
      const auto* sc = reinterpret_cast<const int8_t*>(block + 192 + 8 * h);
      float* y = dst + 128 * h;
      for (int k = 0; k < 4; ++k) {
        const uint8_t* low = ql + 32 * (k & 1);
        const int shift = k < 2 ? 0 : 4;
        for (int half = 0; half < 2; ++half) {  // 16 elements per scale
          const float ds = d * static_cast<float>(sc[2 * k + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q = (((low[l] >> shift) & 0x0F) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            y[32 * k + l] = ds * static_cast<float>(q);
          }
        }
      }
    }
  }
}

// kInt4 (quant_format.h): w = (q - z) * s, q the nibble of element k (low nibble for even k),
// z and s those of group k / group.
void decodeInt4(const QuantizedWeightView& w, int64_t k, int64_t row, float* out) {
  const auto* q = static_cast<const uint8_t*>(w.data) + row * (k / 2);
  const int64_t groups = k / w.group;
  const auto* s = static_cast<const uint8_t*>(w.scales) + row * groups * 2;
  const auto* z = static_cast<const uint8_t*>(w.zeros) + row * groups;
  uint8_t bytes[64];  // one group's nibbles, copied so the stores cannot alias them
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = halfAt(s + 2 * g);
    const int zero = z[g];
    const int64_t half = w.group / 2;
    std::memcpy(bytes, q + g * half, static_cast<size_t>(half));
    float* y = out + g * w.group;
    for (int64_t j = 0; j < half; ++j) {
      y[2 * j] = static_cast<float>((bytes[j] & 0x0F) - zero) * scale;
      y[2 * j + 1] = static_cast<float>((bytes[j] >> 4) - zero) * scale;
    }
  }
}

// fp8E4M3ToFloat of every byte, built once: the row decoder looks values up.
const std::array<float, 256>& fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b)
      t[static_cast<size_t>(b)] = fp8E4M3ToFloat(static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

// kFp8E4M3: w = fp8(q) * s, s the f32 scale of group k / group (the last group may be short).
void decodeFp8(const QuantizedWeightView& w, int64_t k, int64_t row, float* out) {
  const auto* q = static_cast<const uint8_t*>(w.data) + row * k;
  const int64_t groups = (k + w.group - 1) / w.group;
  const auto* s = static_cast<const float*>(w.scales) + row * groups;
  const std::array<float, 256>& value = fp8Table();
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = s[g];
    const int64_t end = std::min<int64_t>(k, (g + 1) * w.group);
    for (int64_t i = g * w.group; i < end; ++i) out[i] = value[q[i]] * scale;
  }
}

}  // namespace

float fp8E4M3ToFloat(uint8_t q) { return to_float(fp8e4m3{q}); }

void dequantizeRow(const QuantizedWeightView& w, int64_t k, int64_t row, std::span<float> out) {
  float* dst = out.data();
  if (w.format == QuantFormat::kInt4) {
    decodeInt4(w, k, row, dst);
    return;
  }
  if (w.format == QuantFormat::kFp8E4M3) {
    decodeFp8(w, k, row, dst);
    return;
  }
  const int64_t blocks = k / ggufBlockElems(w.format);
  const auto* src = static_cast<const uint8_t*>(w.data) + row * dataRowBytes(w.format, k, w.group);
  switch (w.format) {
    case QuantFormat::kGgufQ8_0:
      decodeQ8_0(src, dst, blocks);
      break;
    case QuantFormat::kGgufQ4_0:
      decodeQ4_0(src, dst, blocks);
      break;
    case QuantFormat::kGgufQ4_1:
      decodeQ4_1(src, dst, blocks);
      break;
    case QuantFormat::kGgufQ4_K:
      decodeQ45_K<false>(src, dst, blocks);
      break;
    case QuantFormat::kGgufQ5_K:
      decodeQ45_K<true>(src, dst, blocks);
      break;
    case QuantFormat::kGgufQ6_K:
      decodeQ6_K(src, dst, blocks);
      break;
    case QuantFormat::kInt4:
    case QuantFormat::kFp8E4M3:
      break;  // handled above
  }
}

}  // namespace es
