#pragma once
// Helpers shared by the model-forward CPU references (embedding, rmsnorm, qkv_rope_kv_write,
// swiglu, paged_attention, linear): element load/store by runtime DType through the dtype.h
// conversions, and a small std::thread split over independent outputs.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/dtype.h"

namespace es::ref::detail {

// Element i of an f32/f16/bf16 array as float.
inline float load(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return to_float(static_cast<const fp16*>(base)[i]);
    case DType::kBF16: return to_float(static_cast<const bf16*>(base)[i]);
    default: return 0.0f;
  }
}

// Rounds v once to t and stores it as element i.
inline void store(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[i] = v; break;
    case DType::kF16: static_cast<fp16*>(base)[i] = to_fp16(v); break;
    case DType::kBF16: static_cast<bf16*>(base)[i] = to_bf16(v); break;
    default: break;
  }
}

// v rounded to t and back (the value a store followed by a load gives).
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::kF16: return to_float(to_fp16(v));
    case DType::kBF16: return to_float(to_bf16(v));
    default: return v;
  }
}

// Converts n elements starting at element `first` to float.
inline void load_row(const void* base, DType t, int64_t first, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32: {
      const float* s = static_cast<const float*>(base) + first;
      std::copy(s, s + n, dst);
      break;
    }
    case DType::kF16: {
      const fp16* s = static_cast<const fp16*>(base) + first;
      for (int64_t i = 0; i < n; ++i) dst[i] = to_float(s[i]);
      break;
    }
    case DType::kBF16: {
      const bf16* s = static_cast<const bf16*>(base) + first;
      for (int64_t i = 0; i < n; ++i) dst[i] = to_float(s[i]);
      break;
    }
    default: break;
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
