#include "server/stop_signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "common/errors.h"

namespace es::server {
namespace {

// The pipe the handler writes to; one StopSignals at a time.
int gPipe[2] = {-1, -1};
std::atomic<int> gSignals{0};
struct sigaction gOldInt, gOldTerm;

void onSignal(int) {
  if (gSignals.fetch_add(1) > 0) _exit(130);
  const char byte = 's';
  [[maybe_unused]] const ssize_t n = write(gPipe[1], &byte, 1);
}

sigset_t stopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

StopSignals::StopSignals() {
  if (pipe2(gPipe, O_CLOEXEC) != 0) ES_THROW(Error, "serve: cannot create the signal pipe");
  gSignals = 0;
  struct sigaction sa = {};
  sa.sa_handler = onSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &gOldInt);
  sigaction(SIGTERM, &sa, &gOldTerm);
  const sigset_t stops = stopSet();
  pthread_sigmask(SIG_BLOCK, &stops, &oldMask_);
  watcher_ = std::thread([this, stops] {
    pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
    char byte = 0;
    while (read(gPipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    if (byte != 's') return;  // 'q': the destructor
    std::function<void()> action;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return action_ || quitting_; });
      if (!action_) return;
      action = action_;
    }
    action();
  });
}

StopSignals::~StopSignals() {
  pthread_sigmask(SIG_SETMASK, &oldMask_, nullptr);
  sigaction(SIGINT, &gOldInt, nullptr);
  sigaction(SIGTERM, &gOldTerm, nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quitting_ = true;
  }
  changed_.notify_all();
  if (gSignals.load() == 0) {
    const char byte = 'q';
    [[maybe_unused]] const ssize_t n = write(gPipe[1], &byte, 1);
  }
  watcher_.join();
  close(gPipe[0]);
  close(gPipe[1]);
  gPipe[0] = gPipe[1] = -1;
}

void StopSignals::setStopAction(std::function<void()> action) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    action_ = std::move(action);
  }
  changed_.notify_all();
}

}  // namespace es::server
