#include "ref/worker_pool.h"

#include <algorithm>

namespace es::ref::detail {
namespace {

// Set on the pool's workers, and on a caller for the duration of its run: a parallelFor from
// inside a task then runs inline (a worker waiting for its own pool would never return).
thread_local bool insideRun = false;

}  // namespace

WorkerPool& WorkerPool::instance() {
  static WorkerPool pool(
      std::clamp<int64_t>(int64_t{std::thread::hardware_concurrency()} - 1, 0, 7));
  return pool;
}

WorkerPool::WorkerPool(int64_t workers) {
  workers_.reserve(static_cast<size_t>(workers));
  for (int64_t i = 0; i < workers; ++i) workers_.emplace_back([this] { workerLoop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void WorkerPool::run(int64_t count, const std::function<void(int64_t)>& task) {
  std::unique_lock<std::mutex> runLock;
  if (!insideRun && !workers_.empty() && count > 1)
    runLock = std::unique_lock<std::mutex>(runMutex_, std::try_to_lock);
  if (!runLock.owns_lock()) {  // nested, busy with another thread's run, no workers, or one task
    for (int64_t i = 0; i < count; ++i) task(i);
    return;
  }
  insideRun = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    next_ = 0;
    count_ = count;
    busy_ = static_cast<int64_t>(workers_.size());
    ++generation_;
    generationSeen_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  drain(task);
  {
    // Every worker joins every run (busy_ counts them all), so the next run cannot start while a
    // late worker still holds this one's task.
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [this] { return busy_ == 0; });
    task_ = nullptr;
  }
  insideRun = false;
}

void WorkerPool::drain(const std::function<void(int64_t)>& task) {
  for (;;) {
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_ >= count_) return;
      i = next_++;
    }
    task(i);
  }
}

void WorkerPool::workerLoop() {
  insideRun = true;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t)>* task = nullptr;
    // Runs come in bursts (a decode step is ~150 of them): poll for the next one briefly before
    // sleeping, so a run does not pay a futex wake-up per worker. Polling by yielding, not with
    // `pause`: on a machine whose cores are all busy, a spinning worker took the caller's core
    // (decode 17 -> 11 tok/s with two busy processes on 2 cores); yielding hands it back.
    for (int spin = 0; spin < kSpinPolls && generationSeen_.load(std::memory_order_acquire) == seen;
         ++spin) {
      std::this_thread::yield();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    drain(*task);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_ == 0) finished_.notify_one();
  }
}

}  // namespace es::ref::detail
