// Host rules of the quantized gemv (linear_quant_gemv.h): span sizes, shared memory, the
// launcher's configuration and the parameter checks (every build, so the rules are tested
// without a GPU).
#include <cstdint>

#include "common/dtype.h"
#include "kernels/linear.h"
#include "kernels/linear_quant_gemv.h"

namespace es::kernel::detail {

namespace {

bool alignedTo(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

}  // namespace

int32_t quantGemvSpan(QuantFormat format) {
  switch (format) {
    case QuantFormat::kFp8E4M3:
    case QuantFormat::kGgufQ8_0:
      return 128;
    default:
      return 256;
  }
}

int32_t quantGemvRowStride(QuantFormat format) {
  // The group only matters for the scale rows; the data bytes of a span depend on the format.
  const int64_t spanBytes = dataRowBytes(format, quantGemvSpan(format), 32);
  const bool aligned = format == QuantFormat::kInt4 || format == QuantFormat::kFp8E4M3 ||
                       format == QuantFormat::kGgufQ4_K || format == QuantFormat::kGgufQ5_K;
  const int64_t stride = (spanBytes + 15) / 16 * 16 + (aligned ? 0 : 16);
  return static_cast<int32_t>((stride / 16) % 2 == 1 ? stride : stride + 16);
}

int32_t quantGemvSmemBytes(QuantFormat format) {
  return kQuantGemvWarps * kQuantGemvStages * 16 * quantGemvRowStride(format);
}

QuantGemvConfig chooseQuantGemvConfig(QuantFormat format, int32_t n, int32_t k, int32_t numSms) {
  const int64_t sms = numSms > 0 ? numSms : 1;
  const int64_t tiles = (int64_t{n} + 15) / 16;
  const int64_t spans = (int64_t{k} + quantGemvSpan(format) - 1) / quantGemvSpan(format);
  // Nothing here depends on m: kSplit fixes which spans each warp and CTA sums, and in what order.
  // The fraction of the last wave's CTA slots that hold work (2 CTAs an SM, every CTA the same
  // work), 1 for a grid of whole waves.
  auto fill = [&](int32_t split) {
    const int64_t ctas = tiles * split, slots = 2 * sms;
    const int64_t waves = (ctas + slots - 1) / slots;
    return static_cast<double>(ctas) / static_cast<double>(waves * slots);
  };
  int32_t best = 1;
  for (int32_t split = 2; split <= 8 && spans >= int64_t{kQuantGemvWarps} * split; split *= 2) {
    if (fill(split) > fill(best) + 0.03) best = split;
  }
  return {.kSplit = best};
}

const char* quantGemvRejection(const LinearParams& p) {
  if (!p.quantized) return "quantized must be set";
  const QuantizedWeightView& w = *p.quantized;
  if (quantLayoutRejection(w.format, p.k, w.group) != nullptr) {
    return quantLayoutRejection(w.format, p.k, w.group);
  }
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return "dtype must be bf16 or f16";
  if (p.outDtype != p.dtype && p.outDtype != DType::kF32) return "outDtype must be dtype or f32";
  if (p.m < 1 || p.m > 16) return "m must be in [1, 16]";
  if (p.n < 1) return "n must be > 0";
  if (p.k % 16 != 0) return "k must be a multiple of 16";
  if ((p.normWeight != nullptr || p.accumulate) && p.outDtype != p.dtype) {
    return "outDtype must be dtype with normWeight or accumulate";
  }
  if (!alignedTo(p.x, 16)) return "x must be 16-byte aligned";
  if (!alignedTo(p.normWeight, 16)) return "normWeight must be 16-byte aligned";
  if (!alignedTo(p.y, static_cast<uintptr_t>(dtype_size(p.outDtype)))) {
    return "y must be aligned to its element size";
  }
  if (!alignedTo(p.bias, 2)) return "bias must be 2-byte aligned";
  if (w.data == nullptr) return "quantized.data must not be null";
  if (!alignedTo(w.data, 16)) return "quantized.data must be 16-byte aligned";
  if (scaleRowBytes(w.format, p.k, w.group) > 0) {
    if (w.scales == nullptr) return "quantized.scales must not be null";
    const uintptr_t scaleAlign = w.format == QuantFormat::kFp8E4M3 ? 4 : 2;
    if (!alignedTo(w.scales, scaleAlign)) {
      return "quantized.scales must be aligned to its element size";
    }
  }
  if (zeroRowBytes(w.format, p.k, w.group) > 0 && w.zeros == nullptr) {
    return "quantized.zeros must not be null";
  }
  return nullptr;
}

}  // namespace es::kernel::detail
