#pragma once
// Numeric command-line flags read strictly and range-checked as CLI11 parses them. CLI11's own
// conversion reads "010" as octal, saturates an int64 at its maximum and takes "inf" for a float;
// these take the text as a string and parse it with common/number_text.h, so "-1", "1e9" for an
// integer, "5abc", a value that does not fit and one outside [lo, hi] are each an
// InvalidArgument "<command>: argument '<flag>' = <text> must be an integer in [lo, hi]" (or
// "a finite number in [lo, hi]"). Cross-flag checks stay with each command's validation.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace es::cli {

// `text` as an integer in [lo, hi], or the error above naming `flag` of command `where`.
int64_t parseIntegerFlag(std::string_view where, std::string_view flag, std::string_view text,
                         int64_t lo, int64_t hi);
// `text` as a finite number in [lo, hi], or the error above.
double parseRealFlag(std::string_view where, std::string_view flag, std::string_view text,
                     double lo, double hi);

// `names` as CLI11 takes them ("-b,--batch"); errors name the last one. The target keeps its
// value (shown as the default) unless the flag is given.
CLI::Option* addIntegerFlag(CLI::App* cmd, const std::string& names, int32_t& target, int64_t lo,
                            int64_t hi, const std::string& description);
CLI::Option* addIntegerFlag(CLI::App* cmd, const std::string& names, int64_t& target, int64_t lo,
                            int64_t hi, const std::string& description);
// Unset (nullopt) stays distinct from every value the flag takes.
CLI::Option* addIntegerFlag(CLI::App* cmd, const std::string& names, std::optional<int32_t>& target,
                            int64_t lo, int64_t hi, const std::string& description);
CLI::Option* addRealFlag(CLI::App* cmd, const std::string& names, float& target, double lo,
                         double hi, const std::string& description);

}  // namespace es::cli
