#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/errors.h"
#include "common/quant_format.h"

namespace es::model {
namespace {

// W's size must be n * k with n, k > 0, and every value finite: a NaN or infinity has no
// quantized value, and one would poison its whole group's scale.
// w: [n, k] f32.
void checkDense(std::span<const float> w, int64_t n, int64_t k, std::string_view name) {
  if (n <= 0 || k <= 0 || w.size() != static_cast<size_t>(n) * static_cast<size_t>(k)) {
    ES_THROW(InvalidArgument, "quantize: tensor ", quoteShort(name), ": ", w.size(),
             " values for a matrix of ", n, " x ", k);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) {
      ES_THROW(InvalidArgument, "quantize: tensor ", quoteShort(name), " has a non-finite value (",
               w[i], ") at [", static_cast<int64_t>(i) / k, ", ", static_cast<int64_t>(i) % k, "]");
    }
  }
}

void storeF16(std::vector<uint8_t>& bytes, size_t index, fp16 v) {
  std::memcpy(bytes.data() + 2 * index, &v, 2);
}

struct Int4Group {
  fp16 scale;
  uint8_t zero;
};

// The scale and zero point of one group, values [group] f32 (the rule in quantize.h).
Int4Group int4GroupParams(std::span<const float> values, std::string_view name, int64_t row,
                          int64_t group) {
  const auto [minIt, maxIt] = std::minmax_element(values.begin(), values.end());
  const float wMin = *minIt, wMax = *maxIt;
  if (wMin == wMax) {
    if (wMin == 0.0f) return {to_fp16(1.0f), 0};
    const fp16 s = to_fp16(std::fabs(wMin));
    if (to_float(s) == std::fabs(wMin)) return {s, static_cast<uint8_t>(wMin < 0.0f ? 1 : 0)};
  }
  const float lo = std::min(wMin, 0.0f), hi = std::max(wMax, 0.0f);
  const fp16 s = fp16RoundUp((hi - lo) / 15.0f);
  const float sf = to_float(s);
  if (!std::isfinite(sf)) {
    ES_THROW(InvalidArgument, "quantize: tensor ", quoteShort(name), " row ", row, " group ", group,
             ": int4 scale (max - min) / 15 = ", (hi - lo) / 15.0f,
             " exceeds f16's largest value 65504");
  }
  const float z = std::clamp(std::nearbyint(-lo / sf), 0.0f, 15.0f);
  return {s, static_cast<uint8_t>(z)};
}

}  // namespace

uint8_t floatToFp8E4M3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7f;
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  // Below 2^-6 the codes are subnormal, multiples of 2^-9 (code = a / 2^-9); a rounding up to 8
  // is the smallest normal, whose code is 8 too. Scaling by powers of two is exact.
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  int e2 = 0;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1): a / 2^(e2 - 1) in [1, 2)
  const int exponent = e2 - 1;
  const float mantissa = std::nearbyint((std::ldexp(a, -exponent) - 1.0f) * 8.0f);  // 0 .. 8
  // A mantissa rounding to 8 carries into the exponent: the codes are consecutive. a < 448 never
  // rounds past 448 (0x7e): values in [432, 448) round to 448 at most.
  const int code = (exponent + 7) * 8 + static_cast<int>(mantissa);
  return sign | static_cast<uint8_t>(code);
}

fp16 fp16RoundUp(float x) {
  fp16 h = to_fp16(x);
  if (to_float(h) < x) ++h.bits;  // x >= 0: the next f16 up (65504 -> +inf included)
  return h;
}

HostQuantizedMatrix quantizeInt4(std::span<const float> w, int64_t n, int64_t k, int32_t group,
                                 std::string_view name) {
  if (const char* why = quantLayoutRejection(QuantFormat::kInt4, k, group)) {
    ES_THROW(InvalidArgument, "quantize: tensor ", quoteShort(name), " [", n, ", ", k,
             "] cannot be int4 with group ", group, ": ", why);
  }
  checkDense(w, n, k, name);
  HostQuantizedMatrix m;
  m.format = QuantFormat::kInt4;
  m.group = group;
  m.n = n;
  m.k = k;
  const int64_t groups = k / group;
  m.data.assign(static_cast<size_t>(n * dataRowBytes(m.format, k, group)), 0);
  m.scales.resize(static_cast<size_t>(n * scaleRowBytes(m.format, k, group)));
  m.zeros.resize(static_cast<size_t>(n * zeroRowBytes(m.format, k, group)));
  for (int64_t r = 0; r < n; ++r) {
    const float* row = w.data() + r * k;            // [k] f32
    uint8_t* packed = m.data.data() + r * (k / 2);  // [k / 2] u8, two q a byte
    for (int64_t g = 0; g < groups; ++g) {
      const std::span<const float> values(row + g * group, static_cast<size_t>(group));  // [group]
      const Int4Group p = int4GroupParams(values, name, r, g);
      storeF16(m.scales, static_cast<size_t>(r * groups + g), p.scale);
      m.zeros[static_cast<size_t>(r * groups + g)] = p.zero;
      const float sf = to_float(p.scale);
      for (int64_t j = 0; j < group; ++j) {
        const float q = std::clamp(std::nearbyint(values[j] / sf) + p.zero, 0.0f, 15.0f);
        const int64_t col = g * group + j;
        packed[col / 2] |= static_cast<uint8_t>(static_cast<int>(q) << (4 * (col % 2)));
      }
    }
  }
  return m;
}

HostQuantizedMatrix quantizeFp8Blocks(std::span<const float> w, int64_t n, int64_t k,
                                      std::string_view name) {
  checkDense(w, n, k, name);
  HostQuantizedMatrix m;
  m.format = QuantFormat::kFp8E4M3;
  m.group = kFp8BlockSize;
  m.n = n;
  m.k = k;
  const int64_t colBlocks = (k + kFp8BlockSize - 1) / kFp8BlockSize;
  m.data.resize(static_cast<size_t>(n * k));
  std::vector<float> scales(static_cast<size_t>(n * colBlocks));
  for (int64_t r0 = 0; r0 < n; r0 += kFp8BlockSize) {
    const int64_t r1 = std::min(n, r0 + kFp8BlockSize);
    for (int64_t b = 0; b < colBlocks; ++b) {
      const int64_t c0 = b * kFp8BlockSize, c1 = std::min(k, c0 + kFp8BlockSize);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * k + c]));
      float s = amax / kFp8E4M3Max;
      if (s == 0.0f) s = 1.0f;
      for (int64_t r = r0; r < r1; ++r) {
        scales[static_cast<size_t>(r * colBlocks + b)] = s;
        for (int64_t c = c0; c < c1; ++c) m.data[r * k + c] = floatToFp8E4M3(w[r * k + c] / s);
      }
    }
  }
  m.scales.resize(scales.size() * sizeof(float));
  std::memcpy(m.scales.data(), scales.data(), m.scales.size());
  return m;
}

AwqGemmTensors packAwqGemm(const HostQuantizedMatrix& m) {
  ES_CHECK_ARG(m.format == QuantFormat::kInt4, "packAwqGemm", "format", quantFormatName(m.format),
               "must be int4");
  ES_CHECK_ARG(m.n > 0 && m.n % kAwqPackFactor == 0, "packAwqGemm", "n", m.n,
               "must be a positive multiple of 8 (AWQ packs 8 output features in an int32)");
  ES_CHECK_ARG(quantLayoutRejection(m.format, m.k, m.group) == nullptr, "packAwqGemm", "k", m.k,
               "must be a positive multiple of the group ", m.group);
  const int64_t n = m.n, k = m.k, groups = k / m.group, words = n / kAwqPackFactor;
  ES_CHECK_ARG(m.data.size() == static_cast<size_t>(n * k / 2) &&
                   m.scales.size() == static_cast<size_t>(n * groups * 2) &&
                   m.zeros.size() == static_cast<size_t>(n * groups),
               "packAwqGemm", "data.size()", m.data.size(), "and the scales / zeros must match [",
               n, ", ", k, "] with group ", m.group);
  AwqGemmTensors t;
  t.qweight.assign(static_cast<size_t>(k * words), 0);
  t.qzeros.assign(static_cast<size_t>(groups * words), 0);
  t.scales.resize(static_cast<size_t>(groups * n));
  for (int64_t col = 0; col < n; ++col) {  // an output feature: a row of m, a column of W^T
    const int64_t word = col / kAwqPackFactor;
    const int64_t slot =
        std::find(std::begin(kAwqOrder), std::end(kAwqOrder), col % kAwqPackFactor) -
        std::begin(kAwqOrder);
    const uint32_t shift = static_cast<uint32_t>(4 * slot);
    for (int64_t r = 0; r < k; ++r) {
      const uint32_t q = (m.data[col * (k / 2) + r / 2] >> (4 * (r % 2))) & 0xfu;
      auto& dst = t.qweight[r * words + word];
      dst = static_cast<int32_t>(static_cast<uint32_t>(dst) | (q << shift));
    }
    for (int64_t g = 0; g < groups; ++g) {
      const uint32_t z = m.zeros[col * groups + g] & 0xfu;
      auto& dst = t.qzeros[g * words + word];
      dst = static_cast<int32_t>(static_cast<uint32_t>(dst) | (z << shift));
      std::memcpy(&t.scales[g * n + col], m.scales.data() + 2 * (col * groups + g), 2);
    }
  }
  return t;
}

std::vector<float> fp8BlockScaleInv(const HostQuantizedMatrix& m) {
  ES_CHECK_ARG(m.format == QuantFormat::kFp8E4M3 && m.group == kFp8BlockSize, "fp8BlockScaleInv",
               "group", m.group, "must be 128 on an fp8-e4m3 matrix (got format ",
               quantFormatName(m.format), ")");
  const int64_t colBlocks = (m.k + kFp8BlockSize - 1) / kFp8BlockSize;
  const int64_t rowBlocks = (m.n + kFp8BlockSize - 1) / kFp8BlockSize;
  ES_CHECK_ARG(m.scales.size() == static_cast<size_t>(m.n * colBlocks * 4), "fp8BlockScaleInv",
               "scales.size()", m.scales.size(),
               "must be n * ceil(k / 128) * 4 = ", m.n * colBlocks * 4);
  std::vector<float> out(static_cast<size_t>(rowBlocks * colBlocks));
  for (int64_t rb = 0; rb < rowBlocks; ++rb) {
    std::memcpy(out.data() + rb * colBlocks, m.scales.data() + rb * kFp8BlockSize * colBlocks * 4,
                static_cast<size_t>(colBlocks * 4));
  }
  return out;
}

}  // namespace es::model
