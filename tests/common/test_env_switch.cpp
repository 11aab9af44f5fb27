// The environment switches of common/env_switch.h: env_switch_on is off only for "0",
// env_switch_opt_in is on only for "1".
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/env_switch.h"

namespace es {
namespace {

constexpr const char* kName = "ES_TEST_ENV_SWITCH";

TEST(EnvSwitch, OnUnlessZeroAndOptInOnlyForOne) {
  unsetenv(kName);
  EXPECT_TRUE(env_switch_on(kName));
  EXPECT_FALSE(env_switch_opt_in(kName));
  for (const char* v : {"0", "1", "", "yes"}) {
    setenv(kName, v, 1);
    EXPECT_EQ(env_switch_on(kName), std::string(v) != "0") << "'" << v << "'";
    EXPECT_EQ(env_switch_opt_in(kName), std::string(v) == "1") << "'" << v << "'";
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace es
