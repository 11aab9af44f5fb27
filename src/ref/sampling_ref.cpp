// CPU reference of spec §3.1-3.6: plain loops from the definitions (the descending order is
// sorted only as far as it is read; the results are the full sort's).
//
// Precision: scaled logits and exp weights in fp32 through kernels/sampling_math.h (the same
// operations the kernels use); masses are exact 2^-40 fixed-point integers, so "prefix mass
// reaches p*S" is an exact comparison; a probability is w / W rounded once (double division,
// then to float); the inverse CDF is the fp32 running sum in index order the spec prescribes.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/dtype.h"
#include "common/rng.h"
#include "kernels/sampling.h"
#include "kernels/sampling_math.h"

namespace es::ref {

using namespace es::sampling;

namespace {
// The first `count` ranks of the descending order over `ranks` (composite ranks are unique, so
// this prefix is exactly the full sort's prefix), sorted; the rest of `ranks` in any order.
void sortPrefix(std::vector<uint64_t>& ranks, size_t count) {
  if (count < ranks.size()) {
    std::partial_sort(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(count),
                      ranks.end(), std::greater<uint64_t>());
  } else {
    std::sort(ranks.begin(), ranks.end(), std::greater<uint64_t>());
  }
}
}  // namespace

bool rowProbs(const float* logits, int32_t vocab, float temperature, int32_t topK, float topP,
              TopPMode mode, float* probs) {
  const RowParams rp = makeRowParams(temperature, topK, topP, vocab);
  std::vector<float> s(vocab);
  bool poisoned = false;
  for (int32_t i = 0; i < vocab; ++i) {
    s[i] = scaleLogit(logits[i], rp.invT, rp.greedy);
    poisoned = poisoned || poisonsRow(s[i]);
  }
  // Descending order, ties to the lower index: the composite rank is unique and encodes both.
  // The spec's definition sorts all V ranks; only a prefix of that order is ever read (the top-k
  // set, and for top-p the entries up to the cut), so the ranks are selected and sorted only as
  // far as needed. The results are those of the full sort, bit for bit (the tests compare).
  std::vector<uint64_t> order;
  uint64_t top = 0;
  if (!poisoned) {
    order.resize(vocab);
    for (int32_t i = 0; i < vocab; ++i) {
      order[i] = composite(orderKey(s[i]), i);
      top = std::max(top, order[i]);
    }
  }
  const float rowMax = poisoned ? 0.0f : s[compositeIndex(top)];
  if (poisoned || rowMax == -__builtin_huge_valf()) {
    const float uniform = fdivRn(1.0f, static_cast<float>(vocab));
    for (int32_t i = 0; i < vocab; ++i) probs[i] = uniform;
    return true;
  }
  const int32_t kept = rp.k;  // top-k set: the first `kept` entries of the order
  if (kept < vocab) {         // the set only: its order is settled below where it matters
    std::nth_element(order.begin(), order.begin() + (kept - 1), order.end(),
                     std::greater<uint64_t>());
    order.resize(kept);
  }
  // Each kept entry's mass, by vocabulary index (computed once: the steps below read it again).
  std::vector<uint64_t> mass(vocab);
  auto massAt = [&](uint64_t rank) { return mass[compositeIndex(rank)]; };
  uint64_t total = 0;  // S >= 2^40: the maximum itself has weight exactly 1 (integer: any order)
  for (uint64_t rank : order) {
    const uint32_t i = compositeIndex(rank);
    mass[i] = massOf(expNonpos(fsubRn(s[i], rowMax)));
    total += mass[i];
  }
  for (int32_t i = 0; i < vocab; ++i) probs[i] = 0.0f;
  if (!rp.topPOn) {  // every kept entry survives with its own weight
    for (uint64_t rank : order) probs[compositeIndex(rank)] = probOf(massAt(rank), total);
    return false;
  }
  // Top-p: the smallest prefix of the order whose mass reaches the budget (at least one entry).
  // Sort a prefix of the set and grow it until its mass reaches the budget or it is the whole
  // set (the budget is at most S, so the whole set always reaches it).
  const uint64_t budget = topPBudget(rp.topP, total);
  size_t cut = 0;
  uint64_t beforeCut = 0, running = 0;  // prefix masses before entry cut - 1 and through it
  for (size_t sorted = std::min<size_t>(order.size(), 1024);;
       sorted = std::min(order.size(), sorted * 8)) {
    sortPrefix(order, sorted);  // the sorted prefix only grows; its entries never move
    for (; cut < sorted && (cut == 0 || running < budget); ++cut) {
      beforeCut = running;
      running += massAt(order[cut]);
    }
    if (running >= budget || sorted == order.size()) break;
  }
  // entries [0, cut) survive; the last one's weight depends on the mode
  const uint64_t norm = mode == TopPMode::kNucleus ? running : budget;
  const uint64_t lastWeight = mode == TopPMode::kNucleus ? running - beforeCut : budget - beforeCut;
  for (size_t j = 0; j < cut; ++j) {
    probs[compositeIndex(order[j])] = probOf(j + 1 == cut ? lastWeight : massAt(order[j]), norm);
  }
  return false;
}

int32_t sampleFromProbs(const float* probs, int32_t vocab, float u) {
  float total = 0.0f;
  int32_t lastPositive = -1;
  for (int32_t i = 0; i < vocab; ++i) {
    if (probs[i] > 0.0f) {
      total = faddRn(total, probs[i]);
      lastPositive = i;
    }
  }
  const float threshold = fmulRn(u, total);
  float running = 0.0f;
  for (int32_t i = 0; i < vocab; ++i) {
    if (!(probs[i] > 0.0f)) continue;
    running = faddRn(running, probs[i]);
    if (running > threshold) return i;
  }
  return lastPositive;
}

namespace {
std::vector<float> rowAsF32(const SamplingParams& p, int32_t b) {
  std::vector<float> row(p.vocab);
  const size_t base = static_cast<size_t>(b) * p.vocab;
  if (p.logitsDtype == DType::kF32) {
    const float* x = static_cast<const float*>(p.logits) + base;
    std::copy(x, x + p.vocab, row.begin());
  } else {
    const fp16* x = static_cast<const fp16*>(p.logits) + base;
    for (int32_t i = 0; i < p.vocab; ++i) row[i] = to_float(x[i]);
  }
  return row;
}
}  // namespace

void sampleRows(const SamplingParams& p) {
  validateSamplingParams(p, "ref::sample_rows");
  std::vector<float> probs(p.vocab);
  for (int32_t b = 0; b < p.batch; ++b) {
    const std::vector<float> row = rowAsF32(p, b);
    const int32_t q = b / p.rowsPerRequest;  // the request whose entries this row takes
    const float t = p.temperatures ? p.temperatures[q] : p.temperature;
    const int32_t k = p.topKs ? p.topKs[q] : p.topK;
    const float tp = p.topPs ? p.topPs[q] : p.topP;
    float* out = p.probs ? p.probs + static_cast<size_t>(b) * p.vocab : probs.data();
    const bool uniform = rowProbs(row.data(), p.vocab, t, k, tp, p.topPMode, out);
    if (p.tokens) {
      const uint32_t lane = static_cast<uint32_t>(b % p.rowsPerRequest);
      const float u =
          p.uniforms ? p.uniforms[b] : request_uniform(p.seeds[q], p.positions[q], p.purpose, lane);
      if (uniform) {
        p.tokens[b] = p.flagNonFinite ? kNonFiniteToken : uniformRowToken(u, p.vocab);
      } else {
        p.tokens[b] = sampleFromProbs(out, p.vocab, u);
      }
    }
  }
}

}  // namespace es::ref
