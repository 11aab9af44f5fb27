#pragma once
// The edgespec CLI: parses arguments and dispatches to the subcommands.
namespace es::cli {
int run(int argc, char** argv);
}
