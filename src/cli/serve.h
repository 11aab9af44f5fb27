#pragma once
// `edgespec serve`: an OpenAI-compatible HTTP server (docs/server.md) on one engine, built from
// the same engine flags as `edgespec generate` (cli/engine_flags.h). It prints one line to stderr
// when ready, "edgespec serve: listening on http://HOST:PORT (model NAME)", and serves until
// SIGINT or SIGTERM, then answers the requests in flight and exits 0.
#include <CLI/CLI.hpp>

namespace es::cli {
void addServeCommand(CLI::App& app);
}  // namespace es::cli
