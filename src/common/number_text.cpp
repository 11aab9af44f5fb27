#include "common/number_text.h"

#include <charconv>
#include <system_error>

namespace es {
namespace {

template <typename T>
std::optional<T> parseWhole(std::string_view text) {
  if (text.empty() || text.front() == '+') return std::nullopt;
  T value{};
  const char* end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> parseInt64(std::string_view text) { return parseWhole<int64_t>(text); }

std::optional<uint64_t> parseUint64(std::string_view text) { return parseWhole<uint64_t>(text); }

std::optional<double> parseDouble(std::string_view text) { return parseWhole<double>(text); }

std::string formatDouble(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : std::string("?");
}

}  // namespace es
