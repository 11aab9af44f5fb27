#pragma once
// The DFlash draft model (spec §5) on an ops backend: a z-lab `DFlashDraftModel` folder (Qwen3
// layers, `fc`, `hidden_norm`, `norm`, no embedding and no lm_head) paired with the TargetModel
// whose embedding table, lm_head and tapped layer outputs it uses. See docs/dflash_draft.md.
//
// Two calls per speculative round (spec §6), both on backend memory with no host round trip:
//   appendContext  context K/V of newly committed target tokens, from the target's taps:
//                  ctx = hidden_norm(fc(concat taps)); per draft layer k = k_norm(k_proj(ctx)),
//                  v = v_proj(ctx), RoPE at the absolute position, written into the draft cache
//                  (kernel of spec §2.1 through ops::Backend::dflashKvUpdate).
//   propose        one block [anchor, mask × (BS−1)] per sequence at positions T_b … T_b+BS−1:
//                  the draft layers with bidirectional attention over the cached context and the
//                  block's own K/V (written at T_b … into the draft cache as scratch beyond the
//                  committed length), final norm, the target's lm_head, argmax of the first W
//                  rows of every block into [B, W] (row 0 included; a verify of width W uses rows
//                  1 … W−1, spec §2.9). W = BS by default; the layers always run all BS rows, but
//                  the lm_head (V × H per row, most of a small draft's work) only the W used.
// The draft never commits: the caller advances cache.commitDraft after propose (spec §6).
#include <cstdint>
#include <filesystem>
#include <vector>

#include "common/buffer.h"
#include "kv/kv_cache_manager.h"
#include "model/backend_page_table.h"
#include "model/linear_weight.h"
#include "model/model_config.h"
#include "model/target_model.h"
#include "ops/backend.h"

namespace es::model {

struct DraftLayerWeights {
  Buffer inputNorm;  // [H]
  Buffer postNorm;   // [H]
  LinearWeight qkv;  // [(Hq + 2 Hkv) D, H]  q_proj | k_proj | v_proj rows (context uses k, v rows)
  Buffer qkvBias;    // [(Hq + 2 Hkv) D] or empty
  Buffer qNorm;      // [D]
  Buffer kNorm;      // [D]
  LinearWeight o;    // [H, Hq D]
  Buffer oBias;      // [H] or empty
  LinearWeight gateUp;  // [2 I, H]  gate_proj | up_proj rows
  Buffer gateUpBias;    // [2 I] or empty
  LinearWeight down;    // [H, I]
  Buffer downBias;      // [H] or empty
};

// One context delta, in backend memory. Delta row r takes its features from row r of `taps`,
// i.e. the delta is the target forward that produced the taps with some rows turned into
// padding: after a prefill, the prefill's own positions/owners; after a verify of S rows per
// sequence, launchDFlashPrepareDeltaMetadata with deltaWidth = S (rows b·S + t, t < accepted).
struct DraftContextDelta {
  const void* taps = nullptr;  // [numTaps, numTokens, H] compute dtype (TargetModel::tapsDevice)
  const int32_t* positions = nullptr;        // [numTokens] i32 absolute position, < 0 = padding
  const int32_t* tokenToSequence = nullptr;  // [numTokens] i32 draft page-table row, < 0 = padding
  int32_t numTokens = 0;                     // rows of the target forward, <= maxContextTokens
};

// One proposal, in backend memory. Sequence b is draft page-table row b (as in TargetModel).
struct DraftProposalInputs {
  const int32_t* anchors = nullptr;  // [B] i32 anchor token per sequence (target vocabulary)
  const int32_t* positions =
      nullptr;  // [B * BS] i32 T_b + i (spec §2.3 `positions`), < 0 = padding
  const int32_t* kvLengths = nullptr;  // [B] i32 T_b + BS (spec §2.3 `contextLengths`)
  int32_t batchSize = 0;               // B, <= maxBatch
  // W: the leading rows of each block the caller uses (the verify width), in [1, BS]; 0 = BS.
  // Only these rows are scored: argmaxOut and the proposal logits hold W rows per block.
  int32_t rowsPerBlock = 0;
  int32_t* argmaxOut = nullptr;  // [B, W] i32 out: argmax of block rows 0 … W−1
};

// Host convenience result.
struct DraftProposal {
  std::vector<int32_t> tokens;  // [B, W] argmax ids, row 0 included (W = rowsPerBlock, default BS)
  std::vector<float> logits;    // [B * W, V] when asked for, else empty
};

class DFlashDraft {
 public:
  // Loads config.json + safetensors from `dir` onto `backend` (the target's backend) and checks
  // the pair: hidden sizes equal, every tap in [0, target layers), fc.weight = [H, taps·H], the
  // mask token inside the target's vocabulary unless `mask_embedding` is shipped, and `target`
  // built with exactly requiredTargetTaps() in that order. Mismatched pairs: InvalidArgument;
  // a draft inconsistent with its own config: FormatError; both name the two folders and field.
  // maxContextTokens bounds the rows of one appendContext; maxBatch the sequences of a propose.
  DFlashDraft(const std::filesystem::path& dir, ops::Backend& backend, const TargetModel& target,
              int32_t maxContextTokens, int32_t maxBatch);

  // The tapped target layers the draft in `draftDir` needs, in fc order: build the TargetModel
  // with these before constructing the draft.
  static std::vector<int32_t> requiredTargetTaps(const std::filesystem::path& draftDir,
                                                 const ModelConfig& targetConfig);
  const std::vector<int32_t>& requiredTargetTaps() const { return taps_; }
  // The block size of the draft in `draftDir` (to size the target's forwards before loading).
  static int32_t blockSizeOf(const std::filesystem::path& draftDir);

  const ModelConfig& config() const { return config_; }
  ops::Backend& backend() const { return backend_; }
  int32_t blockSize() const { return blockSize_; }
  int32_t maskTokenId() const { return maskTokenId_; }
  bool hasMaskEmbedding() const { return hasMaskEmbedding_; }
  int32_t maxContextTokens() const { return maxContextTokens_; }
  int32_t maxBatch() const { return maxBatch_; }
  int32_t maxPositions() const { return maxPositions_; }
  int32_t vocabSize() const { return vocab_; }
  int64_t weightBytes() const { return weightBytes_; }
  int64_t workspaceBytes() const { return workspaceBytes_; }

  // The draft cache shape per draft layer (KvCacheConfig::draftLayers).
  std::vector<kv::KvLayerShape> kvLayerShapes() const;

  // Backend API (see the structs). Checks the sizes it is given on the host; the metadata
  // contents live in backend memory and are not read back. Both only enqueue work once the
  // draft page table is in sync, so they can be captured; a replayed graph does not repeat the
  // page-table upload: call syncPageTable before launching one.
  void appendContext(const DraftContextDelta& delta, kv::KvCacheManager& cache);
  void propose(const DraftProposalInputs& inputs, kv::KvCacheManager& cache);
  const int32_t* syncPageTable(kv::KvCacheManager& cache);
  // [B * W, V] f32 logits of the last propose's scored rows (block b's row i at b·W + i;
  // backend memory).
  const float* logitsDevice() const { return logits_.as<float>(); }

  // Host conveniences (tests, simple callers): metadata validated on the host and uploaded.
  // Taps already in backend memory ([numTaps, T, H], T = positions.size()):
  void appendContext(const void* taps, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& tokenToSequence, kv::KvCacheManager& cache);
  // The same with the taps of `target`'s last forward (the runtime's DraftProposer shape).
  void appendContext(const TargetModel& target, const std::vector<int32_t>& positions,
                     const std::vector<int32_t>& tokenToSequence, kv::KvCacheManager& cache);
  // Taps on the host as floats ([numTaps, T, H], e.g. ForwardResult::taps or a slice of it):
  void appendContextFromHost(const std::vector<float>& taps, const std::vector<int32_t>& positions,
                             const std::vector<int32_t>& tokenToSequence,
                             kv::KvCacheManager& cache);
  // blockStarts[b] = T_b (draft cache length after the delta); block b writes scratch K/V at
  // T_b … T_b + BS − 1 of page-table row b. rowsPerBlock: as in DraftProposalInputs.
  DraftProposal propose(const std::vector<int32_t>& anchors,
                        const std::vector<int32_t>& blockStarts, kv::KvCacheManager& cache,
                        bool wantLogits = false, int32_t rowsPerBlock = 0);

 private:
  void checkPair(const TargetModel& target, const std::filesystem::path& dir);
  void loadWeights(const std::filesystem::path& dir, const TargetModel& target);
  void allocateWorkspace();
  void checkCache(const kv::KvCacheManager& cache, const char* where) const;
  int32_t* uploadMeta(const std::vector<int32_t>& host);

  ModelConfig config_;
  std::string targetSource_;
  ops::Backend& backend_;
  DType dtype_;
  int32_t maxContextTokens_;
  int32_t maxBatch_;
  int32_t blockSize_ = 0;
  int32_t maskTokenId_ = -1;
  bool hasMaskEmbedding_ = false;
  int32_t vocab_ = 0;         // the target's
  int32_t maxPositions_ = 0;  // rows of the draft's RoPE table
  std::vector<int32_t> taps_;
  int64_t weightBytes_ = 0;
  int64_t workspaceBytes_ = 0;

  // Weights: the draft's own, plus the target's embedding table and lm_head (not copied).
  LinearWeight fc_;    // [H, taps H]
  Buffer hiddenNorm_;  // [H]
  Buffer finalNorm_;   // [H]
  std::vector<DraftLayerWeights> layers_;
  Buffer ropeTable_;                   // [maxPositions, D] f32, the draft's own rope config
  const void* targetEmbed_ = nullptr;  // [V, H]
  const LinearWeight* targetLmHead_ = nullptr;  // [V, H]

  // Constants: block rows r = b·BS + i.
  Buffer blockConst_;  // i32: owners [maxBatch·BS] = b | cuQ [maxBatch + 1] = b·BS | gather
                       // [maxBatch·BS]
  Buffer blockRows_;   // [maxBatch + 1, H]: anchor embeddings, then the mask embedding (last row)

  // Workspace. Context path (maxContextTokens rows):
  Buffer concat_, ctx_, kDelta_, vDelta_, cosSin_, hostTaps_;
  // Block path (maxBatch·BS rows):
  // (logits_: [maxBatch·BS, V] f32, of which a propose of W rows per block uses [B·W, V].)
  Buffer residual_, normed_, qkv_, q_, attn_, tmp_, gateUp_, act_, logits_;
  Buffer attnSplit_;  // split-KV attention partials (CUDA backend; empty when none are needed)
  Buffer meta_;       // i32 host-convenience metadata
  BackendPageTable pageTable_;  // backend copy of the draft page table
};

}  // namespace es::model
