#include "cli/numeric_flags.h"

#include <climits>
#include <cmath>
#include <optional>

#include "common/errors.h"
#include "common/number_text.h"

namespace es::cli {
namespace {

// The name errors use: the last of CLI11's comma-separated names ("-b,--batch" -> "--batch").
std::string flagName(const std::string& names) {
  const size_t comma = names.rfind(',');
  return comma == std::string::npos ? names : names.substr(comma + 1);
}

// The value as an error shows it (a flag's text may be long).
std::string shown(std::string_view text) {
  constexpr size_t kMax = 64;
  return text.size() <= kMax ? std::string(text) : std::string(text.substr(0, kMax)) + "...";
}

// An int32 flag's bounds must fit int32, so the checked value narrows without wrapping.
void checkInt32Bounds(const std::string& names, int64_t lo, int64_t hi) {
  if (lo < INT32_MIN || hi > INT32_MAX || lo > hi) {
    ES_THROW(Error, "addIntegerFlag: ", names, " bounds [", lo, ", ", hi, "] do not fit int32");
  }
}

// The help text: the description and the accepted range.
template <typename Bound>
std::string withRange(const std::string& description, Bound lo, Bound hi) {
  return detail::concat(description, " [", lo, ", ", hi, "]");
}

template <typename Store>
CLI::Option* addParsed(CLI::App* cmd, const std::string& names, Store store,
                       const std::string& description, const std::string& shownDefault) {
  CLI::Option* option = cmd->add_option_function<std::string>(names, store, description);
  option->type_name("NUMBER");
  if (!shownDefault.empty()) option->default_str(shownDefault);
  return option;
}

}  // namespace

int64_t parseIntegerFlag(std::string_view where, std::string_view flag, std::string_view text,
                         int64_t lo, int64_t hi) {
  const std::optional<int64_t> v = parseInt64(text);
  if (!v || *v < lo || *v > hi) {
    throw InvalidArgument(detail::concat(where, ": argument '", flag, "' = ", shown(text),
                                         " must be an integer in [", lo, ", ", hi, "]"));
  }
  return *v;
}

double parseRealFlag(std::string_view where, std::string_view flag, std::string_view text,
                     double lo, double hi) {
  const std::optional<double> v = parseDouble(text);
  if (!v || !(*v >= lo && *v <= hi)) {
    throw InvalidArgument(detail::concat(where, ": argument '", flag, "' = ", shown(text),
                                         " must be a finite number in [", lo, ", ", hi, "]"));
  }
  return *v;
}

// An integer flag stored as Int (in Target: Int or std::optional<Int>), bounds-checked as read.
template <typename Int, typename Target>
CLI::Option* addIntegerFlagAs(CLI::App* cmd, const std::string& names, Target& target, int64_t lo,
                              int64_t hi, const std::string& description,
                              const std::string& shownDefault) {
  if constexpr (sizeof(Int) < sizeof(int64_t)) checkInt32Bounds(names, lo, hi);
  const std::string where = cmd->get_name(), flag = flagName(names);
  return addParsed(
      cmd, names,
      [&target, where, flag, lo, hi](const std::string& text) {
        target = static_cast<Int>(parseIntegerFlag(where, flag, text, lo, hi));
      },
      withRange(description, lo, hi), shownDefault);
}

CLI::Option* addIntegerFlag(CLI::App* cmd, const std::string& names, int32_t& target, int64_t lo,
                            int64_t hi, const std::string& description) {
  return addIntegerFlagAs<int32_t>(cmd, names, target, lo, hi, description, std::to_string(target));
}

CLI::Option* addIntegerFlag(CLI::App* cmd, const std::string& names, int64_t& target, int64_t lo,
                            int64_t hi, const std::string& description) {
  return addIntegerFlagAs<int64_t>(cmd, names, target, lo, hi, description, std::to_string(target));
}

CLI::Option* addIntegerFlag(CLI::App* cmd, const std::string& names, std::optional<int32_t>& target,
                            int64_t lo, int64_t hi, const std::string& description) {
  return addIntegerFlagAs<int32_t>(cmd, names, target, lo, hi, description,
                                   target ? std::to_string(*target) : std::string());
}

CLI::Option* addRealFlag(CLI::App* cmd, const std::string& names, float& target, double lo,
                         double hi, const std::string& description) {
  const std::string where = cmd->get_name(), flag = flagName(names);
  return addParsed(
      cmd, names,
      [&target, where, flag, lo, hi](const std::string& text) {
        target = static_cast<float>(parseRealFlag(where, flag, text, lo, hi));
      },
      withRange(description, lo, hi), formatDouble(target));
}

}  // namespace es::cli
