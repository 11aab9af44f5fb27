#pragma once
// Strict decimal text to number, for values a user types (flags, request fields): the whole text
// must be the number, in base 10, with an optional leading '-' (signed and floating types only);
// no spaces, no '+', no "0x" or octal reading of a leading 0, no trailing characters. A value
// outside the type's range is no value (nullopt), never wrapped or saturated. Floating point also
// takes an exponent and "inf" / "nan": callers range-check the result.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace es {

std::optional<int64_t> parseInt64(std::string_view text);
std::optional<uint64_t> parseUint64(std::string_view text);
std::optional<double> parseDouble(std::string_view text);

// The shortest text that parseDouble reads back as `value` ("0.7", "1e+30", "inf", "nan"), for
// messages that show a number as the user wrote it.
std::string formatDouble(double value);

}  // namespace es
