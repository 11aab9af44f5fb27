#pragma once
// Where the commands print progress: stderr, one line rewritten in place when stderr is a
// terminal, a line every few seconds otherwise (common/progress.h decides what and when).
#include <memory>

#include "common/progress.h"

namespace es::cli {

std::unique_ptr<ProgressPrinter> stderrProgress();

}  // namespace es::cli
