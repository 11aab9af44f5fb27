#include "server/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/errors.h"
#include "common/logging.h"
#include "server/api_error.h"
#include "server/completion_session.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace es::server {
namespace {

using nlohmann::json;

// How often a waiting handler looks at its client's connection.
constexpr std::chrono::milliseconds kPollInterval{50};
// The status of an answer never sent because its client left (nginx's "client closed request").
constexpr int kClientGone = 499;

// The routes and the methods they take (any other method: 405).
struct Route {
  const char* path;
  const char* method;
};
constexpr Route kRoutes[] = {{"/v1/chat/completions", "POST"},
                             {"/v1/completions", "POST"},
                             {"/v1/models", "GET"},
                             {"/health", "GET"},
                             {"/metrics", "GET"}};

const Route* findRoute(const std::string& path) {
  for (const Route& r : kRoutes) {
    if (path == r.path) return &r;
  }
  return nullptr;
}

std::string numericHost(const sockaddr_storage& a, socklen_t length, int* port) {
  char host[NI_MAXHOST] = {0}, service[NI_MAXSERV] = {0};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), length, host, sizeof host, service,
                  sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {};
  }
  *port = std::atoi(service);
  return host;
}

// What a waiting handler knows of its client's connection.
constexpr int kSocketUnknown = -2;  // /proc/self/fd cannot be read: never taken for gone
constexpr int kSocketGone = -1;     // no open socket is connected to the client any more

// The descriptor of the connection `req` came on (its local port and peer address and port), or
// kSocketGone when no socket is connected to that peer: a connection the client reset is no
// longer connected (getpeername fails), before or after the handler started. cpp-httplib does
// not hand the socket to handlers; the handler only looks while it runs, when httplib has not
// closed the descriptor yet.
int connectionSocket(const httplib::Request& req) {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/fd", ec);
  if (ec) return kSocketUnknown;
  for (const auto& entry : it) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_storage local{}, peer{};
    socklen_t localLength = sizeof local, peerLength = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &localLength) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLength) != 0) continue;
    int localPort = -1, peerPort = -1;
    numericHost(local, localLength, &localPort);
    if (localPort != req.local_port) continue;
    const std::string peerHost = numericHost(peer, peerLength, &peerPort);
    if (peerPort == req.remote_port && peerHost == req.remote_addr) return fd;
  }
  return kSocketGone;
}

// Whether the peer closed (or reset) the connection. Data waiting to be read (a pipelined
// request) means it is still there.
bool peerGone(int fd) {
  if (fd == kSocketGone) return true;
  if (fd < 0) return false;
  pollfd p{.fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void sendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void sendError(httplib::Response& res, const ApiError& e) {
  sendJson(res, e.status(), errorJson(e));
}

}  // namespace

struct HttpServer::Impl {
  Impl(const ServedModel& m, EngineLoop& l, ServerOptions o)
      : model(m), loop(l), options(std::move(o)), created(std::time(nullptr)) {}

  struct InFlight;
  void routes();
  void complete(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void answerWhole(CompletionSession& session, const AnswerHeader& header,
                   const httplib::Request& req, httplib::Response& res);
  void answerStream(std::shared_ptr<CompletionSession> session, const AnswerHeader& header,
                    httplib::Response& res, std::shared_ptr<InFlight> inFlight);
  void finished(const CompletionSession& session) { metrics.countRequest(session.outcome()); }

  // Completion requests in flight: from the handler's start until their answer is written (a
  // stream's provider is released with the response). drain() waits for none.
  struct InFlight {
    explicit InFlight(Impl& impl) : impl(impl) {
      std::lock_guard<std::mutex> lock(impl.inFlightMutex);
      ++impl.inFlight;
    }
    ~InFlight() {
      {
        std::lock_guard<std::mutex> lock(impl.inFlightMutex);
        --impl.inFlight;
      }
      impl.inFlightDone.notify_all();
    }
    Impl& impl;
  };
  std::mutex inFlightMutex;
  std::condition_variable inFlightDone;
  int64_t inFlight = 0;
  std::atomic<bool> draining{false};
  std::atomic<bool> runReturned{false};

  const ServedModel& model;
  EngineLoop& loop;
  ServerOptions options;
  int64_t created;
  ServerMetrics metrics;
  httplib::Server server;
};

void HttpServer::Impl::routes() {
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    complete(Endpoint::kChat, req, res);
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    complete(Endpoint::kCompletion, req, res);
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    sendJson(res, 200, modelsJson(model.name, created));
  });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    sendJson(res, 200, {{"status", "ok"}});
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(loop.snapshot()), "text/plain; version=0.0.4");
  });
  // Every answer of status >= 400 passes here: routing failures (404, or 405 for a known path)
  // and cpp-httplib's own (413 over the body limit, 400 unreadable request) get an error object;
  // all are counted.
  server.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
    // A whole answer whose client left: nothing is sent, nothing counted as an error.
    if (res.status == kClientGone) return httplib::Server::HandlerResponse::Handled;
    if (res.body.empty()) {
      const Route* route = findRoute(req.path);
      if (res.status == 404 && route) {
        res.status = 405;
        res.set_header("Allow", route->method);
        sendError(res, ApiError(405, "invalid_request_error",
                                detail::concat("method ", req.method, " is not allowed on ",
                                               route->path, " (use ", route->method, ")")));
      } else if (res.status == 404) {
        sendError(res,
                  ApiError(404, "not_found_error",
                           detail::concat("no route ", req.method, " ", quoteShort(req.path))));
      } else if (res.status == 413) {
        sendError(res, ApiError(413, "invalid_request_error",
                                detail::concat("the request body is over ", options.maxBodyBytes,
                                               " bytes (serve --max-body-bytes)")));
      } else {
        sendError(res, ApiError(res.status, "invalid_request_error",
                                detail::concat("the HTTP request could not be read (status ",
                                               res.status, ")")));
      }
    }
    metrics.countError(res.status);
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        ES_LOG_ERROR("request failed: ", what);
        sendError(res, ApiError(500, "server_error", what));
      });
  server.set_payload_max_length(options.maxBodyBytes);
  const size_t threads = static_cast<size_t>(options.threads);
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
}

void HttpServer::Impl::complete(Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
  auto inFlight = std::make_shared<InFlight>(*this);
  if (draining) {
    sendError(res, ApiError(503, "overloaded_error", "the server is shutting down", {},
                            "server_shutting_down"));
    return;
  }
  std::shared_ptr<CompletionSession> session;
  try {
    CompletionRequest request = parseCompletionRequest(endpoint, req.body, model.name);
    session = std::make_shared<CompletionSession>(model, loop, std::move(request));
  } catch (const ApiError& e) {
    sendError(res, e);
    return;
  }
  const AnswerHeader header{.endpoint = endpoint,
                            .id = newCompletionId(endpoint),
                            .created = static_cast<int64_t>(std::time(nullptr)),
                            .model = model.name};
  if (session->request().stream) {
    answerStream(std::move(session), header, res, std::move(inFlight));
  } else {
    answerWhole(*session, header, req, res);
  }
}

void HttpServer::Impl::answerWhole(CompletionSession& session, const AnswerHeader& header,
                                   const httplib::Request& req, httplib::Response& res) {
  const int fd = connectionSocket(req);
  std::string text;
  while (!session.finished()) {
    text += session.next(kPollInterval);
    if (!session.finished() && peerGone(fd)) {
      session.cancel();  // nobody to answer: free the slot and pages now
      res.status = kClientGone;
      finished(session);
      return;
    }
  }
  finished(session);
  if (session.outcome() == runtime::FinishReason::kError) {
    sendError(res, ApiError(500, "server_error",
                            detail::concat("the request failed: ", session.error())));
    return;
  }
  sendJson(
      res, 200,
      completionJson(header, text, runtime::finishReasonName(session.outcome()), session.usage()));
}

void HttpServer::Impl::answerStream(std::shared_ptr<CompletionSession> session,
                                    const AnswerHeader& header, httplib::Response& res,
                                    std::shared_ptr<InFlight> inFlight) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, session, header](size_t, httplib::DataSink& sink) {
        const auto send = [&sink](const std::string& data) {
          return sink.is_writable() && sink.write(data.data(), data.size());
        };
        bool ok = true;
        if (header.endpoint == Endpoint::kChat) {
          ok = send(sseEvent(chunkJson(header, std::string(), std::nullopt, /*role=*/true)));
        }
        while (ok && !session->finished()) {
          const std::string piece = session->next(kPollInterval);
          if (!piece.empty()) {
            ok = send(sseEvent(chunkJson(header, piece, std::nullopt)));
          } else if (!session->finished()) {
            ok = sink.is_writable();
          }
        }
        if (!ok) {
          session->cancel();  // the client left
          finished(*session);
          return false;
        }
        finished(*session);
        if (session->outcome() == runtime::FinishReason::kError) {
          ES_LOG_WARN("streamed request failed: ", session->error());
        }
        const std::string reason = runtime::finishReasonName(session->outcome());
        ok = send(sseEvent(chunkJson(header, std::nullopt, reason)));
        if (ok && session->request().includeUsage) {
          ok = send(sseEvent(usageChunkJson(header, session->usage())));
        }
        if (ok) ok = send(std::string(kSseDone));
        if (ok) sink.done();
        return ok;
      },
      [this, session, inFlight](bool) {
        // Also reached when the client left before the stream began: cancel if still running.
        if (!session->finished()) {
          session->cancel();
          finished(*session);
        }
      });
}

HttpServer::HttpServer(const ServedModel& model, EngineLoop& loop, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, loop, std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int32_t HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    const int port = impl_->server.bind_to_any_port(o.host);
    ES_CHECK_ARG(port > 0, "serve", "--host", o.host,
                 "cannot be listened on (not an address of this machine)");
    return port;
  }
  ES_CHECK_ARG(impl_->server.bind_to_port(o.host, o.port), "serve", "--host:--port",
               o.host + ":" + std::to_string(o.port),
               "cannot be listened on (the port is in use or privileged, or the host is not an "
               "address of this machine)");
  return o.port;
}

void HttpServer::run() {
  impl_->server.listen_after_bind();
  impl_->runReturned = true;
}

void HttpServer::stop() { impl_->server.stop(); }

void HttpServer::drain() {
  impl_->draining = true;
  {
    std::unique_lock<std::mutex> lock(impl_->inFlightMutex);
    impl_->inFlightDone.wait(lock, [this] { return impl_->inFlight == 0; });
  }
  // A stop() before run() has started listening is lost: repeat it until run() returns.
  while (!impl_->runReturned) {
    stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServerMetrics& HttpServer::metrics() { return impl_->metrics; }

}  // namespace es::server
