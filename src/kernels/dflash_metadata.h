#pragma once
// DFlash per-iteration metadata kernels on the draft side (spec §2.3, §2.4):
//   launchDFlashPrepareProposalInputs  — attention inputs of one draft-block proposal
//   launchDFlashPrepareDeltaMetadata   — positions/owners of the token-major context delta
// Each is one small launch. Packed masks are int32 [rows, ceil(N/32)], word w bit j (LSB first)
// = attends to column 32w + j. Padding rows carry -1.
//
// Plain C++ header: no CUDA headers (the CPU build and the references include it).
#include <cstdint>

#include "common/stream.h"

namespace es::kernel {

// Largest draft block / verify width one launch supports: the block-shaped kernels give each
// sequence one CTA with one thread per block row (CUDA's 1024-thread CTA limit).
inline constexpr int32_t kDFlashMaxBlockSize = 1024;

// Number of int32 words of one packed mask row over n columns.
inline constexpr int32_t dflashMaskWords(int32_t n) { return (n + 31) / 32; }

// §2.3. T_b = oldDraftCacheLengths[b] + deltaLengths[b].
struct DFlashProposalInputsParams {
  const int32_t* oldDraftCacheLengths = nullptr;  // [B] i32 draft cache lengths before the delta
  const int32_t* deltaLengths = nullptr;          // [B] i32 delta tokens per sequence
  int32_t blockSize = 0;                          // BS, 0 < BS <= kDFlashMaxBlockSize
  int32_t* packedAttentionMask = nullptr;         // [B, BS, ceil(BS/32)] i32 out
  int32_t* attentionPosId = nullptr;              // [B, BS] i32 out: T_b + i
  int32_t* contextLengths = nullptr;              // [B] i32 out: T_b + BS
  int32_t* positions = nullptr;                   // [B * BS] i32 out: T_b + i
  int32_t* queryStartOffsets = nullptr;           // [B + 1] i32 out: b * BS
  int32_t* queryLengths = nullptr;                // [B] i32 out: BS
  int32_t* pastLengths = nullptr;                 // [B] i32 out: T_b
  int32_t* attentionSequenceLengths = nullptr;    // [B] i32 out: T_b + BS
  const int32_t* stateIndices = nullptr;          // [B] i32, accepted and unused (may be null)
  bool causalProposalMask = false;                // row i attends to [0, i] instead of [0, BS)
  int32_t batchSize = 0;                          // B >= 0; 0 = no-op
};

// §2.4. Rows r = b * deltaWidth + t.
struct DFlashDeltaMetadataParams {
  const int32_t* oldDraftCacheLengths = nullptr;  // [B] i32
  const int32_t* deltaLengths = nullptr;          // [B] i32
  int32_t deltaWidth = 0;                         // W >= 0 (0 = no-op); B*W must fit int32
  int32_t* deltaPositions = nullptr;              // [B * W] i32 out: old + t, or -1 (padding)
  int32_t* deltaTokenToSequence = nullptr;        // [B * W] i32 out: b, or -1 (padding)
  int32_t batchSize = 0;                          // B >= 0; 0 = no-op
};

// Host validation (every build): throws es::InvalidArgument naming the launcher, the argument,
// its value and the limit; returns false when the call is a no-op.
bool validate(const DFlashProposalInputsParams& p);
bool validate(const DFlashDeltaMetadataParams& p);

// Launchers (CUDA builds): validate, one launch on `stream`, check the launch.
void launchDFlashPrepareProposalInputs(const DFlashProposalInputsParams& p, cudaStream_t stream);
void launchDFlashPrepareDeltaMetadata(const DFlashDeltaMetadataParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {

// CPU references on host pointers: same params, same validation, identical results.
void dflashPrepareProposalInputs(const kernel::DFlashProposalInputsParams& p);
void dflashPrepareDeltaMetadata(const kernel::DFlashDeltaMetadataParams& p);

}  // namespace es::ref
