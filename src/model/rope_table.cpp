#include "model/rope_table.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"

namespace es::model {
namespace {

constexpr double kPi = 3.14159265358979323846;

// transformers: base ** (arange(0, dim, 2).float() / dim), in float32 (the inverse frequencies
// are 1 / this).
std::vector<float> positionFrequencies(double theta, int64_t dim) {
  std::vector<float> powers(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    powers[static_cast<size_t>(i)] =
        static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  return powers;
}

float yarnMscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0f : static_cast<float>(0.1 * mscale * std::log(scale) + 1.0);
}

double yarnCorrectionDim(double rotations, int64_t dim, double base, double maxPositions) {
  return (static_cast<double>(dim) * std::log(maxPositions / (rotations * 2.0 * kPi))) /
         (2.0 * std::log(base));
}

}  // namespace

float ropeAttentionFactor(const RopeConfig& rope) {
  if (rope.type != RopeType::kYarn) return 1.0f;
  if (rope.attention_factor) return static_cast<float>(*rope.attention_factor);
  if (rope.mscale && rope.mscale_all_dim && *rope.mscale != 0.0 && *rope.mscale_all_dim != 0.0) {
    return yarnMscale(rope.factor, *rope.mscale) / yarnMscale(rope.factor, *rope.mscale_all_dim);
  }
  return yarnMscale(rope.factor, 1.0);
}

std::vector<float> ropeInverseFrequencies(const RopeConfig& rope, int64_t dim,
                                          int64_t maxPositionEmbeddings) {
  ES_CHECK_ARG(dim > 0 && dim % 2 == 0, "ropeInverseFrequencies", "rotaryDim", dim,
               "must be even and > 0");
  ES_CHECK_ARG(rope.theta > 1.0, "ropeInverseFrequencies", "rope_theta", rope.theta, "must be > 1");
  const std::vector<float> powers = positionFrequencies(rope.theta, dim);
  std::vector<float> inv(powers.size());
  for (size_t i = 0; i < powers.size(); ++i) inv[i] = 1.0f / powers[i];
  const float factor = static_cast<float>(rope.factor);
  switch (rope.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      for (float& f : inv) f /= factor;
      break;
    case RopeType::kLlama3: {
      const double oldContext = static_cast<double>(rope.original_max_position_embeddings);
      ES_CHECK_ARG(oldContext > 0, "ropeInverseFrequencies", "original_max_position_embeddings",
                   oldContext, "must be > 0 for llama3 rope");
      const float lowWavelen = static_cast<float>(oldContext / rope.low_freq_factor);
      const float highWavelen = static_cast<float>(oldContext / rope.high_freq_factor);
      for (float& f : inv) {
        const float wavelen = static_cast<float>(2.0 * kPi) / f;
        const float scaled = wavelen > lowWavelen ? f / factor : f;
        const bool medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen);
        if (medium) {
          const float smooth = (static_cast<float>(oldContext) / wavelen -
                                static_cast<float>(rope.low_freq_factor)) /
                               static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
          f = (1.0f - smooth) * scaled / factor + smooth * scaled;
        } else {
          f = scaled;
        }
      }
      break;
    }
    case RopeType::kYarn: {
      const double original = rope.original_max_position_embeddings > 0
                                  ? static_cast<double>(rope.original_max_position_embeddings)
                                  : static_cast<double>(maxPositionEmbeddings);
      double low = yarnCorrectionDim(rope.beta_fast, dim, rope.theta, original);
      double high = yarnCorrectionDim(rope.beta_slow, dim, rope.theta, original);
      if (rope.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (size_t i = 0; i < inv.size(); ++i) {
        const float extrapolation = inv[i];
        const float interpolation = 1.0f / (factor * powers[i]);
        const float ramp = std::clamp(
            static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
        const float extrapolationFactor = 1.0f - ramp;
        inv[i] = interpolation * (1.0f - extrapolationFactor) + extrapolation * extrapolationFactor;
      }
      break;
    }
  }
  return inv;
}

std::vector<float> buildRopeTable(const RopeConfig& rope, int64_t rotaryDim,
                                  int64_t maxPositionEmbeddings, int64_t maxPositions) {
  ES_CHECK_ARG(maxPositions > 0 && maxPositions <= kMaxPositions, "buildRopeTable", "maxPositions",
               maxPositions, "must be in [1, ", kMaxPositions, "]");
  const std::vector<float> inv = ropeInverseFrequencies(rope, rotaryDim, maxPositionEmbeddings);
  const float attention = ropeAttentionFactor(rope);
  const int64_t half = rotaryDim / 2;
  std::vector<float> table(static_cast<size_t>(maxPositions * rotaryDim));
  for (int64_t pos = 0; pos < maxPositions; ++pos) {
    float* row = table.data() + pos * rotaryDim;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv[static_cast<size_t>(i)];  // f32, as torch
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention;
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention;
    }
  }
  return table;
}

}  // namespace es::model
