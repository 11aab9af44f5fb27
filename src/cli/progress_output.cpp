#include "cli/progress_output.h"

#include <unistd.h>

#include <cstdio>

namespace es::cli {

std::unique_ptr<ProgressPrinter> stderrProgress() {
  return std::make_unique<ProgressPrinter>(
      ProgressOptions{.prefix = "[edgespec] ", .terminal = ::isatty(STDERR_FILENO) != 0},
      [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stderr);
        std::fflush(stderr);
      });
}

}  // namespace es::cli
