// The kernels' two debug switches (debug_switches.h), read from the environment once.
#include "kernels/debug_switches.h"

#include <cstdlib>
#include <string>

#include "common/errors.h"

namespace es::kernel::debug {

bool pdlEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("ES_PDL");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

bool linearAutoTakesCublasLt() {
  static const bool cublasLt = [] {
    const char* v = std::getenv("ES_LINEAR_ALGO");
    if (v == nullptr || *v == '\0') return false;
    const std::string s(v);
    if (s == "auto" || s == "gemv") return false;
    if (s == "cublaslt") return true;
    ES_THROW(InvalidArgument, "environment variable ES_LINEAR_ALGO = '", s,
             "' must be auto, cublaslt or gemv");
  }();
  return cublasLt;
}

}  // namespace es::kernel::debug
