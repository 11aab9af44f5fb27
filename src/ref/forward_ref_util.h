#pragma once
// Helpers shared by the model-forward CPU references (embedding, rmsnorm, qkv_rope_kv_write,
// swiglu, paged_attention, linear): rounding to a runtime DType, and a small std::thread split
// over independent outputs. Element loads/stores are common/dtype_convert.h's.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/dtype_convert.h"

namespace es::ref::detail {

// v rounded to t and back (the value a store followed by a load gives).
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::kF16: return to_float(to_fp16(v));
    case DType::kBF16: return to_float(to_bf16(v));
    default: return v;
  }
}

// Runs fn(begin, end) over [0, count) split into contiguous chunks on up to hardware_concurrency
// threads (at most 8), or inline when the total work (count * costPerItem, roughly in flops) is
// too small to pay for starting threads.
template <typename Fn>
void parallel_for(int64_t count, int64_t costPerItem, Fn&& fn) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 17;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  int64_t threads = std::min<int64_t>({int64_t{hw}, int64_t{8}, count});
  const int64_t work = count * std::max<int64_t>(costPerItem, 1);
  threads = std::min<int64_t>(threads, std::max<int64_t>(work / kMinWorkPerThread, 1));
  if (threads <= 1) {
    if (count > 0) fn(int64_t{0}, count);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  const int64_t chunk = (count + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(count, b + chunk);
    if (b < e) pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(int64_t{0}, std::min(count, chunk));
  for (auto& th : pool) th.join();
}

}  // namespace es::ref::detail
