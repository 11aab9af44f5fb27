#pragma once
// The per-step verify-width rule of an adaptive DecodeEngine (EngineOptions::adaptiveWidth):
// before each greedy step the engine asks choose(B) for the rows W each of the B sequences
// verifies, W in widths() = {1, 2, 4, …, maxWidth} (W = 1: a plain step, no proposal), and after
// the step reports its accept counts and wall time (observe()).
//
// The rule: W maximises the expected tokens per second of the batch,
//   score(B, W) = B · E_W / cost(B, W),
// where
//   E_W = 1 + Σ_{k=1}^{W−1} P(accepted drafts ≥ k)   (expected tokens a sequence emits at W),
// with P(accepted ≥ k) = Π_{j≤k} r_j and r_j = P(accepted ≥ j | accepted ≥ j − 1), each r_j a
// ratio of counts over the steps that could observe it (a step of width W observes depths
// j ≤ W − 1 of every sequence whose run reached j − 1), decayed by acceptDecay at every
// speculative step and shrunk towards kPriorAccept by kPriorWeight pseudo-observations, so a
// depth the chosen widths no longer observe drifts back to the prior and gets tried again. cost(B,
// W) is the EWMA of the measured step time in B's bucket (power-of-two buckets: 1, 2, 3–4, 5–8, …)
// at width W, each sample clamped to [1/2, 2] times the estimate; a width not measured in the
// bucket takes the measured cost of the nearest measured width there, scaled by the row model
// rows(n) = max(n, computeBoundRows) (a step of n = B·W rows costs about as much as one of
// computeBoundRows rows until the forward turns compute-bound, then grows with the rows); with
// nothing measured in the bucket, the row model alone ranks the widths. A wider W must beat the
// narrower ones by kWidthMargin, so speculation that does not clearly pay is off (W = 1).
// Exploration keeps the estimates current: every explorePeriod-th choice in a bucket runs a
// neighbour of the best width in widths() (alternately the next wider and the next narrower; W = 2
// when speculation is off), every kWarmPeriod-th while a neighbour has fewer than kWarmSamples
// measured step times there; a fixed schedule, so runs are reproducible. choose() and observe()
// cost a few operations per width.
#include <cstdint>
#include <string_view>
#include <vector>

namespace es::runtime {

struct SpeculationPolicyOptions {
  int32_t maxWidth = 1;  // the widest W (the engine's arena), >= 1
  int32_t maxBatch = 1;  // the largest B choose() sees, >= 1
  // Rows one step computes at about the cost of a single row (the prior's knee).
  int32_t computeBoundRows = 1;
  int32_t explorePeriod = 32;   // every n-th choice of a bucket explores; 0: never
  double costSmoothing = 0.25;  // EWMA weight of a new step time
  double acceptDecay = 0.98;    // per speculative step, on the acceptance counts
};

// The prior knee per backend: a cuda step of up to 64 rows costs about one decode step (the
// forward reads every weight once); the cpu is compute-bound from a few rows.
int32_t defaultComputeBoundRows(std::string_view backendName);

class SpeculationPolicy {
 public:
  static constexpr double kPriorAccept = 0.5;   // r_j before (and long after) any observation
  static constexpr double kPriorWeight = 0.5;   // pseudo-observations of the prior
  static constexpr double kWidthMargin = 0.02;  // a wider W must score this much higher
  // Until both neighbours of the best width have kWarmSamples step times in the bucket, every
  // kWarmPeriod-th choice explores (when explorePeriod is longer).
  static constexpr int64_t kWarmSamples = 3;
  static constexpr int32_t kWarmPeriod = 4;

  // Throws InvalidArgument (naming the option) for a bound out of range.
  explicit SpeculationPolicy(SpeculationPolicyOptions options);

  // The widths choose() picks from: 1, the powers of two below maxWidth, and maxWidth.
  const std::vector<int32_t>& widths() const { return widths_; }
  // W for the next step of `batch` sequences (in [1, maxBatch]).
  int32_t choose(int32_t batch);
  // The best width by the current estimates (choose() without exploration).
  int32_t bestWidth(int32_t batch) const;
  // A step of `batch` sequences at `width` took `seconds` (host wall time, launch to result);
  // counts[s] in [1, width] are the tokens each sequence's verify accepted (the anchor's row
  // included). seconds < 0: the time is not representative (a first run or a graph capture),
  // only the acceptance counts.
  void observe(int32_t batch, int32_t width, double seconds, const int32_t* counts);

  // The estimates the rule uses.
  double acceptAtLeast(int32_t depth) const;            // P(accepted drafts >= depth), depth >= 0
  double expectedTokens(int32_t width) const;           // E_W
  double stepCost(int32_t batch, int32_t width) const;  // measured, else the prior (see above)
  bool measured(int32_t batch, int32_t width) const;

 private:
  int32_t bucketOf(int32_t batch) const;
  int32_t indexOf(int32_t width) const;
  double score(int32_t batch, int32_t width) const;

  SpeculationPolicyOptions options_;
  std::vector<int32_t> widths_;
  std::vector<double> reached_, passed_;  // [maxWidth]: decayed counts per depth j (index j)
  struct Cell {
    double seconds = 0.0;
    int64_t samples = 0;
  };
  std::vector<Cell> cost_;        // [bucket · widths]
  std::vector<int64_t> choices_;  // [bucket]: choose() calls, for the exploration schedule
};

}  // namespace es::runtime
