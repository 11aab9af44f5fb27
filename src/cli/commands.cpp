#include "cli/commands.h"

#include <CLI/CLI.hpp>

#include "cli/bench.h"
#include "cli/convert.h"
#include "cli/generate.h"
#include "cli/inspect.h"
#include "cli/quantize.h"
#include "cli/serve.h"

namespace es::cli {

int run(int argc, char** argv) {
  CLI::App app{"edgespec: paged-KV LLM runtime with DFlash speculative decoding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "edgespec 0.1.0");
  addGenerateCommand(app);
  addInspectCommand(app);
  addConvertCommand(app);
  addQuantizeCommand(app);
  addBenchCommand(app);
  addServeCommand(app);
  // Errors from a subcommand propagate to main(), which prints one line and exits non-zero.
  CLI11_PARSE(app, argc, argv);
  return 0;
}

}  // namespace es::cli
