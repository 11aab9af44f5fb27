#pragma once
// Progress of long work (a model load, a prompt's prefill). The work calls a ProgressCallback
// after each piece (a layer, a prefill chunk) and knows nothing of printing; a front end turns the
// updates into text with a ProgressPrinter: nothing for work that ends within a delay (1 s), then
// "<task>: <done>/<total> <unit> (<percent>%), <rate> <unit>/s, <time> left", rewritten in place
// on a terminal ('\r') or as a line every few seconds otherwise, and a last line when it ends.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace es {

struct ProgressUpdate {
  std::string_view task;  // what runs, e.g. "prefill" or "loading model.safetensors"
  std::string_view unit;  // what is counted, e.g. "tokens" or "layers"
  int64_t done = 0;       // pieces finished, in [0, total]
  int64_t total = 0;
};

using ProgressCallback = std::function<void(const ProgressUpdate&)>;

// "prefill: 1024/2031 tokens (50%), 87.3 tokens/s, 11.5 s left" while it runs (`rate` is pieces
// per second, 0: not known yet, then no rate or time left is shown), "prefill: 2031/2031 tokens,
// 86.0 tokens/s, 23.6 s" once done == total.
std::string formatProgress(const ProgressUpdate& update, double rate, double elapsedSeconds);

struct ProgressOptions {
  std::string prefix;             // put before each line, e.g. "[edgespec] "
  bool terminal = false;          // rewrite one line with '\r'; else whole lines
  double delay = 1.0;             // seconds a task runs before its first line
  double terminalInterval = 0.2;  // seconds between rewrites on a terminal
  double lineInterval = 5.0;      // seconds between lines otherwise
};

class ProgressPrinter {
 public:
  using Sink = std::function<void(std::string_view text)>;  // where the text goes (stderr)
  using Clock = std::function<double()>;                    // monotonic seconds

  explicit ProgressPrinter(ProgressOptions options, Sink sink, Clock clock = steadySeconds);
  // Ends an open terminal line, so what follows (an error) starts on its own line.
  ~ProgressPrinter();
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

  // One update. An update whose task or total differs from the last one's, or whose done went
  // back, starts a new task: its time and rate count from this update.
  void report(const ProgressUpdate& update);
  // A callback that reports to this printer (which must outlive it).
  ProgressCallback callback();

  static double steadySeconds();

 private:
  void emit(const std::string& line, bool last);

  ProgressOptions options_;
  Sink sink_;
  Clock clock_;
  std::string task_;
  int64_t total_ = -1, lastDone_ = 0, startDone_ = 0;
  double start_ = 0.0, lastPrint_ = 0.0;
  bool printed_ = false;  // this task printed a line
  size_t openWidth_ = 0;  // characters of the open terminal line (0: none open)
};

}  // namespace es
