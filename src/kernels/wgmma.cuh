#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a) primitives: shared-memory matrix descriptors for the
// 128-byte swizzled layout, the fence / commit / wait protocol, and the m64n128k16 bf16/f16
// instructions with fp32 accumulators that the prefill attention kernel uses.
//
// Layout (PTX ISA, "asynchronous warpgroup matrix shared memory layout"): an operand tile is
// stored in 128-byte rows (64 bf16/f16 elements), 8 rows forming a 1024-byte swizzle atom in
// which the 16-byte chunk c of row r sits at chunk position c ^ (r & 7). Atoms must start at a
// 1024-byte aligned shared address (the swizzle is a function of the address bits).
//   K-major (the reduction dim contiguous in a row): 8-row groups SBO = 1024 bytes apart; a k16
//     step inside the 64-element row moves the start address by 32 bytes (LBO unused).
//   MN-major (the output dim contiguous in a row, instruction flag trans-b): rows are 8
//     consecutive k indices 128 bytes apart, 8-k groups SBO bytes apart, and the next 64 columns
//     of N LBO bytes away.
// Accumulator layout of m64nN (fp32, per warp w of the warpgroup, lane = 4 g + t): element
// 4 j + e holds row 16 w + g + 8 (e >> 1), column 8 j + 2 t + (e & 1), i.e. per 8-column block
// the mma.sync m16n8 C fragment; an A operand from registers is per warp the mma.sync m16n8k16
// A fragment of its 16 rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/dtype.h"

namespace es::kernel::wgmma {

// The 64-bit shared-memory matrix descriptor: start address, LBO, SBO (each in 16-byte units,
// 14 bits), swizzle mode 1 = 128-byte swizzle in bits 62-63, base offset 0. A shared address is
// below 2^18 (228 KiB), so the address field is a plain sum: with LBO / SBO compile-time constants
// and a warp-uniform address the compiler can keep the descriptor in uniform registers and add
// offsets there (a masked form would be rebuilt in per-thread registers for every wgmma).
__device__ __forceinline__ uint64_t descSw128(uint32_t smemAddr, uint32_t lboBytes,
                                              uint32_t sboBytes) {
  return ((uint64_t{lboBytes >> 4} << 16) | (uint64_t{sboBytes >> 4} << 32) | (uint64_t{1} << 62)) +
         (smemAddr >> 4);
}

// Orders this thread's register writes (accumulators, register A operands) before the next
// wgmma reads them.
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async after its wait)
// visible to the async proxy that wgmma reads shared memory through.
__device__ __forceinline__ void fenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The compiler does not know that a wgmma writes its accumulators asynchronously: without a
// dependency it could move a read of d above wait() or a write of d below the issue. An empty asm
// that "modifies" every element pins them in place; call it after wait() and before issuing.
template <int N>
__device__ __forceinline__ void fenceOperand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fenceOperand(uint32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// The accumulator registers are named by asm operands, so every element is passed one by one:
// the 64 fp32 accumulators of an m64n128 tile as in-out operands %0 .. %63.
#define ES_WGMMA_D64(d)                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// The instruction texts: TY is "bf16" or "f16"; accumulate / 1 arrive as a predicate.
#define ES_WGMMA_D64_REGS                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define ES_WGMMA_SS_ASM(TY)                                                      \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                   \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " ES_WGMMA_D64_REGS \
  ", %64, %65, p, 1, 1, 0, %67;\n}\n"
#define ES_WGMMA_RS_ASM(TY)                                                      \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                   \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " ES_WGMMA_D64_REGS \
  ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"

// d (+)= A (64 x 16, smem descriptor, K-major) * B (16 x 128, smem descriptor; K-major, or
// MN-major with TRANS_B), fp32 accumulate. accumulate = false overwrites d.
template <typename T, bool TRANS_B>
__device__ __forceinline__ void wgmmaM64n128k16Ss(float (&d)[64], uint64_t aDesc, uint64_t bDesc,
                                                  bool accumulate) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  constexpr int kTransB = TRANS_B ? 1 : 0;
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(ES_WGMMA_SS_ASM("bf16")
                 : ES_WGMMA_D64(d)
                 : "l"(aDesc), "l"(bDesc), "r"(accumulate ? 1 : 0), "n"(kTransB));
  } else {
    asm volatile(ES_WGMMA_SS_ASM("f16")
                 : ES_WGMMA_D64(d)
                 : "l"(aDesc), "l"(bDesc), "r"(accumulate ? 1 : 0), "n"(kTransB));
  }
}

// d += A (64 x 16 from registers: the mma.sync m16n8k16 A fragment of each warp's 16 rows) *
// B (16 x 128, smem descriptor; MN-major with TRANS_B), fp32 accumulate.
template <typename T, bool TRANS_B>
__device__ __forceinline__ void wgmmaM64n128k16Rs(float (&d)[64], const uint32_t (&a)[4],
                                                  uint64_t bDesc) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  constexpr int kTransB = TRANS_B ? 1 : 0;
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(ES_WGMMA_RS_ASM("bf16")
                 : ES_WGMMA_D64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bDesc), "r"(1), "n"(kTransB));
  } else {
    asm volatile(ES_WGMMA_RS_ASM("f16")
                 : ES_WGMMA_D64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bDesc), "r"(1), "n"(kTransB));
  }
}
}  // namespace es::kernel::wgmma

#undef ES_WGMMA_D64
#undef ES_WGMMA_D64_REGS
#undef ES_WGMMA_SS_ASM
#undef ES_WGMMA_RS_ASM
