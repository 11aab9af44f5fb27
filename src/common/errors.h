#pragma once
// Error types. Bad input from a user or caller is an InvalidArgument whose message names the
// argument, the value and the limit it broke; a failing CUDA/cuBLAS call is a CudaError with
// file, line and the call's text. Both derive from std::runtime_error so callers that only know
// the standard library still catch them.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace es {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a value outside what the function accepts.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file or blob (model, tokenizer, config) does not have the format it claims.
class FormatError : public Error {
 public:
  using Error::Error;
};

// A device or library call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

// `text` with every control byte (0x00-0x1f, 0x7f) written as an escape (\n, \t, \r, \\ for a
// backslash, \xNN for the rest), so that a string read from a file and echoed in an error stays
// on one line and is never cut short at a NUL when the message is printed as a C string.
// Bytes >= 0x80 (UTF-8) pass through unchanged.
inline std::string escapeControl(std::string_view text) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

// `text` in single quotes for an error message, cut to 120 bytes and "..." (a hostile file may
// hold megabytes in one name), control bytes escaped (escapeControl).
inline std::string quoteShort(std::string_view text) {
  constexpr size_t kMax = 120;
  std::string quoted = "'";
  quoted.append(escapeControl(text.substr(0, kMax)));
  if (text.size() > kMax) quoted += "...";
  return quoted + "'";
}

// "<where>: argument '<name>' = <value> <requirement>", e.g.
// "computeMinimumKvPoolPages: argument 'maxBatchSize' = -1 must be > 0".
template <typename Value>
[[noreturn]] void throw_invalid_argument(std::string_view where, std::string_view name,
                                         const Value& value, std::string_view requirement) {
  throw InvalidArgument(
      detail::concat(where, ": argument '", name, "' = ", value, " ", requirement));
}

}  // namespace es

// Check a caller-supplied condition; on failure throw InvalidArgument naming the argument,
// its value and the requirement (the rest of the message is streamed, e.g. "must be <= " << max).
#define ES_CHECK_ARG(cond, where, name, value, ...)                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      ::es::throw_invalid_argument((where), (name), (value), ::es::detail::concat(__VA_ARGS__)); \
    }                                                                                            \
  } while (0)

// Internal invariant or general failure with a free-form message.
#define ES_THROW(ExceptionType, ...) throw ExceptionType(::es::detail::concat(__VA_ARGS__))
