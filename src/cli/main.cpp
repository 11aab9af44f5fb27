// edgespec command-line entry point. Any error becomes one line on stderr and exit code 1.
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  try {
    return es::cli::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edgespec: error: %s\n", e.what());
    return 1;
  }
}
