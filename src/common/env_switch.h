#pragma once
// On/off switches from the environment, for A/B runs of one binary: env_switch_on is on unless its
// variable is set to "0" (the measured default); env_switch_opt_in is on only when its variable is
// "1" (a variant not yet measured); env_choice is a small integer setting. Callers read them once
// per process (a function-local static).
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "common/errors.h"

namespace es {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

inline bool env_switch_opt_in(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// `unset` when the variable is unset or empty, else its value, which must be one of `allowed`
// (written in decimal); anything else is an InvalidArgument naming the variable and the values,
// e.g. "environment variable ES_X = '7' must be 1 or 2", with `note` appended when given.
inline int env_choice(const char* name, std::initializer_list<int> allowed, int unset,
                      const char* note = "") {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  std::string values;
  size_t i = 0;
  for (const int a : allowed) {
    if (std::to_string(a) == v) return a;
    values += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::to_string(a);
    ++i;
  }
  ES_THROW(InvalidArgument, "environment variable ", name, " = '", v, "' must be ", values, note);
}

}  // namespace es
