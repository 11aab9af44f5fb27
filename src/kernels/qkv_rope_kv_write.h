#pragma once
// The attention block's prologue, fused: split the fused QKV projection rows, apply the optional
// per-head q/k RMSNorm (Qwen3), NeoX (rotate-half) RoPE to q and k at each token's absolute
// position, write q out, and write k and v into the paged KV pool through the page table.
//
// Row layout of qkv: [q heads (numQHeads*headDim) | k heads (numKVHeads*headDim) | v heads].
// Rotary convention as spec §2.1: for i < h = rotaryDim/2, with c = cos[pos][i], s = sin[pos][i]:
//   x'[i] = x[i]*c - x[i+h]*s,   x'[i+h] = x[i+h]*c + x[i]*s;  dims >= rotaryDim pass through.
// cos/sin come from a table [maxPositions, rotaryDim] f32 (cos in the first half, sin in the
// second), built once on the host from the model's rope parameters.
// Norms and rotation in fp32, one rounding to dtype at the end. Rows with position < 0 or
// owner < 0 are padding: q rows are written as zeros, nothing goes to the cache. A position
// whose page is unmapped (-1) or out of range is skipped for the cache (like spec §2.1).
// Beyond spec §2.1: a row whose position is >= maxPositions or whose owner is
// >= batchSize is padding too (the kernel cannot throw on device data); the K plane is written only
// for a K id in [0, numPages), the V plane only for a V id in [numPages, 2*numPages), each plane on
// its own, and nothing for pos/128 >= maxPagesPerSeq; q rows of live tokens are written even when
// their page is unmapped. V is a bit copy. The q/k norm is out = (x * 1/sqrt(mean(x^2) + eps)) * w
// (as rmsnorm.h). qOut must not alias qkv.
// Launched as a programmatic dependent (pdl.cuh) with early reads: positions, tokenToSequence,
// the page table, the norm weights and cosSin are read before waiting for the previous kernel of
// the stream, so that kernel must not write them (in the models it is the qkv linear). It lets the
// next kernel in right after its wait.
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

struct QkvRopeKvWriteParams {
  const void* qkv = nullptr;          // [numTokens, (Hq + 2*Hkv) * headDim] dtype
  const void* qNormWeight = nullptr;  // [headDim] dtype, or null (no q norm)
  const void* kNormWeight = nullptr;  // [headDim] dtype, or null (no k norm)
  float normEps = 1e-6f;
  const float* cosSin = nullptr;             // [maxPositions, rotaryDim] f32
  int32_t maxPositions = 0;                  // rows of cosSin; positions must be < this
  const int32_t* positions = nullptr;        // [numTokens] i32 absolute position, < 0 = padding
  const int32_t* tokenToSequence = nullptr;  // [numTokens] i32 page-table row, < 0 = padding
  const int32_t* pageTable =
      nullptr;             // [batchSize, 2, maxPagesPerSeq] i32 (K ids, V ids + numPages)
  void* kvPool = nullptr;  // [2, numPages, 128, Hkv, headDim] dtype, in/out
  void* qOut = nullptr;    // [numTokens, Hq, headDim] dtype
  int32_t numTokens = 0;   // >= 0; 0 = no-op
  int32_t batchSize = 0;   // > 0 when numTokens > 0
  int32_t numQHeads = 0;
  int32_t numKVHeads = 0;  // numQHeads % numKVHeads == 0
  int32_t headDim = 0;     // 64, 128 or 256 (even)
  int32_t rotaryDim = 0;   // even, 0 < rotaryDim <= headDim
  int32_t numPages = 0;
  int32_t maxPagesPerSeq = 0;
  DType dtype = DType::kBF16;  // f32, f16 or bf16
};

bool validate(const QkvRopeKvWriteParams& p);
void launchQkvRopeKvWrite(const QkvRopeKvWriteParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void qkvRopeKvWrite(const kernel::QkvRopeKvWriteParams& p);
}
