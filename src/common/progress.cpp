#include "common/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

namespace es {
namespace {

// A rate or a count with about three significant digits.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text),
                value >= 100.0  ? "%.0f"
                : value >= 10.0 ? "%.1f"
                                : "%.2f",
                value);
  return text;
}

std::string duration(double seconds) {
  char text[32];
  if (seconds < 60.0) {
    std::snprintf(text, sizeof(text), "%.1f s", seconds);
  } else {
    const auto whole = static_cast<int64_t>(std::lround(seconds));
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(whole / 60),
                  static_cast<long long>(whole % 60));
  }
  return text;
}

}  // namespace

std::string formatProgress(const ProgressUpdate& u, double rate, double elapsedSeconds) {
  std::string line = std::string(u.task) + ": " + std::to_string(u.done) + "/" +
                     std::to_string(u.total) + " " + std::string(u.unit);
  const bool finished = u.done >= u.total;
  if (!finished && u.total > 0) {
    line += " (" + std::to_string(u.done * 100 / u.total) + "%)";
  }
  if (rate > 0.0) line += ", " + number(rate) + " " + std::string(u.unit) + "/s";
  if (finished) {
    line += ", " + duration(elapsedSeconds);
  } else if (rate > 0.0) {
    line += ", " + duration(static_cast<double>(u.total - u.done) / rate) + " left";
  }
  return line;
}

ProgressPrinter::ProgressPrinter(ProgressOptions options, Sink sink, Clock clock)
    : options_(options), sink_(std::move(sink)), clock_(std::move(clock)) {}

ProgressPrinter::~ProgressPrinter() {
  if (openWidth_ > 0) sink_("\n");
}

double ProgressPrinter::steadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProgressCallback ProgressPrinter::callback() {
  return [this](const ProgressUpdate& u) { report(u); };
}

void ProgressPrinter::report(const ProgressUpdate& u) {
  const double now = clock_();
  if (u.task != task_ || u.total != total_ || u.done < lastDone_) {
    emit("", true);  // the previous task stopped short: end its open line
    task_ = std::string(u.task);
    total_ = u.total;
    start_ = now;
    startDone_ = u.done;
    printed_ = false;
  }
  lastDone_ = u.done;
  const double elapsed = now - start_;
  if (elapsed < options_.delay) return;
  const bool last = u.done >= u.total;
  const double interval = options_.terminal ? options_.terminalInterval : options_.lineInterval;
  if (!last && printed_ && now - lastPrint_ < interval) return;
  const double rate = elapsed > 0.0 ? static_cast<double>(u.done - startDone_) / elapsed : 0.0;
  emit(formatProgress(u, rate, elapsed), last);
  lastPrint_ = now;
  printed_ = true;
}

void ProgressPrinter::emit(const std::string& body, bool last) {
  if (body.empty()) {  // only ends an open terminal line, keeping what it shows
    if (openWidth_ > 0) sink_("\n");
    openWidth_ = 0;
    return;
  }
  const std::string line = options_.prefix + body;
  if (!options_.terminal) {
    sink_(line + "\n");
    return;
  }
  // Rewrites the line in place; spaces cover what a longer previous line left.
  std::string text = "\r" + line;
  if (line.size() < openWidth_) text.append(openWidth_ - line.size(), ' ');
  openWidth_ = line.size();
  if (last) {
    text += "\n";
    openWidth_ = 0;
  }
  sink_(text);
}

}  // namespace es
