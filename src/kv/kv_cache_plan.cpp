#include "kv/kv_cache_plan.h"

#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.h"
#include "kv/page_geometry.h"
#include "kv/prefix_cache.h"

namespace es::kv {
namespace {

constexpr int32_t kMaxKvHeads = 1024;
constexpr int32_t kMaxHeadDim = 1024;
constexpr int64_t kArenaAlignment = 256;

int64_t layerBytes(int32_t numPages, const KvLayerShape& shape, DType dtype) {
  // 2 planes * pages * 128 tokens * heads * dim * element: bounded by the checks on every
  // factor (< 2^31 * 2^7 * 2^10 * 2^10 * 2^3 * 2 = 2^62), so int64 cannot overflow.
  return int64_t{2} * numPages * kTokensPerPage * shape.numKvHeads * shape.headDim *
         dtype_size(dtype);
}

void checkShape(const KvLayerShape& s, const std::string& name) {
  ES_CHECK_ARG(s.numKvHeads > 0 && s.numKvHeads <= kMaxKvHeads, "planKvCache", name + ".numKvHeads",
               s.numKvHeads, "must be in [1, ", kMaxKvHeads, "]");
  ES_CHECK_ARG(s.headDim > 0 && s.headDim <= kMaxHeadDim && s.headDim % 8 == 0, "planKvCache",
               name + ".headDim", s.headDim, "must be a multiple of 8 in [8, ", kMaxHeadDim,
               "] (rows are moved in 16-byte vectors)");
}

}  // namespace

KvCachePlan planKvCache(const KvCacheConfig& c) {
  ES_CHECK_ARG(c.maxBatchSize > 0, "planKvCache", "maxBatchSize", c.maxBatchSize, "must be > 0");
  ES_CHECK_ARG(c.maxSequenceLength > 0 && c.maxSequenceLength <= kMaxKvCacheCapacity, "planKvCache",
               "maxSequenceLength", c.maxSequenceLength, "must be in [1, ", kMaxKvCacheCapacity,
               "]");
  ES_CHECK_ARG(c.dtype == DType::kF32 || c.dtype == DType::kF16 || c.dtype == DType::kBF16,
               "planKvCache", "dtype", dtype_name(c.dtype), "must be f32, f16 or bf16");
  ES_CHECK_ARG(!c.baseLayers.empty(), "planKvCache", "baseLayers.size()", 0, "must be > 0");
  ES_CHECK_ARG(c.memoryBudgetBytes >= 0, "planKvCache", "memoryBudgetBytes", c.memoryBudgetBytes,
               "must be >= 0");

  KvCachePlan plan{};
  plan.maxBatchSize = c.maxBatchSize;
  plan.dtype = c.dtype;
  plan.capacityPadded = padKvCacheCapacity(c.maxSequenceLength);
  plan.maxPagesPerSeq = computeMaxPagesPerSeq(c.maxSequenceLength);
  const int64_t minimumPages = computeMinimumKvPoolPages(c.maxBatchSize, c.maxSequenceLength);
  ES_CHECK_ARG(c.numPages == 0 || c.numPages >= minimumPages, "planKvCache", "numPages", c.numPages,
               "must be 0 (minimum) or >= computeMinimumKvPoolPages (", minimumPages, ")");
  ES_CHECK_ARG(c.prefixCachePages >= 0, "planKvCache", "prefixCachePages", c.prefixCachePages,
               "must be >= 0 (0 = prefix reuse off)");
  if (c.prefixCachePages > 0) {
    ES_CHECK_ARG(c.numPages == 0, "planKvCache", "numPages", c.numPages,
                 "must be 0 when prefixCachePages (", c.prefixCachePages, ") sizes the pool");
    checkedPoolPages(minimumPages, "numPages");
    ES_CHECK_ARG(c.prefixCachePages <= kMaxKvPoolPages - minimumPages, "planKvCache",
                 "prefixCachePages", c.prefixCachePages,
                 "must be <= ", kMaxKvPoolPages - minimumPages,
                 " (kMaxKvPoolPages less the minimum pool of ", minimumPages, " pages)");
  }
  const int64_t poolPages =
      c.prefixCachePages > 0
          ? computePrefixCachePoolPages(c.maxBatchSize, c.maxSequenceLength, c.prefixCachePages)
      : c.numPages == 0 ? minimumPages
                        : c.numPages;
  plan.numPages = checkedPoolPages(poolPages, "numPages");
  plan.prefixCachePages = static_cast<int32_t>(c.prefixCachePages);

  // Reduced layers share one bounded pool, so they must agree on the window.
  std::vector<int32_t> markers;  // the base layers' markers, explicit or from their windows
  for (size_t i = 0; i < c.baseLayers.size(); ++i) {
    const KvLayerShape& s = c.baseLayers[i];
    const std::string name = "baseLayers[" + std::to_string(i) + "]";
    checkShape(s, name);
    ES_CHECK_ARG(s.slidingWindow >= 0, "planKvCache", name + ".slidingWindow", s.slidingWindow,
                 "must be >= 0 (0 = full attention)");
    const bool bounded = c.slidingWindowStorage == SlidingWindowStorage::kBounded &&
                         s.slidingWindow > 0 && s.slidingWindow < c.maxSequenceLength;
    markers.push_back(s.kvCacheCapacity != 0 ? s.kvCacheCapacity : bounded ? s.slidingWindow : 0);
    const int32_t cap = resolveKvCacheCapacity(markers.back(), c.maxSequenceLength);
    if (cap < c.maxSequenceLength) {
      ES_CHECK_ARG(plan.slidingWindow == 0 || plan.slidingWindow == cap, "planKvCache",
                   name + ".kvCacheCapacity", cap,
                   "differs from an earlier reduced layer's capacity (", plan.slidingWindow,
                   "): reduced layers must share one window");
      plan.slidingWindow = cap;
    }
  }
  // Reused pages would need the bounded pool's window pages too; not supported yet.
  ES_CHECK_ARG(c.prefixCachePages == 0 || plan.slidingWindow == 0, "planKvCache",
               "prefixCachePages", c.prefixCachePages,
               "must be 0 with sliding-window (reduced) layers: prefix reuse needs full-capacity "
               "layers only (slidingWindowStorage = kFullCapacity stores them so)");
  if (plan.slidingWindow > 0) {
    plan.numSwaPages = checkedPoolPages(
        computeMinimumSwaPoolPages(c.maxBatchSize, plan.slidingWindow), "numSwaPages");
    plan.swaPrivatePagesPerSlot = static_cast<int32_t>(
        computeSwaPrivatePagesPerSlot(plan.slidingWindow, kTokensPerPage, kSwaReplacementPages));
  }

  int64_t offset = 0;
  auto place = [&](const KvLayerShape& s, bool reduced) {
    KvLayerPlan lp{};
    lp.numKvHeads = s.numKvHeads;
    lp.headDim = s.headDim;
    lp.capacity = reduced ? plan.slidingWindow : c.maxSequenceLength;
    lp.reduced = reduced;
    lp.numPages = reduced ? plan.numSwaPages : plan.numPages;
    lp.bytes = layerBytes(lp.numPages, s, c.dtype);
    lp.offset = offset;
    ES_CHECK_ARG(lp.bytes <= std::numeric_limits<int64_t>::max() - offset - kArenaAlignment,
                 "planKvCache", "total bytes", offset, "overflows int64");
    offset += (lp.bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    return lp;
  };
  for (size_t i = 0; i < c.baseLayers.size(); ++i) {
    plan.base.push_back(
        place(c.baseLayers[i], isReducedKvCacheCapacity(markers[i], c.maxSequenceLength)));
  }
  for (size_t i = 0; i < c.draftLayers.size(); ++i) {
    const KvLayerShape& s = c.draftLayers[i];
    const std::string name = "draftLayers[" + std::to_string(i) + "]";
    checkShape(s, name);
    ES_CHECK_ARG(!isReducedKvCacheCapacity(s.kvCacheCapacity, c.maxSequenceLength), "planKvCache",
                 name + ".kvCacheCapacity", s.kvCacheCapacity,
                 "must be 0 or maxSequenceLength: draft layers attend over the full context");
    ES_CHECK_ARG(s.slidingWindow == 0, "planKvCache", name + ".slidingWindow", s.slidingWindow,
                 "must be 0: draft layers attend over the full context");
    plan.draft.push_back(place(s, false));
  }
  plan.totalBytes = offset;
  for (const auto* layers : {&plan.base, &plan.draft}) {
    for (const KvLayerPlan& l : *layers) {
      if (!l.reduced) plan.prefixCacheBytes += l.bytes / l.numPages * plan.prefixCachePages;
    }
  }
  ES_CHECK_ARG(c.memoryBudgetBytes == 0 || plan.totalBytes <= c.memoryBudgetBytes, "planKvCache",
               "memoryBudgetBytes", c.memoryBudgetBytes, "is below the ", plan.totalBytes,
               " bytes the KV cache needs");
  return plan;
}

std::string KvCachePlan::describe() const {
  std::ostringstream os;
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  os << "KV cache plan: batch " << maxBatchSize << ", capacity " << capacityPadded
     << " tokens/slot (" << maxPagesPerSeq << " pages of " << kTokensPerPage << "), "
     << dtype_name(dtype) << "\n";
  os << "  full pool: " << numPages << " pages";
  if (numSwaPages > 0) {
    os << "; sliding-window pool: " << numSwaPages << " pages (window " << slidingWindow << ", "
       << swaPrivatePagesPerSlot << " private pages per slot)";
  }
  os << "\n";
  if (prefixCachePages > 0) {
    os << "  prefix reuse: " << prefixCachePages << " retained pages beyond the minimum of "
       << numPages - prefixCachePages << " (" << std::fixed << std::setprecision(2)
       << mib(prefixCacheBytes) << " MiB)\n";
  }
  os << "  layers          kind   kv_heads  head_dim  pages  MiB/layer\n";
  // Consecutive layers of identical shape share one row.
  auto rows = [&](const std::vector<KvLayerPlan>& layers, const std::string& prefix) {
    for (size_t first = 0; first < layers.size();) {
      const KvLayerPlan& l = layers[first];
      size_t last = first;
      while (last + 1 < layers.size() && layers[last + 1].reduced == l.reduced &&
             layers[last + 1].numKvHeads == l.numKvHeads && layers[last + 1].headDim == l.headDim) {
        ++last;
      }
      const std::string name = prefix + std::to_string(first) +
                               (last > first ? "-" + std::to_string(last) : std::string());
      os << "  " << std::left << std::setw(14) << name << "  " << std::setw(5)
         << (l.reduced ? "swa" : "full") << std::right << std::setw(10) << l.numKvHeads
         << std::setw(10) << l.headDim << std::setw(7) << l.numPages << std::setw(11) << std::fixed
         << std::setprecision(2) << mib(l.bytes) << "\n";
      first = last + 1;
    }
  };
  rows(base, "base.");
  rows(draft, "draft.");
  os << "  total: " << totalBytes << " bytes (" << std::fixed << std::setprecision(2)
     << mib(totalBytes) << " MiB)\n";
  return os.str();
}

nlohmann::json KvCachePlan::toJson() const {
  auto layers = [](const std::vector<KvLayerPlan>& ls) {
    nlohmann::json a = nlohmann::json::array();
    for (const KvLayerPlan& l : ls) {
      a.push_back({{"num_kv_heads", l.numKvHeads},
                   {"head_dim", l.headDim},
                   {"capacity", l.capacity},
                   {"reduced", l.reduced},
                   {"num_pages", l.numPages},
                   {"bytes", l.bytes}});
    }
    return a;
  };
  return {{"max_batch_size", maxBatchSize},
          {"capacity_padded", capacityPadded},
          {"max_pages_per_seq", maxPagesPerSeq},
          {"tokens_per_page", kTokensPerPage},
          {"num_pages", numPages},
          {"num_swa_pages", numSwaPages},
          {"sliding_window", slidingWindow},
          {"swa_private_pages_per_slot", swaPrivatePagesPerSlot},
          {"prefix_cache_pages", prefixCachePages},
          {"prefix_cache_bytes", prefixCacheBytes},
          {"dtype", std::string(dtype_name(dtype))},
          {"base_layers", layers(base)},
          {"draft_layers", layers(draft)},
          {"total_bytes", totalBytes}};
}

}  // namespace es::kv
