#pragma once
// Helpers shared by the tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/errors.h"

namespace es::test {

// Skips the current test (GTEST_SKIP) when no CUDA device is usable; GPU tests call this first.
#define ES_SKIP_IF_NO_GPU()                                               \
  do {                                                                    \
    if (::es::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// Directory of small committed fixtures (tests/data), from ES_TEST_DATA_DIR set by CTest.
std::string test_data_dir();

// Byte pattern used to poison outputs before a kernel or reference runs, so that an element
// nobody wrote is detectable. 0xA5 repeated: not 0, not -1, an implausible float.
constexpr uint8_t kPoisonByte = 0xA5;
int32_t poison_i32();

// n elements whose every byte is kPoisonByte (an output buffer before a kernel or reference runs).
template <typename T = int32_t>
std::vector<T> poisoned(size_t n) {
  std::vector<T> v(n);
  if (n) std::memset(static_cast<void*>(v.data()), kPoisonByte, n * sizeof(T));
  return v;
}

// n integers drawn uniformly from [lo, hi].
inline std::vector<int32_t> randomInts(std::mt19937& rng, size_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Expects f() to throw es::InvalidArgument whose message names `argument` (as 'argument').
template <typename F>
void expectInvalidArgument(F&& f, const std::string& argument) {
  try {
    f();
    ADD_FAILURE() << "expected InvalidArgument naming '" << argument << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'" + argument + "'"), std::string::npos) << e.what();
  }
}

}  // namespace es::test
