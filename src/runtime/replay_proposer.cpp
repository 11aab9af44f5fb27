#include "runtime/replay_proposer.h"

#include <algorithm>
#include <string>

#include "common/errors.h"

namespace es::runtime {

ReplayProposer::ReplayProposer(ops::Backend& backend, int32_t blockSize, int32_t maxBatch,
                               std::vector<std::vector<int32_t>> recordings, int32_t vocab,
                               float corruptRate, uint64_t seed)
    : backend_(backend),
      blockSize_(blockSize),
      maxBatch_(maxBatch),
      vocab_(vocab),
      corruptRate_(corruptRate),
      seed_(seed),
      recordings_(std::move(recordings)) {
  constexpr const char* kWhere = "ReplayProposer";
  ES_CHECK_ARG(blockSize >= 2, kWhere, "blockSize", blockSize, "must be >= 2");
  ES_CHECK_ARG(maxBatch >= 1, kWhere, "maxBatch", maxBatch, "must be >= 1");
  ES_CHECK_ARG(vocab >= 1, kWhere, "vocab", vocab, "must be >= 1");
  ES_CHECK_ARG(corruptRate >= 0.0f && corruptRate <= 1.0f, kWhere, "corruptRate", corruptRate,
               "must be in [0, 1]");
  for (size_t r = 0; r < recordings_.size(); ++r) {
    for (int32_t t : recordings_[r]) {
      ES_CHECK_ARG(t >= 0 && t < vocab, kWhere, "recordings[" + std::to_string(r) + "] token", t,
                   "must be in [0, vocab = ", vocab, ")");
    }
    stride_ = std::max<int32_t>(stride_, static_cast<int32_t>(recordings_[r].size()));
  }
  requestOfSlot_.assign(static_cast<size_t>(maxBatch), -1);
  table_ = backend_.allocate((static_cast<int64_t>(maxBatch) * stride_ + maxBatch) * 4);
  block_ = backend_.allocate(static_cast<int64_t>(maxBatch) * blockSize * 4);
  upload();
}

void ReplayProposer::upload() {
  std::vector<int32_t> host(static_cast<size_t>(maxBatch_) * stride_ + maxBatch_, 0);
  for (int32_t s = 0; s < maxBatch_; ++s) {
    const int32_t r = requestOfSlot_[static_cast<size_t>(s)];
    if (r < 0) continue;
    const std::vector<int32_t>& rec = recordings_[static_cast<size_t>(r)];
    std::copy(rec.begin(), rec.end(), host.begin() + static_cast<int64_t>(s) * stride_);
    host[static_cast<size_t>(maxBatch_) * stride_ + s] = static_cast<int32_t>(rec.size());
  }
  backend_.copyFromHost(table_.data(), host.data(), static_cast<int64_t>(host.size()) * 4);
}

void ReplayProposer::onAdmit(int32_t slot, int32_t request) {
  ES_CHECK_ARG(slot >= 0 && slot < maxBatch_, "ReplayProposer::onAdmit", "slot", slot,
               "must be in [0, maxBatch = ", maxBatch_, ")");
  ES_CHECK_ARG(request >= 0 && request < static_cast<int32_t>(recordings_.size()),
               "ReplayProposer::onAdmit", "request", request, "must index the recordings (",
               recordings_.size(), ")");
  requestOfSlot_[static_cast<size_t>(slot)] = request;
  upload();
}

void ReplayProposer::onCompact(const std::vector<int32_t>& oldToNew) {
  std::vector<int32_t> moved(static_cast<size_t>(maxBatch_), -1);
  for (size_t s = 0; s < oldToNew.size() && s < moved.size(); ++s) {
    if (oldToNew[s] >= 0) moved[static_cast<size_t>(oldToNew[s])] = requestOfSlot_[s];
  }
  requestOfSlot_ = std::move(moved);
  upload();
}

void ReplayProposer::propose(const model::DraftProposalInputs& in, kv::KvCacheManager&) {
  const int32_t W = in.rowsPerBlock == 0 ? blockSize_ : in.rowsPerBlock;
  ES_CHECK_ARG(W >= 1 && W <= blockSize_, "ReplayProposer::propose", "rowsPerBlock",
               in.rowsPerBlock, "must be 0 (the block size) or in [1, block size = ", blockSize_,
               "]");
  // The kernel writes whole blocks [B, BS]; a caller of W < BS rows gets their first W rows
  // (the same tokens a full-width proposal has there).
  int32_t* blocks = W == blockSize_ ? in.argmaxOut : block_.as<int32_t>();  // [B, BS] i32
  ES_CHECK_ARG(in.batchSize <= maxBatch_, "ReplayProposer::propose", "batchSize", in.batchSize,
               "must be <= maxBatch = ", maxBatch_);
  backend_.replayProposal({.recorded = table_.as<int32_t>(),
                           .recordedLengths = table_.as<int32_t>() + int64_t{maxBatch_} * stride_,
                           .stride = stride_,
                           .anchors = in.anchors,
                           .positions = in.positions,
                           .out = blocks,
                           .batchSize = in.batchSize,
                           .blockSize = blockSize_,
                           .vocab = vocab_,
                           .corruptRate = corruptRate_,
                           .seed = seed_});
  if (blocks != in.argmaxOut) {
    backend_.copy2D(in.argmaxOut, int64_t{W} * 4, blocks, int64_t{blockSize_} * 4, int64_t{W} * 4,
                    in.batchSize);
  }
}

std::vector<std::vector<int32_t>> ReplayProposer::recordingsOf(
    const std::vector<GenerationRequest>& requests, const std::vector<GenerationResult>& results) {
  ES_CHECK_ARG(results.size() == requests.size(), "ReplayProposer::recordingsOf", "results.size()",
               results.size(), "must equal requests.size() = ", requests.size());
  std::vector<std::vector<int32_t>> recordings;
  recordings.reserve(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    std::vector<int32_t> rec = requests[r].prompt;
    rec.insert(rec.end(), results[r].tokens.begin(), results[r].tokens.end());
    recordings.push_back(std::move(rec));
  }
  return recordings;
}

}  // namespace es::runtime
