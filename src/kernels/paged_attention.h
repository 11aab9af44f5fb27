#pragma once
// Attention of ragged query rows over the paged KV pool (spec §4), one launch for all four
// shapes the runtime needs:
//   prefill   ragged batch of prompts, causal                    mask kCausal
//   decode    one query row per sequence                         mask kCausal
//   verify    S rows per sequence, causal or a tree bit mask     mask kCausal / kPackedTree
//   proposal  a DFlash draft block attending bidirectionally to  mask kBidirectional
//             itself and to all cached context
// The current rows' K/V are already in the pool (written by qkv_rope_kv_write), so keys are
// always read through the page table. GQA: query head h reads KV head h / (Hq / Hkv).
//
// Sequence b owns page-table row b and query rows [cuQSeqLens[b], cuQSeqLens[b+1]). Its keys
// are positions [0, kvLengths[b]); the last qLen_b of them are the rows being processed, so
// past_b = kvLengths[b] - qLen_b. Key j is visible to query row r (position p_r) when j < kvLen_b
// and:
//   kCausal        j <= p_r
//   kPackedTree    j < past_b, or bit (j - past_b) of packedMask row r is set
//   kBidirectional always
// and, with slidingWindow W > 0, also j > p_r - W. Rows with p_r < 0 are padding: zeros out.
// Softmax in fp32 with max subtraction; a row that sees no key gets zeros.
// Refinements (additive, ops engineer): a key whose logical page j/128 is >= maxPagesPerSeq, whose
// K id is outside [0, numPages) or whose V id is outside [numPages, 2*numPages) is not read and
// counts as masked (sliding-window layers clear entries that fell out of the window); a row that
// lies in no sequence's [cuQSeqLens[b], cuQSeqLens[b+1]) gets zeros like a padding row; scale must
// be finite and > 0 (no silent default); out must not alias q; the packed-mask row of query row r
// is packedMask[r * ceil(maxQSeqLen/32) ...], indexed by the global row r.
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

enum class AttentionMask : int32_t { kCausal, kPackedTree, kBidirectional };

// The paged KV cache one layer reads (tokens per page fixed at 128).
struct PagedKvArgs {
  const void* pool = nullptr;          // [2, numPages, 128, numKVHeads, headDim] dtype
  const int32_t* pageTable = nullptr;  // [batchSize, 2, maxPagesPerSeq] i32 (K ids, V ids + numPages)
  int32_t numPages = 0;
  int32_t maxPagesPerSeq = 0;
  int32_t numKVHeads = 0;
};

// Ragged query rows.
struct RaggedQueryArgs {
  const void* q = nullptr;              // [totalQ, numQHeads, headDim] dtype
  void* out = nullptr;                  // [totalQ, numQHeads, headDim] dtype
  const int32_t* cuQSeqLens = nullptr;  // [batchSize + 1] i32, cuQSeqLens[0] = 0, nondecreasing
  const int32_t* qPositions = nullptr;  // [totalQ] i32 absolute position, < 0 = padding row
  int32_t totalQ = 0;                   // = cuQSeqLens[batchSize]
  int32_t maxQSeqLen = 0;               // >= every qLen_b (sizes the mask rows)
  int32_t numQHeads = 0;
};

struct PagedAttentionParams {
  RaggedQueryArgs query;
  PagedKvArgs kv;
  const int32_t* kvLengths = nullptr;   // [batchSize] i32 keys per sequence (>= its qLen)
  AttentionMask mask = AttentionMask::kCausal;
  const int32_t* packedMask = nullptr;  // [totalQ, ceil(maxQSeqLen/32)] i32, kPackedTree only
  int32_t slidingWindow = 0;            // 0 = none
  int32_t batchSize = 0;                // >= 0; 0 = no-op
  int32_t headDim = 0;                  // 64, 128 or 256
  float scale = 0.0f;                   // softmax scale, usually headDim^-0.5
  DType dtype = DType::kBF16;           // q, out and pool: f32, f16 or bf16
};

bool validate(const PagedAttentionParams& p);
void launchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace es::kernel

namespace es::ref {
void pagedAttention(const kernel::PagedAttentionParams& p);
}
