#pragma once
// cp.async (sm_80+): copies from global to shared memory that bypass the registers, in commit
// groups a thread waits for by count. Used by the sampling chunk stage's ring (kernels/
// sampling.cu), by bench_chunk_ring_gpu, which measures that ring's floor, by the wgmma prefill
// attention (kernels/paged_attention_prefill.cu), and (4- and 8-byte copies) for a verification
// row's chain inputs (kernels/spec_verify_device.cuh).
#include <cuda_runtime.h>

#include <cstdint>

namespace es::kernel {

// Copies `bytes` (<= 16) from src to dst and zero-fills the rest of the 16; src is not read when
// bytes == 0. dst and src 16-byte aligned.
__device__ __forceinline__ void cpAsync16(void* dst, const void* src, int bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes)
               : "memory");
}

// The same, asking the L2 to fetch the surrounding 256 bytes (for data read once in order: the
// next copies find it there).
__device__ __forceinline__ void cpAsync16L2(void* dst, const void* src, int bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(bytes)
               : "memory");
}

// The same with dst as a shared-memory address (__cvta_generic_to_shared), for kernels that lay out
// their shared memory by address.
__device__ __forceinline__ void cpAsync16Shared(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

// Copies N (4 or 8) bytes from global to shared memory through L1 (cp.async.ca: below 16 bytes
// only .ca exists). dst and src N-byte aligned.
template <int N>
__device__ __forceinline__ void cpAsyncSmall(void* dst, const void* src) {
  static_assert(N == 4 || N == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d), "l"(src), "n"(N) : "memory");
}

// Closes this thread's current group of copies.
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace es::kernel
