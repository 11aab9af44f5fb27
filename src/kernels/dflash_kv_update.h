#pragma once
// DFlash target-context KV cache update (spec §2.1) and the RoPE-capacity check (spec §2.2).
//
// For every delta token r (token-major rows of the draft's context delta), rotate K with NeoX
// (rotate-half) RoPE over the first rotaryDim dims, copy V, and write both through the page table
// into the paged pool [2, numPages, 128, Hkv, D]. Padding rows and unmapped pages are skipped,
// each cache plane on its own.
//
// Plain C++ header: no CUDA headers (the CPU build and the reference include it).
#include <cstdint>

#include "common/dtype.h"
#include "common/kv_page.h"
#include "common/stream.h"

namespace es::kernel {

// Page geometry: es::kv::kTokensPerPage (128 tokens per page, fixed by the pool layout) and
// es::kv::kMaxKvPoolPages (largest K-page count whose V ids k + numPages stay positive int32),
// both from kv/page_geometry.h (spec §1.1).

// T is the cache element type: es::fp16 or es::bf16; float only for the CPU
// reference (the CPU backend keeps its KV cache in f32; the CUDA kernel has no f32 instance).
template <typename T>
struct DFlashTargetKVCacheUpdateParams {
  const T* kDelta = nullptr;  // [numDeltaTokens, numKVHeads, headDim] T, k-normed, no RoPE
  const T* vDelta = nullptr;  // [numDeltaTokens, numKVHeads, headDim] T
  T* kvCache = nullptr;       // [2, numPages, 128, numKVHeads, headDim] T, in/out
  const float* tokenAlignedCosSin = nullptr;  // [numDeltaTokens, rotaryDim] f32: cos | sin halves
  const int32_t* deltaPositions =
      nullptr;  // [numDeltaTokens] i32 absolute positions, < 0 = padding
  const int32_t* deltaTokenToSequence = nullptr;  // [numDeltaTokens] i32 owner slot, < 0 = padding
  const int32_t* pageTable =
      nullptr;                 // [batchSize, 2, maxPagesPerSeq] i32: K ids, V ids (+numPages)
  int32_t numDeltaTokens = 0;  // T, physical rows; 0 = no-op
  int32_t batchSize = 0;       // active sequences; 0 = no-op
  int32_t numKVHeads = 0;      // Hkv > 0
  int32_t headDim = 0;         // D > 0
  int32_t rotaryDim = 0;       // even, 0 < rotaryDim <= headDim
  int32_t numPages = 0;        // K pages per plane, 0 < numPages <= kv::kMaxKvPoolPages
  int32_t maxPagesPerSeq = 0;  // page-table row length > 0
};

using DFlashKvUpdateParamsF16 = DFlashTargetKVCacheUpdateParams<fp16>;
using DFlashKvUpdateParamsBF16 = DFlashTargetKVCacheUpdateParams<bf16>;
// CPU backend only (ref::dflashTargetKVCacheUpdate); the CUDA backend rejects it.
using DFlashKvUpdateParamsF32 = DFlashTargetKVCacheUpdateParams<float>;

// Host validation (every build). Throws es::InvalidArgument naming launchDFlashTargetKVCacheUpdate,
// the argument, its value and the limit. Returns false when the call is a no-op (T or B is 0).
bool validate(const DFlashKvUpdateParamsF16& p);
bool validate(const DFlashKvUpdateParamsBF16& p);
bool validate(const DFlashKvUpdateParamsF32& p);

// Validates, then launches one kernel on `stream` (CUDA builds only).
void launchDFlashTargetKVCacheUpdate(const DFlashKvUpdateParamsF16& p, cudaStream_t stream);
void launchDFlashTargetKVCacheUpdate(const DFlashKvUpdateParamsBF16& p, cudaStream_t stream);

// Host only (spec §2.2): the RoPE cos/sin cache may be sized to the unpadded maximum sequence
// length, so it may be shorter than the page-padded KV capacity; throw (es::InvalidArgument, a
// std::runtime_error) only if cosSinSeqLen > kvCapacity.
void checkDFlashRopeCapacity(int32_t cosSinSeqLen, int32_t kvCapacity);

}  // namespace es::kernel

namespace es::ref {

// CPU reference of launchDFlashTargetKVCacheUpdate on host pointers: same params, same validation,
// fp32 math (k*cos - k'*sin with two products and one add), one rounding to the cache type.
void dflashTargetKVCacheUpdate(const kernel::DFlashKvUpdateParamsF16& p);
void dflashTargetKVCacheUpdate(const kernel::DFlashKvUpdateParamsBF16& p);
// f32 cache (the CPU backend's): the same fp32 math; the final rounding is the identity.
void dflashTargetKVCacheUpdate(const kernel::DFlashKvUpdateParamsF32& p);

}  // namespace es::ref
