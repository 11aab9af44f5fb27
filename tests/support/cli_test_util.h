#pragma once
// Runs the edgespec command line in-process (tests of the CLI).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace es::test {

// `edgespec ARGS...`; returns the exit code (errors propagate as exceptions, as to main()).
inline int runCli(std::vector<std::string> args) {
  args.insert(args.begin(), "edgespec");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli::run(static_cast<int>(argv.size()), argv.data());
}

// The same, expecting success and one JSON document on stdout.
inline nlohmann::json runCliJson(const std::vector<std::string>& args) {
  testing::internal::CaptureStdout();
  const int rc = runCli(args);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out);
}

}  // namespace es::test
