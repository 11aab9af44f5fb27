#pragma once
// Shared-memory mbarriers (sm_80+; PTX "mbarrier") and the named-barrier arrive, for kernels whose
// warpgroups must not wait for each other at a block barrier: a producer/consumer ring signals
// "stage full" and "stage free" through an mbarrier per stage, and each phase of a barrier
// completes when its expected number of arrivals has come in. Used by the wgmma prefill attention
// (kernels/paged_attention_prefill.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace es::kernel::mbar {

// Sets up the barrier at shared address `bar` (8 bytes, 8-byte aligned) for `count` arrivals a
// phase. Other threads may use it after a block barrier.
__device__ __forceinline__ void init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One arrival (release: this thread's earlier shared-memory accesses happen before the phase
// completes).
__device__ __forceinline__ void arrive(uint32_t bar) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(bar)
      : "memory");
}

// One arrival made when every cp.async this thread issued before it has landed (the thread does
// not wait). The barrier's count must include it (.noinc).
__device__ __forceinline__ void arriveOnCopies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Waits (acquire) until the phase of parity `parity` (0 for the first phase, 1 for the second,
// 0 again for the third, ...) has completed.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_AGAIN:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_AGAIN;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) for `threads` threads: arrive without waiting,
// or arrive and wait until all have arrived.
__device__ __forceinline__ void namedArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void namedSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace es::kernel::mbar
