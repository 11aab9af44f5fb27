#pragma once
// The server's counters and their Prometheus text exposition (GET /metrics). Counters kept by
// the HTTP side (finished requests by finish reason, error answers by status) live here; the
// engine's state comes from EngineLoop::snapshot().
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "runtime/generation.h"
#include "server/engine_loop.h"

namespace es::server {

class ServerMetrics {
 public:
  // A finished request, labelled by runtime::finishReasonName.
  void countRequest(runtime::FinishReason finish);
  // An error answer; statuses other than 400, 404, 405, 413 and 503 count as "500".
  void countError(int status);

  // The Prometheus text format (version 0.0.4): every metric with # HELP and # TYPE lines.
  std::string render(const EngineSnapshot& engine) const;

 private:
  std::array<std::atomic<int64_t>, 4> requests_{};  // by runtime::FinishReason
  std::array<std::atomic<int64_t>, 6> errors_{};
};

}  // namespace es::server
