#include "runtime/speculation_policy.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"

namespace es::runtime {

int32_t defaultComputeBoundRows(std::string_view backendName) {
  return backendName == "cuda" ? 128 : 1;
}

SpeculationPolicy::SpeculationPolicy(SpeculationPolicyOptions options) : options_(options) {
  constexpr const char* kWhere = "SpeculationPolicy";
  ES_CHECK_ARG(options_.maxWidth >= 1, kWhere, "maxWidth", options_.maxWidth, "must be >= 1");
  ES_CHECK_ARG(options_.maxBatch >= 1, kWhere, "maxBatch", options_.maxBatch, "must be >= 1");
  ES_CHECK_ARG(options_.computeBoundRows >= 1, kWhere, "computeBoundRows",
               options_.computeBoundRows, "must be >= 1");
  ES_CHECK_ARG(options_.explorePeriod >= 0, kWhere, "explorePeriod", options_.explorePeriod,
               "must be >= 0 (0 = never)");
  ES_CHECK_ARG(options_.costSmoothing > 0.0 && options_.costSmoothing <= 1.0, kWhere,
               "costSmoothing", options_.costSmoothing, "must be in (0, 1]");
  ES_CHECK_ARG(options_.acceptDecay > 0.0 && options_.acceptDecay <= 1.0, kWhere, "acceptDecay",
               options_.acceptDecay, "must be in (0, 1]");
  for (int32_t w = 1; w < options_.maxWidth; w *= 2) widths_.push_back(w);
  widths_.push_back(options_.maxWidth);
  reached_.assign(static_cast<size_t>(options_.maxWidth), 0.0);
  passed_.assign(static_cast<size_t>(options_.maxWidth), 0.0);
  const int32_t buckets = bucketOf(options_.maxBatch) + 1;
  cost_.assign(static_cast<size_t>(buckets) * widths_.size(), Cell{});
  choices_.assign(static_cast<size_t>(buckets), 0);
}

int32_t SpeculationPolicy::bucketOf(int32_t batch) const {
  int32_t bucket = 0;
  while ((int32_t{1} << bucket) < batch) ++bucket;
  return bucket;
}

int32_t SpeculationPolicy::indexOf(int32_t width) const {
  const auto it = std::lower_bound(widths_.begin(), widths_.end(), width);
  ES_CHECK_ARG(
      it != widths_.end() && *it == width, "SpeculationPolicy", "width", width,
      "must be one of the policy's widths (1, powers of two, maxWidth = ", options_.maxWidth, ")");
  return static_cast<int32_t>(it - widths_.begin());
}

double SpeculationPolicy::acceptAtLeast(int32_t depth) const {
  double p = 1.0;
  for (int32_t j = 1; j <= std::min(depth, options_.maxWidth - 1); ++j) {
    const size_t i = static_cast<size_t>(j);
    p *= (passed_[i] + kPriorAccept * kPriorWeight) / (reached_[i] + kPriorWeight);
  }
  return depth < options_.maxWidth ? p : 0.0;
}

double SpeculationPolicy::expectedTokens(int32_t width) const {
  double e = 1.0, p = 1.0;
  for (int32_t j = 1; j < std::min(width, options_.maxWidth); ++j) {
    const size_t i = static_cast<size_t>(j);
    p *= (passed_[i] + kPriorAccept * kPriorWeight) / (reached_[i] + kPriorWeight);
    e += p;
  }
  return e;
}

bool SpeculationPolicy::measured(int32_t batch, int32_t width) const {
  const size_t cell =
      static_cast<size_t>(bucketOf(batch)) * widths_.size() + static_cast<size_t>(indexOf(width));
  return cost_[cell].samples > 0;
}

double SpeculationPolicy::stepCost(int32_t batch, int32_t width) const {
  const size_t row = static_cast<size_t>(bucketOf(batch)) * widths_.size();
  const int32_t at = indexOf(width);
  auto rows = [&](int32_t w) {
    return static_cast<double>(std::max(batch * w, options_.computeBoundRows));
  };
  if (cost_[row + static_cast<size_t>(at)].samples > 0) {
    return cost_[row + static_cast<size_t>(at)].seconds;
  }
  // The nearest measured width of the bucket (the narrower one on a tie), scaled by the rows.
  const int32_t n = static_cast<int32_t>(widths_.size());
  for (int32_t d = 1; d < n; ++d) {
    for (int32_t i : {at - d, at + d}) {
      if (i < 0 || i >= n || cost_[row + static_cast<size_t>(i)].samples == 0) continue;
      const int32_t w = widths_[static_cast<size_t>(i)];
      return cost_[row + static_cast<size_t>(i)].seconds * rows(width) / rows(w);
    }
  }
  return rows(width);  // nothing measured: the row model's units rank the widths alike
}

double SpeculationPolicy::score(int32_t batch, int32_t width) const {
  return expectedTokens(width) / stepCost(batch, width);
}

int32_t SpeculationPolicy::bestWidth(int32_t batch) const {
  int32_t best = widths_.front();
  double bestScore = score(batch, best);
  for (size_t i = 1; i < widths_.size(); ++i) {
    const double s = score(batch, widths_[i]);
    if (s > bestScore * (1.0 + kWidthMargin)) {
      best = widths_[i];
      bestScore = s;
    }
  }
  return best;
}

int32_t SpeculationPolicy::choose(int32_t batch) {
  ES_CHECK_ARG(batch >= 1 && batch <= options_.maxBatch, "SpeculationPolicy::choose", "batch",
               batch, "must be in [1, maxBatch = ", options_.maxBatch, "]");
  const int32_t best = bestWidth(batch);
  const int32_t bucket = bucketOf(batch);
  const int64_t n = ++choices_[static_cast<size_t>(bucket)];
  const int32_t count = static_cast<int32_t>(widths_.size());
  if (options_.explorePeriod == 0 || count == 1) return best;
  // While a neighbour of the best width has fewer than kWarmSamples step times in the bucket,
  // explore every kWarmPeriod-th choice (the estimates settle in tens of steps, not hundreds).
  const int32_t at = indexOf(best);
  bool warm = true;
  for (int32_t i : {at - 1, at + 1}) {
    if (i < 0 || i >= count) continue;
    warm = warm &&
           cost_[static_cast<size_t>(bucket) * widths_.size() + static_cast<size_t>(i)].samples >=
               kWarmSamples;
  }
  const int32_t period =
      warm ? options_.explorePeriod : std::min(options_.explorePeriod, kWarmPeriod);
  if (n % period != 0) return best;
  // Alternately the next wider and the next narrower width (the other one at either end).
  const bool wider = (n / period) % 2 == 1;
  int32_t i = wider ? at + 1 : at - 1;
  if (i < 0 || i >= count) i = wider ? at - 1 : at + 1;
  return widths_[static_cast<size_t>(i)];
}

void SpeculationPolicy::observe(int32_t batch, int32_t width, double seconds,
                                const int32_t* counts) {
  const int32_t at = indexOf(width);
  if (seconds >= 0.0 && std::isfinite(seconds)) {
    Cell& c =
        cost_[static_cast<size_t>(bucketOf(batch)) * widths_.size() + static_cast<size_t>(at)];
    // A sample counts at most twice or half the estimate: a step slowed by another process moves
    // it by a bounded amount, a real change still shows within a few steps.
    const double sample =
        c.samples == 0 ? seconds : std::clamp(seconds, c.seconds / 2, c.seconds * 2);
    c.seconds = c.samples == 0 ? sample : c.seconds + options_.costSmoothing * (sample - c.seconds);
    ++c.samples;
  }
  if (width == 1) return;  // a plain step proposes nothing: no acceptance to observe
  for (int32_t j = 1; j < options_.maxWidth; ++j) {
    reached_[static_cast<size_t>(j)] *= options_.acceptDecay;
    passed_[static_cast<size_t>(j)] *= options_.acceptDecay;
  }
  // A sequence that accepted a drafts (count a + 1) reached depths 1 … min(a + 1, W − 1) and
  // passed depths 1 … a.
  for (int32_t s = 0; s < batch; ++s) {
    const int32_t accepted = std::clamp(counts[s], 1, width) - 1;
    for (int32_t j = 1; j <= std::min(accepted + 1, width - 1); ++j) {
      reached_[static_cast<size_t>(j)] += 1.0;
      if (j <= accepted) passed_[static_cast<size_t>(j)] += 1.0;
    }
  }
}

}  // namespace es::runtime
