#pragma once
// Logging goes to stderr only (stdout carries generated text or --json output).
// Level from the environment: ES_LOG=error|warn|info|debug (default warn).
#include <string_view>

#include "common/errors.h"

namespace es {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void log_message(LogLevel level, std::string_view message);

template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (static_cast<int>(level) <= static_cast<int>(log_level())) {
    log_message(level, detail::concat(parts...));
  }
}

}  // namespace es

#define ES_LOG_ERROR(...) ::es::log(::es::LogLevel::kError, __VA_ARGS__)
#define ES_LOG_WARN(...) ::es::log(::es::LogLevel::kWarn, __VA_ARGS__)
#define ES_LOG_INFO(...) ::es::log(::es::LogLevel::kInfo, __VA_ARGS__)
#define ES_LOG_DEBUG(...) ::es::log(::es::LogLevel::kDebug, __VA_ARGS__)
