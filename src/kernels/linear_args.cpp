// Host validation of launchLinear / ref::linear, and the gemv path's host rules (every build).
#include <cmath>
#include <cstdint>
#include <string_view>

#include "common/errors.h"
#include "kernels/linear.h"
#include "kernels/linear_gemv.h"

namespace es::kernel {

void validateQuantizedWeight(const QuantizedWeightView& w, int32_t k, const char* where) {
  const std::string_view name = quantFormatName(w.format);
  ES_CHECK_ARG(name != "?", where, "quantized.format", static_cast<int>(w.format),
               "must be a QuantFormat");
  const char* why = quantLayoutRejection(w.format, k, w.group);
  ES_CHECK_ARG(why == nullptr, where, "quantized.group", w.group, "does not fit k = ", k, " (",
               name, "): ", why ? why : "");
  ES_CHECK_ARG(w.data != nullptr, where, "quantized.data", "null", "must not be null");
  ES_CHECK_ARG(scaleRowBytes(w.format, k, w.group) == 0 || w.scales != nullptr, where,
               "quantized.scales", "null", "must not be null for ", name);
  ES_CHECK_ARG(zeroRowBytes(w.format, k, w.group) == 0 || w.zeros != nullptr, where,
               "quantized.zeros", "null", "must not be null for ", name);
}

bool validate(const LinearParams& p) {
  constexpr const char* kWhere = "launchLinear";
  ES_CHECK_ARG(p.m >= 0, kWhere, "m", p.m, "must be >= 0");
  ES_CHECK_ARG(p.n > 0, kWhere, "n", p.n, "must be > 0");
  ES_CHECK_ARG(p.k > 0, kWhere, "k", p.k, "must be > 0");
  ES_CHECK_ARG(p.dtype == DType::kF32 || p.dtype == DType::kF16 || p.dtype == DType::kBF16, kWhere,
               "dtype", dtype_name(p.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(p.outDtype == p.dtype || p.outDtype == DType::kF32, kWhere, "outDtype",
               dtype_name(p.outDtype), "must be dtype (", dtype_name(p.dtype), ") or f32");
  if (p.weightDtype && *p.weightDtype != p.dtype) {
    ES_CHECK_ARG(
        p.dtype == DType::kF32 && (*p.weightDtype == DType::kBF16 || *p.weightDtype == DType::kF16),
        kWhere, "weightDtype", dtype_name(*p.weightDtype),
        "may differ from dtype only as bf16 or f16 W with f32 x (dtype is ", dtype_name(p.dtype),
        ")");
  }
  ES_CHECK_ARG(
      p.algo == LinearAlgo::kAuto || p.algo == LinearAlgo::kCublasLt || p.algo == LinearAlgo::kGemv,
      kWhere, "algo", static_cast<int>(p.algo), "must be kAuto, kCublasLt or kGemv");
  if (p.normWeight != nullptr) {
    ES_CHECK_ARG(p.normEps > 0.0f && std::isfinite(p.normEps), kWhere, "normEps", p.normEps,
                 "must be finite and > 0");
  }
  if (p.accumulate) {
    ES_CHECK_ARG(p.outDtype == p.dtype, kWhere, "outDtype", dtype_name(p.outDtype),
                 "must be dtype (", dtype_name(p.dtype), ") with accumulate");
  }
  if (p.m == 0) return false;
  ES_CHECK_ARG(p.x != nullptr, kWhere, "x", "null", "must not be null");
  if (p.quantized) {
    validateQuantizedWeight(*p.quantized, p.k, kWhere);
  } else {
    ES_CHECK_ARG(p.w != nullptr, kWhere, "w", "null", "must not be null");
  }
  ES_CHECK_ARG(p.y != nullptr, kWhere, "y", "null", "must not be null");
  ES_CHECK_ARG(p.y != p.x, kWhere, "y", p.y, "must not alias x");
  return true;
}

namespace {
bool alignedTo(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}
}  // namespace

const char* gemvRejection(const LinearParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return "dtype must be bf16 or f16";
  if (p.weightDtype && *p.weightDtype != p.dtype) return "weightDtype must equal dtype";
  if (p.m < 1 || p.m > 16) return "m must be in [1, 16]";
  if (p.n < 1) return "n must be > 0";
  if (p.k < 1 || p.k % 8 != 0) return "k must be a positive multiple of 8";
  if (!alignedTo(p.x, 16)) return "x must be 16-byte aligned";
  if (!alignedTo(p.w, 16)) return "w must be 16-byte aligned";
  if (!alignedTo(p.y, static_cast<uintptr_t>(dtype_size(p.outDtype)))) {
    return "y must be aligned to its element size";
  }
  if (!alignedTo(p.bias, 2)) return "bias must be 2-byte aligned";
  if (!alignedTo(p.normWeight, 16)) return "normWeight must be 16-byte aligned";
  return nullptr;
}

namespace detail {

namespace {

// chooseGemvConfig's rowTiles and kSplit (the rule: linear_gemv.h).
GemvConfig chooseShape(int32_t n, int32_t k, int64_t sms) {
  const int64_t target = (3 * sms + 1) / 2;       // CTAs wanted: 1.5 per SM
  const int64_t blocks = (int64_t{k} + 31) / 32;  // 32-element K blocks
  int32_t maxSplit = 1;
  while (maxSplit < 8 && int64_t{kGemvWarps} * maxSplit * 2 <= blocks) maxSplit *= 2;
  // The smallest split giving `target` CTAs of `tiles` each, or 0 if none up to maxSplit
  // (reachOrCap: maxSplit then).
  auto splitFor = [&](int64_t tiles, bool reachOrCap) {
    for (int32_t s = 1; s <= maxSplit; s *= 2) {
      if (tiles * s >= target) return s;
    }
    return reachOrCap ? maxSplit : 0;
  };
  // Nothing here depends on m: kSplit fixes which K blocks each warp and CTA sums and in what
  // order, so a row of x gets bit-identical outputs at any m (a verify row equals the decode row).
  const int64_t tiles1 = (int64_t{n} + 15) / 16, tiles2 = (int64_t{n} + 31) / 32;
  const int32_t split1 = splitFor(tiles1, true);
  const int32_t split2 = splitFor(tiles2, false);
  // Two tiles at the one-tile split where they still reach the CTAs wanted.
  if (split2 == split1) return {2, split2};
  // Two tiles at a larger split where the one-tile grid is thin (< 2.5 CTAs an SM) and each warp
  // keeps >= 8 K blocks.
  if (split2 > 0 && tiles1 * split1 * 2 < 5 * sms && int64_t{k} / split2 >= 8 * 32 * kGemvWarps) {
    return {2, split2};
  }
  // Two tiles and no split for a short K where the two-tile grid reaches 31/32 of the SMs.
  if (split1 == 1 && k <= 2048 && tiles2 * 32 >= 31 * sms) return {2, 1};
  return {1, split1};
}

}  // namespace

GemvConfig chooseGemvConfig(int32_t n, int32_t k, int32_t numSms) {
  const int64_t sms = numSms > 0 ? numSms : 1;
  GemvConfig cfg = chooseShape(n, k, sms);
  const int64_t oneTileCtas = (int64_t{n} + 15) / 16 * cfg.kSplit;
  cfg.normCtasPerSm = k >= 2048 && oneTileCtas > 2 * sms ? 3 : 2;
  return cfg;
}

int32_t gemvCtasPerSm(const GemvConfig& cfg, bool norm) {
  if (cfg.rowTiles == 2) return 2;
  if (!norm) return 3;
  return cfg.normCtasPerSm;
}

bool gemvFillsSms(const GemvConfig& cfg, int32_t m, int32_t n, bool norm, int32_t numSms) {
  if (m <= 8) return false;
  const int64_t sms = numSms > 0 ? numSms : 1;
  const int64_t perSm = gemvCtasPerSm(cfg, norm);
  const int64_t ctas = (int64_t{n} + 16 * cfg.rowTiles - 1) / (16 * cfg.rowTiles) * cfg.kSplit;
  return ctas > (perSm - 1) * sms;
}

}  // namespace detail

}  // namespace es::kernel
