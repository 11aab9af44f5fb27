#include "cli/commands.h"

#include <CLI/CLI.hpp>

namespace es::cli {

int run(int argc, char** argv) {
  CLI::App app{"edgespec: paged-KV LLM runtime with DFlash speculative decoding"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

}  // namespace es::cli
