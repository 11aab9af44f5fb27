#include "server/engine_loop.h"

#include <utility>

#include "common/logging.h"

namespace es::server {

using Clock = std::chrono::steady_clock;

RequestChannel::Update RequestChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, timeout, [this] { return !tokens_.empty() || (finished_ && !taken_); });
  Update u;
  u.tokens.swap(tokens_);
  if (finished_ && !taken_) {
    taken_ = true;
    u.finished = true;
    u.finish = finish_;
    u.error = error_;
  }
  return u;
}

void RequestChannel::push(int32_t token) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_.push_back(token);
  }
  cv_.notify_all();
}

void RequestChannel::finish(runtime::FinishReason finish, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    finished_ = true;
    finish_ = finish;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

void RequestChannel::accept() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepted_ = true;
  }
  cv_.notify_all();
}

void RequestChannel::reject(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rejected_ = std::move(error);
  }
  cv_.notify_all();
}

void RequestChannel::waitAccepted() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return accepted_ || rejected_; });
  if (rejected_) std::rethrow_exception(rejected_);
}

EngineLoop::EngineLoop(runtime::DecodeEngine& engine, const kv::KvCacheManager& cache)
    : engine_(engine), cache_(cache) {
  refreshSnapshot();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestChannel> EngineLoop::submit(runtime::GenerationRequest request) {
  auto channel = std::make_shared<RequestChannel>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox_.push_back({.cancel = false, .request = std::move(request), .channel = channel});
    ++snapshot_.queued;
  }
  wake_.notify_all();
  channel->waitAccepted();
  return channel;
}

void EngineLoop::cancel(const std::shared_ptr<RequestChannel>& channel) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox_.push_back({.cancel = true, .request = {}, .channel = channel});
  }
  wake_.notify_all();
}

void EngineLoop::waitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return inbox_.empty() && !busy_; });
}

EngineSnapshot EngineLoop::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return snapshot_;
}

void EngineLoop::handle(Command& c) {
  if (c.cancel) {
    const auto it = ids_.find(c.channel.get());
    if (it != ids_.end()) engine_.cancel(it->second);
    return;
  }
  const int64_t promptTokens = static_cast<int64_t>(c.request.prompt.size());
  RequestChannel* channel = c.channel.get();
  runtime::RequestId id = -1;
  try {
    id = engine_.submit(std::move(c.request), [this, channel](int32_t, int32_t token) {
      ++generatedTokens_;
      channel->push(token);
    });
  } catch (...) {
    c.channel->reject(std::current_exception());
    return;
  }
  promptTokens_ += promptTokens;
  ids_[channel] = id;
  channels_[id] = c.channel;
  c.channel->accept();
}

void EngineLoop::step() {
  const Clock::time_point start = Clock::now();
  try {
    engine_.step();
  } catch (const std::exception& e) {
    // The engine dropped every queued and running request and is usable again.
    ES_LOG_ERROR("engine step failed: ", e.what());
    for (auto& [id, channel] : channels_) {
      channel->finish(runtime::FinishReason::kError,
                      std::string("engine step failed: ") + e.what());
    }
    channels_.clear();
    ids_.clear();
  }
  stepSeconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  ++stepCount_;
}

void EngineLoop::refreshSnapshot() {
  EngineSnapshot s;
  s.running = engine_.runningCount();
  s.queued = engine_.queuedCount();
  const kv::KvCacheManager::PageCounts pages = cache_.pageCounts();
  s.kvPagesTotal = pages.total;
  s.kvPagesFree = pages.free;
  s.kvPagesCached = pages.cached;
  const runtime::SpeculationStats& stats = engine_.stats();
  s.promptTokens = promptTokens_;
  s.reusedPromptTokens = stats.reusedTokens;
  s.generatedTokens = generatedTokens_;
  s.meanAcceptLength = engine_.blockSize() > 1 ? stats.meanAcceptLength() : 0.0;
  s.widthSteps = stats.widthSteps;
  s.stepSecondsSum = stepSeconds_;
  s.stepCount = stepCount_;
  std::lock_guard<std::mutex> lock(mutex_);
  // Submits still in the inbox count as queued.
  for (const Command& c : inbox_) s.queued += c.cancel ? 0 : 1;
  snapshot_ = s;
  busy_ = s.running + engine_.queuedCount() > 0;
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Command> commands;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !inbox_.empty() || busy_; });
      if (stopping_) break;
      commands.swap(inbox_);
    }
    for (Command& c : commands) handle(c);
    if (engine_.runningCount() + engine_.queuedCount() > 0) step();
    for (runtime::FinishedRequest& f : engine_.takeFinished()) {
      const auto it = channels_.find(f.id);
      if (it == channels_.end()) continue;
      it->second->finish(f.result.finish, std::move(f.result.error));
      ids_.erase(it->second.get());
      channels_.erase(it);
    }
    refreshSnapshot();
    idle_.notify_all();
  }
  // Stopping: end what remains so no handler waits forever.
  for (auto& [id, channel] : channels_) engine_.cancel(id);
  try {
    while (engine_.runningCount() + engine_.queuedCount() > 0) engine_.step();
  } catch (const std::exception& e) {
    ES_LOG_ERROR("engine step failed while stopping: ", e.what());
  }
  for (auto& [id, channel] : channels_) {
    channel->finish(runtime::FinishReason::kCancelled, "the server is stopping");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (Command& c : inbox_) {
    if (!c.cancel) {
      c.channel->reject(std::make_exception_ptr(Error("the server is stopping")));
    }
  }
  inbox_.clear();
}

}  // namespace es::server
