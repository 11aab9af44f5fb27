#pragma once
// Sizing of the paged KV cache from a model shape and limits (spec §1.1, §1.4), done on the host
// before any allocation, so an impossible configuration fails with a clear error first.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace es::kv {

// One attention layer's KV shape. kvCacheCapacity is the per-layer marker of spec §1.1:
// 0 = the engine's full capacity; a smaller value marks a sliding-window (reduced) layer.
// slidingWindow is the layer's attention window (0 = full attention): with a 0 marker the plan
// derives the marker from it (reduced when the window is below maxSequenceLength and
// KvCacheConfig::slidingWindowStorage is kBounded), so a model can describe its layers without
// knowing the cache's capacity.
struct KvLayerShape {
  int32_t numKvHeads = 0;
  int32_t headDim = 0;
  int32_t kvCacheCapacity = 0;
  int32_t slidingWindow = 0;
};

// Where sliding-window layers (KvLayerShape::slidingWindow) are stored: in the bounded window
// pool, or at full capacity like every other layer (the window is then only an attention mask;
// tests compare the two, and prefix reuse needs it).
enum class SlidingWindowStorage { kBounded, kFullCapacity };

struct KvCacheConfig {
  int32_t maxBatchSize = 0;
  int32_t maxSequenceLength = 0;          // tokens one slot can hold (page-padded by the plan)
  DType dtype = DType::kBF16;             // f32 (CPU backend), f16 or bf16
  std::vector<KvLayerShape> baseLayers;   // the target model
  std::vector<KvLayerShape> draftLayers;  // the DFlash draft (empty: no draft cache)
  int64_t numPages = 0;                   // K pages of the full-capacity pool; 0 = the minimum
  // Prefix reuse (spec §1.4, retained pages): pages beyond computeMinimumKvPoolPages that hold
  // records of finished requests' prompt blocks; > 0 turns reuse on and sizes the pool as
  // computePrefixCachePoolPages (numPages must then be 0). 0 = off.
  int64_t prefixCachePages = 0;
  int64_t memoryBudgetBytes = 0;  // 0 = no budget; else the plan must fit in it
  SlidingWindowStorage slidingWindowStorage = SlidingWindowStorage::kBounded;
};

struct KvLayerPlan {
  int32_t numKvHeads;
  int32_t headDim;
  int32_t capacity;  // resolved marker
  bool reduced;      // sliding-window layer using the bounded pool
  int32_t numPages;  // K pages of this layer's pool ([2, numPages, 128, Hkv, D])
  int64_t bytes;
  int64_t offset;  // byte offset in the manager's arena (256-byte aligned)
};

struct KvCachePlan {
  int32_t maxBatchSize;
  int32_t capacityPadded;  // per-slot token capacity, a multiple of 128
  int32_t maxPagesPerSeq;
  int32_t numPages;          // full-capacity pool pages (base and draft pools)
  int32_t prefixCachePages;  // of which retained for prefix reuse (0: reuse off)
  int64_t prefixCacheBytes;  // their memory: every full-capacity base and draft layer
  int32_t numSwaPages;       // bounded pool pages, 0 when no layer is reduced
  int32_t slidingWindow;     // the reduced layers' common capacity, 0 when none
  int32_t
      swaPrivatePagesPerSlot;  // computeSwaPrivatePagesPerSlot(slidingWindow, 128, 1), 0 when none
  DType dtype;
  std::vector<KvLayerPlan> base;
  std::vector<KvLayerPlan> draft;
  int64_t totalBytes;

  std::string describe() const;  // human-readable table
  nlohmann::json toJson() const;
};

// Validates the configuration and computes every size; throws InvalidArgument naming the
// field, value and limit. Allocates nothing.
KvCachePlan planKvCache(const KvCacheConfig& config);

}  // namespace es::kv
