// The environment switches of common/env_switch.h: env_switch_on is off only for "0",
// env_switch_opt_in is on only for "1", env_choice takes only its listed values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
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

TEST(EnvSwitch, ChoiceTakesOnlyItsValues) {
  unsetenv(kName);
  EXPECT_EQ(env_choice(kName, {1, 2, 4, 8}, 8), 8);
  setenv(kName, "", 1);
  EXPECT_EQ(env_choice(kName, {1, 2, 4, 8}, 8), 8);
  for (const int v : {1, 2, 4, 8}) {
    setenv(kName, std::to_string(v).c_str(), 1);
    EXPECT_EQ(env_choice(kName, {1, 2, 4, 8}, 8), v);
  }
  // Anything else: InvalidArgument naming the variable, the value and the allowed ones.
  auto expect_refused = [](const char* value, std::initializer_list<int> allowed, const char* note,
                           const std::string& message) {
    setenv(kName, value, 1);
    try {
      env_choice(kName, allowed, 0, note);
      ADD_FAILURE() << "'" << value << "' accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  for (const char* bad : {"3", "02", "2 ", "two", "-1"}) {
    expect_refused(bad, {1, 2, 4, 8}, "",
                   "ES_TEST_ENV_SWITCH = '" + std::string(bad) + "' must be 1, 2, 4 or 8");
  }
  expect_refused("7", {2, 3}, " (or unset)", "ES_TEST_ENV_SWITCH = '7' must be 2 or 3 (or unset)");
  unsetenv(kName);
}

}  // namespace
}  // namespace es
