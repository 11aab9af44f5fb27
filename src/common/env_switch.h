#pragma once
// On/off switches from the environment, for A/B runs of one binary: a switch is on unless its
// variable is set to "0". Callers read it once per process (a function-local static).
#include <cstdlib>
#include <cstring>

namespace es {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace es
