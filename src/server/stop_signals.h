#pragma once
// SIGINT and SIGTERM as a request to stop. The signal handler only writes a byte to a pipe
// (async-signal-safe); a watcher thread reads it and runs the stop action (the server's drain)
// outside signal context. A second signal while the first is handled ends the process at once
// (exit code 130).
//
// The constructor also blocks both signals in the calling thread, so the threads it creates
// afterwards (the HTTP server's pool, the engine thread) never see them: a signal interrupting
// their socket calls would read as a client that left. The watcher unblocks them for itself;
// threads created earlier (a backend's workers) may run the handler too, which is harmless.
// A signal that comes before the stop action is set waits for it.
#include <signal.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace es::server {

class StopSignals {
 public:
  // Installs the handlers, blocks the signals in this thread and starts the watcher.
  StopSignals();
  // Restores the previous handlers and signal mask and ends the watcher (without running the
  // stop action when no signal came).
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // What the first signal runs (on the watcher thread), once.
  void setStopAction(std::function<void()> action);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> action_;
  bool quitting_ = false;
  sigset_t oldMask_;
  std::thread watcher_;
};

}  // namespace es::server
