#pragma once
// The engine thread. runtime::DecodeEngine is single-threaded, so exactly one thread (started
// here) calls its submit(), cancel() and step(). HTTP handler threads post submits and cancels
// into a mutex-protected inbox; the loop drains the inbox between steps, runs step() while
// requests are running or queued, and sleeps on a condition variable when idle.
//
// Each request gets a RequestChannel: the engine thread pushes its tokens (from the engine's
// token callback) and finally its end; the handler thread waits on it, decodes the tokens to
// text and writes the answer. A submit the engine refuses comes back to the submitting thread
// as the engine's exception (QueueFull, InvalidArgument).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "runtime/decode_engine.h"

namespace es::server {

// One request's tokens and end, from the engine thread to its handler thread.
class RequestChannel {
 public:
  // What arrived since the last take().
  struct Update {
    std::vector<int32_t> tokens;
    bool finished = false;
    runtime::FinishReason finish = runtime::FinishReason::kLength;
    std::string error;  // finish == kError: why
  };
  // Handler side: waits until tokens or the end arrive, or `timeout` passes (then the update is
  // empty and not finished).
  Update take(std::chrono::milliseconds timeout);

  // Engine side.
  void push(int32_t token);
  void finish(runtime::FinishReason finish, std::string error);
  // Submit's outcome: accepted, or the engine's exception.
  void accept();
  void reject(std::exception_ptr error);
  // Handler side: blocks until accept() or reject(); rethrows a rejection.
  void waitAccepted();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  bool accepted_ = false, finished_ = false, taken_ = false;
  std::exception_ptr rejected_;
  runtime::FinishReason finish_ = runtime::FinishReason::kLength;
  std::string error_;
};

// Engine and cache state for /metrics, as of the end of the last step.
struct EngineSnapshot {
  int32_t running = 0;
  int32_t queued = 0;  // in the engine's queue, and submitted but not yet handed to it
  int64_t kvPagesTotal = 0;
  int64_t kvPagesFree = 0;
  int64_t kvPagesCached = 0;  // held by the prefix cache's published records
  int64_t promptTokens = 0;   // of every accepted request
  int64_t reusedPromptTokens = 0;
  int64_t generatedTokens = 0;
  double meanAcceptLength = 0.0;    // tau over the engine's life; 0 without a draft
  std::vector<int64_t> widthSteps;  // [W + 1]: engine steps run at each verify width
  double stepSecondsSum = 0.0;
  int64_t stepCount = 0;
};

class EngineLoop {
 public:
  // The engine and cache must be idle and outlive the loop; the loop starts its thread here.
  EngineLoop(runtime::DecodeEngine& engine, const kv::KvCacheManager& cache);
  // Cancels whatever still runs, then stops the thread.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Hands `request` to the engine thread and waits for its verdict: the request's channel, or
  // the engine's exception (QueueFull when its queue is full, InvalidArgument for a request it
  // can never run). The request's token callback and index are the loop's.
  std::shared_ptr<RequestChannel> submit(runtime::GenerationRequest request);
  // Ends the request (the engine frees its slot and pages); its channel then finishes as
  // cancelled unless it already ended.
  void cancel(const std::shared_ptr<RequestChannel>& channel);
  // Blocks until no request is running, queued or waiting in the inbox.
  void waitIdle();
  EngineSnapshot snapshot() const;

 private:
  struct Command {
    bool cancel = false;
    runtime::GenerationRequest request;
    std::shared_ptr<RequestChannel> channel;
  };
  void run();
  void handle(Command& command);
  void step();
  void refreshSnapshot();

  runtime::DecodeEngine& engine_;
  const kv::KvCacheManager& cache_;

  mutable std::mutex mutex_;  // inbox_, stopping_, snapshot_, busy_
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Command> inbox_;
  bool stopping_ = false;
  bool busy_ = false;  // the engine holds requests
  EngineSnapshot snapshot_;

  // Engine thread only.
  std::unordered_map<RequestChannel*, runtime::RequestId> ids_;
  std::unordered_map<runtime::RequestId, std::shared_ptr<RequestChannel>> channels_;
  int64_t promptTokens_ = 0, generatedTokens_ = 0, stepCount_ = 0;
  double stepSeconds_ = 0.0;

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace es::server
