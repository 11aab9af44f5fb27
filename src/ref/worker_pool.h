#pragma once
// The CPU backend's worker threads, started once and reused by every parallelFor
// (forward_ref_util.h). Starting fresh threads for each kernel cost a decode step of the default
// model ~150 thread creations (stacks, page faults), a large share of a 2-core machine's step.
//
// One run at a time: a run from another thread while one is in flight, or from inside a task
// (nesting), executes its tasks inline on the caller instead of waiting. Tasks are independent,
// so where they run never changes a result.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace es::ref::detail {

class WorkerPool {
 public:
  // The process-wide pool with `hardware_concurrency − 1` workers (at most 7); started on first
  // use.
  static WorkerPool& instance();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  // Runs task(i) for every i in [0, count): the caller takes tasks too, and run returns once all
  // have finished. A task must not throw.
  void run(int64_t count, const std::function<void(int64_t)>& task);

  // Threads that can work on one run at once (the workers and the caller).
  int64_t width() const { return static_cast<int64_t>(workers_.size()) + 1; }

 private:
  explicit WorkerPool(int64_t workers);
  void workerLoop();
  void drain(const std::function<void(int64_t)>& task);  // takes tasks until none are left

  std::mutex runMutex_;  // held for a whole run: one run at a time

  std::mutex mutex_;                  // guards everything below
  std::condition_variable wake_;      // a new run (generation_ changed) or stop_
  std::condition_variable finished_;  // busy_ reached 0
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t next_ = 0, count_ = 0;  // the next task index to hand out, of count_
  int64_t busy_ = 0;              // workers still inside the current run
  uint64_t generation_ = 0;
  std::atomic<uint64_t> generationSeen_{0};  // generation_, readable without the mutex (polling)
  static constexpr int kSpinPolls = 2000;    // sched_yield polls before sleeping
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace es::ref::detail
