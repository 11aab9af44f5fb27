#include "support/test_util.h"

#include <cstdlib>
#include <cstring>

namespace es::test {

std::string test_data_dir() {
  const char* dir = std::getenv("ES_TEST_DATA_DIR");
  return dir != nullptr ? std::string(dir) : std::string("tests/data");
}

int32_t poison_i32() {
  int32_t value;
  std::memset(&value, kPoisonByte, sizeof(value));
  return value;
}

}  // namespace es::test
