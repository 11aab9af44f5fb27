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

// The pair kernel with one token per thread (64 registers, 4 CTAs an SM) and plain loads and
// stores: at T = 65536, Hkv 8, D 128 it moves K/V at about 93 % of the device-to-device copy
// rate, and neither two tokens per thread nor the streaming cache hints (the kernel's other
// instances, which bench_dflash_kernels_gpu times beside it) do better.
template <typename T>
void launch(const DFlashTargetKVCacheUpdateParams<T>& p, cudaStream_t stream) {
  if (!validate(p)) return;
  if (kvupdate::pairPathApplies(p)) {
    kvupdate::launchPair<1, false>(p, stream);
  } else {
    kvupdate::launchScalar(p, stream);
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
