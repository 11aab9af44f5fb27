#pragma once
// On/off switches from the environment, for A/B runs of one binary: env_switch_on is on unless its
// variable is set to "0" (the measured default); env_switch_opt_in is on only when its variable is
// "1" (a variant not yet measured). Callers read it once per process (a function-local static).
#include <cstdlib>
#include <cstring>

namespace es {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

inline bool env_switch_opt_in(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace es
