#pragma once
// The HTTP front: OpenAI-compatible routes on cpp-httplib (docs/server.md).
//   POST /v1/chat/completions, POST /v1/completions   (stream or whole answer)
//   GET  /v1/models, GET /health, GET /metrics
// Unknown paths answer 404, a known path with another method 405, a body over maxBodyBytes 413;
// every error is an OpenAI error object. Each connection is served by one thread of a pool
// sized for every request the engine can hold (running and queued) plus a few for the light
// routes, so a full engine answers 503 rather than leaving connections waiting in the pool.
//
// A client that leaves cancels its request: a streamed answer notices when a write fails (or
// the socket is no longer writable); a whole answer polls its connection's socket while it
// waits. drain() refuses new completions (503 "server_shutting_down"), waits for those in
// flight to be answered, then stops the server: run() returns.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/served_model.h"

namespace es::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int32_t port = 8080;                    // 0: a free port
  size_t maxBodyBytes = size_t{1} << 20;  // larger bodies: 413
  int32_t threads = 16;                   // connections served at once
};

class HttpServer {
 public:
  // `model` and `loop` must outlive the server.
  HttpServer(const ServedModel& model, EngineLoop& loop, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port (the chosen one for port 0). An InvalidArgument naming
  // --host / --port when the address cannot be bound.
  int32_t bind();
  // Serves until stop(); returns after every request in flight is answered.
  void run();
  // Stops accepting connections at once (safe from any thread, before or during run()).
  void stop();
  // New completion requests get 503; once every one in flight is answered, stops the server
  // and returns when run() has returned (call it with run() running or about to run).
  void drain();

  ServerMetrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace es::server
