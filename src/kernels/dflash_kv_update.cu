// DFlash target KV update launcher (spec §2.1); the kernels live in dflash_kv_update_kernel.cuh
// (shared with the benchmark, which times their variants side by side).
//
// Memory bound: per token and head it reads K and V (2·D elements) plus the token's cos/sin row
// and writes K and V to the pool. The 16-byte path gives one thread one rotary pair (or one
// pass-through chunk) of one head, for both planes, so each element is read once; see the kernel
// header for the details.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/dflash_kv_update.h"
#include "kernels/dflash_kv_update_kernel.cuh"

namespace es::kernel {
namespace {

// Pair-kernel variant (bench_dflash_kernels_gpu times all of them against the copy ceiling):
// tokens per thread for large launches (kTokLarge; 1 = 64 registers, 4 CTAs/SM; 2 = ~110
// registers, 2 CTAs/SM, same bytes in flight per SM), and the streaming cache hints on K/V.
// Small (decode) launches always use one token per thread: more threads, shorter chain.
// Measured on the H200 (2026-11-29, T=65536 Hkv 8 D 128, docs/perf.md): plain loads/stores
// 146 us (92.6% of copy) vs 156 us with the streaming hints; two tokens per thread no better.
constexpr int kTokLarge = 1;
constexpr bool kStream = false;
constexpr int32_t kTokLargeMinTokens = 4096;

template <typename T>
void launch(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  if (!validate(p)) return;
  if (kvupdate::pair_path_applies(p)) {
    if (kTokLarge > 1 && p.numDeltaTokens >= kTokLargeMinTokens) {
      kvupdate::launch_pair<kTokLarge, kStream>(p, stream);
    } else {
      kvupdate::launch_pair<1, kStream>(p, stream);
    }
  } else {
    kvupdate::launch_scalar(p, stream);
  }
  ES_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launchDFlashTargetKVCacheUpdate(const DFlashKvUpdateParamsF16& p, cudaStream_t stream) {
  launch(p, stream);
}
void launchDFlashTargetKVCacheUpdate(const DFlashKvUpdateParamsBF16& p, cudaStream_t stream) {
  launch(p, stream);
}

}  // namespace es::kernel
