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
// The split-KV path is a programmatic dependent (pdl.cuh) with early reads: cuQSeqLens,
// kvLengths, qPositions, packedMask and the page table are read before waiting for the previous
// kernel of the stream, so that kernel must not write them (in the models it is
// qkv_rope_kv_write, which writes q and the pool). When splits are combined, the combine kernel
// lets the NEXT kernel in (pdl.cuh's trigger) at one of three points, chosen on the host:
//   after its stores  when nextFillsSms: that kernel's CTAs need whole SMs, and a combine CTA
//                     still resident would keep one of them out (Qwen3-8B's 16-row verify
//                     forward is about 10 % faster so);
//   before its wait   otherwise for decode rows (maxQSeqLen 1) when PDL is on: that kernel may
//                     then run beside the split kernel until its own wait, so before that wait it
//                     must neither read the split workspace nor write anything the attention
//                     reads (in the models it is the o projection gemv, whose early reads are W
//                     and the residual); Qwen3-0.6B decodes about 1 % faster so;
//   after its wait    otherwise (verify and proposal rows).
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
//
// Two kernels behind one launcher (docs/forward_ops.md, "Attention"):
//   split-KV  (flash-decoding) for f16/bf16 calls with a key bound: one CTA per (sequence, KV
//             head, row block, KV split) with all GQA heads of the KV head packed into
//             tensor-core tiles, so K/V are read once per group; with several splits their fp32
//             partials (max, sum, unnormalised output) go to `workspace` and a small combine
//             kernel merges them. Decode, verify and DFlash blocks (maxQSeqLen <= 16) split the
//             keys; prefill (maxQSeqLen > 16, not kPackedTree) takes one split: its row blocks
//             fill the GPU. A batch-1 verify at head dim 128 with 2+ row tiles may take two
//             16-row tiles per CTA ("Verify row tiles" below). Prefill at head dim 128 with at
//             least 128 packed rows a sequence runs the wgmma kernel of
//             paged_attention_prefill.h instead ("Row tiles" below). Chosen on the host from host
//             values only (batchSize, heads, maxQSeqLen, maxKvLength, workspaceBytes): no device
//             read, CUDA-graph safe. Every mask, window, padding and page-id rule above holds on
//             this path too.
//   simple    one CTA per (query row, query head); every other call (maxKvLength = 0, too small
//             a workspace, f32, kPackedTree with maxQSeqLen > 16, unaligned pointers).
// planPagedAttention says which one a call takes. On the split-KV path the tensor cores multiply
// every key row inside a CTA's key range by its softmax weight, 0 where one row masks it: keys
// below kvLengths[b] must hold finite values (qkv_rope_kv_write wrote them); rows outside the
// range and unmapped pages are zero-filled, never read. A kvLengths[b] above maxKvLength is still
// computed exactly (the bound only sizes the split count).
#include <cstdint>

#include "common/dtype.h"
#include "common/stream.h"

namespace es::kernel {

enum class AttentionMask : int32_t { kCausal, kPackedTree, kBidirectional };

// The paged KV cache one layer reads (tokens per page fixed at 128).
struct PagedKvArgs {
  const void* pool = nullptr;  // [2, numPages, 128, numKVHeads, headDim] dtype
  const int32_t* pageTable =
      nullptr;  // [batchSize, 2, maxPagesPerSeq] i32 (K ids, V ids + numPages)
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
  const int32_t* kvLengths = nullptr;  // [batchSize] i32 keys per sequence (>= its qLen)
  AttentionMask mask = AttentionMask::kCausal;
  const int32_t* packedMask = nullptr;  // [totalQ, ceil(maxQSeqLen/32)] i32, kPackedTree only
  int32_t slidingWindow = 0;            // 0 = none
  int32_t batchSize = 0;                // >= 0; 0 = no-op
  int32_t headDim = 0;                  // 64, 128 or 256
  float scale = 0.0f;                   // softmax scale, usually headDim^-0.5
  DType dtype = DType::kBF16;           // q, out and pool: f32, f16 or bf16
  // Split-KV planning (host values; the defaults keep the simple kernel):
  int32_t maxKvLength = 0;     // >= 0; an upper bound on every kvLengths[b], 0 = unknown
  void* workspace = nullptr;   // device scratch for split partials, 16-byte aligned
  int64_t workspaceBytes = 0;  // >= 0; its size (workspace non-null when > 0)
  // The kernel launched right after this call needs whole SMs for its CTAs (linearFillsSms,
  // linear.h): the split-KV combine then lets it in only after its own stores (see the top).
  bool nextFillsSms = false;
};

// Split-KV limits. The plan fills kSplitKvPlanSMs SMs (the H200's 132; fixed so that the plan
// and the workspace size are pure functions of host values; another GPU only changes the fill).
inline constexpr int32_t kSplitKvMaxQSeqLen = 16;
inline constexpr int32_t kSplitKvMaxSplits = 128;
inline constexpr int32_t kSplitKvPlanSMs = 132;
// Split boundaries: split s of a CTA covers the 64-key tiles [(s0 + s) * T, (s0 + s + 1) * T) of
// its sequence, T = tilesPerSplit, s0 the first such range its rows' keys touch (0 without a
// window); the last split also takes any tiles past that (kvLengths above maxKvLength). T is
// chosen from the batch, the heads, the key bound and the window only, so a query row gets the
// same key ranges, summed in the same order, whatever the other rows of its call; with warpsM 1
// (always at batch 1 with <= 16 rows: one row tile per CTA, or two with decode's per-row
// arithmetic, "Verify row tiles" below) a verify row then equals the decode row at its position
// bit for bit. Once the key bound gives at least kSplitKvMinSplitsBeforeMinTiles splits, each takes
// at least kSplitKvMinTilesPerSplit tiles (a 4k-context batch-1 decode takes 15.0 us with 16
// splits, 19.1 us with 32); below that, smaller splits keep short contexts spread (the random
// Qwen3-0.6B at 384 keys decodes about 6 % faster with 1-tile splits than with 4-tile ones).
inline constexpr int32_t kSplitKvMinTilesPerSplit = 4;
inline constexpr int32_t kSplitKvMinSplitsBeforeMinTiles = 8;
// Row tiles (plan.rowTiles, plan.warpsM; paged_attention_split.h), a function of the shape only:
//   prefill   a call of maxQSeqLen > 16 at head dim 128 whose sequences hold at least 128 packed
//             rows (maxQSeqLen * group) takes the wgmma prefill kernel (paged_attention_prefill.h)
//             with one split, reported as warpsM 4 x rowTiles 2 (128 packed rows per CTA), however
//             few CTAs that makes; other prefill calls take warpsM 4 (or fewer tiles) x rowTiles 1
//             of the split-KV kernel.
//   verify    see below.
//   other     one 16-row tile per warp row: warpsM 1 at batch 1 with <= 16 rows (row
//             invariance), else up to 4 tiles per CTA.
// Verify row tiles: a batch-1 call of <= 16 rows per sequence (any mask, kPackedTree included) at
// head dim 128 whose packed rows (maxQSeqLen * group) need 2 or more 16-row tiles may take 2 tiles
// per CTA with warpsM 1 (plan.rowTiles 2, rowBlocks ceil(tiles / 2)): each warp keeps decode's
// 16-key slice of every 64-key tile for both tiles, so a row's result is the rowTiles-1 (decode)
// kernel's bit for bit and the CTA count halves (the 16-row verify of Qwen3-8B at 4k: 512 CTAs,
// two waves, -> 256, one). The plan takes it only where the one-tile grid (batch x KV heads x
// tiles x splits) is more than one wave of kSplitKvPlanSMs x ctasPerSm CTAs (264 at D 128): fewer,
// fuller CTAs pay only when they save a wave (the Qwen3-8B verify forward at 4k is 3 % faster
// with them; at 128 tokens with a 416-token cache, 224-256 one-tile CTAs in one wave, 1 % slower).

// Which kernel a call takes and, for split-KV, its shape. Host only.
struct PagedAttentionPlan {
  bool splitKv = false;        // the split-KV path runs
  const char* reason = "";     // why it does not (empty when splitKv)
  int32_t numSplits = 0;       // KV splits per (sequence, KV head, row block); 1 = no combine
  int32_t tilesPerSplit = 0;   // 64-key tiles per split (the boundaries above)
  int32_t warpsM = 0;          // warp rows per CTA (1, 2 or 4; 1 for batch-1 calls of <= 16
                               // rows), each of rowTiles 16-row tensor-core tiles
  int32_t rowTiles = 0;        // 16-row tiles per warp row: 1, or 2 (prefill, warpsM 4: 128
                               // rows; or batch-1 verify, warpsM 1: 32 rows)
  int32_t rowBlocks = 0;       // CTAs over the ceil(maxQSeqLen * group / 16) row tiles
  int64_t workspaceBytes = 0;  // partials this call needs (0 when numSplits == 1)
  int64_t splitCtas = 0;       // the split kernel's grid: batch x KV heads x rowBlocks x numSplits
};

bool validate(const PagedAttentionParams& p);

// The launcher's choice for p (validates p first). For tests and benchmarks: forceNumSplits > 0
// replaces the planned split count (clamped to kSplitKvMaxSplits), with tilesPerSplit =
// max(1, tiles / forceNumSplits); a prefill call with forceNumSplits > 1 takes the split-KV kernel
// (the wgmma kernel takes one split only); maxRowTiles 1 keeps one row tile per warp row everywhere
// (the split-KV kernel for prefill too), 2 takes the two-tile verify variant wherever it is built,
// whatever the grid; 0 is the plan's rule ("Row tiles" above).
PagedAttentionPlan planPagedAttention(const PagedAttentionParams& p, int32_t forceNumSplits = 0,
                                      int32_t maxRowTiles = 0);

// Workspace that covers every split-KV call with batchSize <= maxBatchSize, maxQSeqLen <=
// maxQSeqLen, maxKvLength <= maxKvLength and totalQ <= batchSize * maxQSeqLen (or, with
// maxTotalQ > 0, totalQ <= maxTotalQ whatever the batch: for callers that pad totalQ) of one
// head configuration; the model sizes `workspace` with it once at start-up. 0 when no such call
// needs partials (maxKvLength = 0, or every such call runs with one split). A call needs
// numSplits * totalQ * numQHeads * (headDim + 2) * 4 bytes: f32 partial outputs, then
// (max, sum) pairs.
int64_t pagedAttentionWorkspaceBytes(int32_t maxBatchSize, int32_t maxQSeqLen, int32_t numQHeads,
                                     int32_t numKVHeads, int32_t headDim, int32_t maxKvLength,
                                     int32_t maxTotalQ = 0);

void launchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream);

// Tests and benchmarks: the split-KV path with exactly numSplits (1..kSplitKvMaxSplits) splits
// and maxRowTiles as planPagedAttention's; InvalidArgument when planPagedAttention(p, numSplits,
// maxRowTiles) would not take it (the reason is named).
void launchPagedAttentionSplitKv(const PagedAttentionParams& p, int32_t numSplits,
                                 cudaStream_t stream, int32_t maxRowTiles = 0);

}  // namespace es::kernel

namespace es::ref {
void pagedAttention(const kernel::PagedAttentionParams& p);
}
