#pragma once
// What the decode engine needs from a draft: keep its context in step with the target's
// committed tokens, and propose a block per sequence — on backend memory, so the engine's step
// never needs the host. The DFlash draft is the product's proposer (runtime/dflash_proposer.h);
// the replay proposer (runtime/replay_proposer.h) drives tests and benchmarks at any acceptance.
#include <climits>
#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/dflash_draft.h"
#include "model/target_model.h"

namespace es::runtime {

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;

  // Block size BS: a proposal is BS rows, row 0 re-predicts the anchor, rows 1..BS-1 are drafts.
  virtual int32_t blockSize() const = 0;

  // Limits the engine checks before it starts: rows of one appendContext (a prefill chunk or a
  // verify forward) and sequences of one propose.
  virtual int32_t maxContextRows() const = 0;
  virtual int32_t maxBatch() const = 0;

  // Prefill (host path): the target forward that just ran committed its rows; row r is new
  // context at positions[r] for page-table row owners[r] (-1: padding). Its taps are in place.
  virtual void appendContext(const model::TargetModel& target,
                             const std::vector<int32_t>& positions,
                             const std::vector<int32_t>& owners, kv::KvCacheManager& cache) = 0;

  // Device path, inside the engine's step (may be captured in a CUDA graph: enqueue work only).
  // delta rows are the last target forward's rows with rejected ones turned into padding.
  virtual void appendContext(const model::DraftContextDelta& delta, kv::KvCacheManager& cache) = 0;
  // One block per sequence b (page-table row b): anchors, positions T_b + i, kvLengths
  // T_b + BS; writes the first W = inputs.rowsPerBlock (0: BS) token ids of every block into
  // inputs.argmaxOut [B, W] (row 0 included).
  virtual void propose(const model::DraftProposalInputs& inputs, kv::KvCacheManager& cache) = 0;

  // The last propose's [B, W] rows of f32 logits over the target's vocabulary (backend memory),
  // or null for a proposer without a distribution. With it, sampled requests draw their
  // proposals from the draft's distribution (spec §3.7) instead of taking its argmax.
  virtual const float* proposalLogits() const { return nullptr; }

  // Whether the proposer keeps context K/V in the cache's draft pools: with prefix reuse, such a
  // request needs draft pages and only reuses blocks whose draft context is kept too.
  virtual bool usesDraftCache() const { return false; }

  // Positions the draft can address (its RoPE table); the engine keeps requests within them.
  virtual int32_t maxPositions() const { return INT32_MAX; }

  // Host work before the engine launches a captured step (e.g. page-table uploads). Returns the
  // address of the backend memory that work refreshes (null if none): when it changes, the
  // engine captures its steps again.
  virtual const void* prepareLaunch(kv::KvCacheManager& cache) {
    (void)cache;
    return nullptr;
  }
  // Request `request` (its index: the position in the engine's generate() call, or the index
  // given to DecodeEngine::submit) now occupies page-table row `slot`.
  virtual void onAdmit(int32_t slot, int32_t request) { (void)slot, (void)request; }
  // Slots moved (KvCacheManager::retireAndCompact's oldToNew; -1 = retired).
  virtual void onCompact(const std::vector<int32_t>& oldToNew) { (void)oldToNew; }
};

}  // namespace es::runtime
