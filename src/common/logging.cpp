#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace es {
namespace {

LogLevel level_from_env() {
  const char* value = std::getenv("ES_LOG");
  if (value == nullptr) return LogLevel::kWarn;
  if (std::strcmp(value, "error") == 0) return LogLevel::kError;
  if (std::strcmp(value, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(value, "debug") == 0) return LogLevel::kDebug;
  return LogLevel::kWarn;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load()); }

void log_message(LogLevel level, std::string_view message) {
  static std::mutex mutex;  // one line at a time from concurrent threads
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[edgespec %s] %.*s\n", level_name(level), static_cast<int>(message.size()),
               message.data());
}

}  // namespace es
