#pragma once
// Helpers shared by the model-forward CPU references (embedding, rmsnorm, qkv_rope_kv_write,
// swiglu, paged_attention, linear): rounding to a runtime DType, and a split of independent outputs
// over the worker pool. Element loads/stores are common/dtype_convert.h's.
#include <algorithm>
#include <cstdint>

#include "common/dtype.h"
#include "common/dtype_convert.h"
#include "ref/worker_pool.h"

// Marks a hot CPU loop to be compiled twice on x86-64, for AVX2 and for the baseline, one of them
// chosen when the program loads: the binary stays portable (no -march=native) and still uses the
// vector units where they exist.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ES_X86_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ES_X86_CLONES
#endif

namespace es::ref::detail {

// v rounded to t and back (the value a store followed by a load gives).
inline float roundTo(DType t, float v) {
  switch (t) {
    case DType::kF16:
      return to_float(to_fp16(v));
    case DType::kBF16:
      return to_float(to_bf16(v));
    default:
      return v;
  }
}

// Runs fn(begin, end) over [0, count) split into contiguous chunks, one per thread of the CPU
// backend's worker pool (worker_pool.h: hardware_concurrency threads, at most 8, including the
// caller), or inline when the total work (count * costPerItem, roughly in flops) is too small to
// pay for waking workers. The chunks depend only on count and the pool's width, and every output
// is computed by the same code whichever thread runs it.
template <typename Fn>
void parallelFor(int64_t count, int64_t costPerItem, Fn&& fn) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 17;
  WorkerPool& pool = WorkerPool::instance();
  int64_t threads = std::min<int64_t>(pool.width(), count);
  const int64_t work = count * std::max<int64_t>(costPerItem, 1);
  threads = std::min<int64_t>(threads, std::max<int64_t>(work / kMinWorkPerThread, 1));
  if (threads <= 1) {
    if (count > 0) fn(int64_t{0}, count);
    return;
  }
  const int64_t chunk = (count + threads - 1) / threads;
  pool.run(threads, [&](int64_t t) {
    const int64_t b = t * chunk, e = std::min(count, b + chunk);
    if (b < e) fn(b, e);
  });
}

}  // namespace es::ref::detail
