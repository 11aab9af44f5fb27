#include "server/metrics.h"

#include <cstdio>

namespace es::server {
namespace {

constexpr runtime::FinishReason kReasons[] = {
    runtime::FinishReason::kStop, runtime::FinishReason::kLength, runtime::FinishReason::kCancelled,
    runtime::FinishReason::kError};
constexpr int kStatuses[] = {400, 404, 405, 413, 503, 500};

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  header(out, name, type, help);
  out += std::string(name) + " " + number(v) + "\n";
}

}  // namespace

void ServerMetrics::countRequest(runtime::FinishReason finish) {
  requests_[static_cast<size_t>(finish)].fetch_add(1, std::memory_order_relaxed);
}

void ServerMetrics::countError(int status) {
  size_t i = 0;
  while (i + 1 < errors_.size() && kStatuses[i] != status) ++i;
  errors_[i].fetch_add(1, std::memory_order_relaxed);
}

std::string ServerMetrics::render(const EngineSnapshot& e) const {
  std::string out;
  metric(out, "edgespec_requests_running", "gauge", "Requests in the running batch.", e.running);
  metric(out, "edgespec_requests_queued", "gauge", "Requests waiting for a batch slot.", e.queued);
  header(out, "edgespec_requests_total", "counter", "Finished requests by finish reason.");
  for (const runtime::FinishReason f : kReasons) {
    out += std::string("edgespec_requests_total{finish_reason=\"") + runtime::finishReasonName(f) +
           "\"} " +
           std::to_string(requests_[static_cast<size_t>(f)].load(std::memory_order_relaxed)) + "\n";
  }
  header(out, "edgespec_request_errors_total", "counter", "Error answers by HTTP status.");
  for (size_t i = 0; i < errors_.size(); ++i) {
    out += "edgespec_request_errors_total{status=\"" + std::to_string(kStatuses[i]) + "\"} " +
           std::to_string(errors_[i].load(std::memory_order_relaxed)) + "\n";
  }
  metric(out, "edgespec_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
         static_cast<double>(e.promptTokens));
  metric(out, "edgespec_reused_prompt_tokens_total", "counter",
         "Prompt tokens served from prefix-cache pages.",
         static_cast<double>(e.reusedPromptTokens));
  metric(out, "edgespec_generated_tokens_total", "counter", "Generated tokens.",
         static_cast<double>(e.generatedTokens));
  metric(out, "edgespec_mean_accept_length", "gauge",
         "Tokens per speculative verify step over the server's life (0 without a draft).",
         e.meanAcceptLength);
  header(out, "edgespec_verify_width_steps_total", "counter",
         "Engine steps by verify width (1: plain steps; with a draft the width rule picks it).");
  for (size_t w = 1; w < e.widthSteps.size(); ++w) {
    if (e.widthSteps[w] == 0) continue;  // widths the rule never ran (or cannot run)
    out += "edgespec_verify_width_steps_total{width=\"" + std::to_string(w) + "\"} " +
           std::to_string(e.widthSteps[w]) + "\n";
  }
  const int64_t used = e.kvPagesTotal - e.kvPagesFree;
  metric(out, "edgespec_kv_pages_used", "gauge",
         "KV pages in use: by running requests and by prefix-cache records.",
         static_cast<double>(used));
  metric(out, "edgespec_kv_pages_free", "gauge", "KV pages free.",
         static_cast<double>(e.kvPagesFree));
  metric(out, "edgespec_kv_pages_total", "gauge", "KV pages of the pool.",
         static_cast<double>(e.kvPagesTotal));
  metric(out, "edgespec_kv_pages_cached", "gauge",
         "KV pages held by the prefix cache's published records.",
         static_cast<double>(e.kvPagesCached));
  header(out, "edgespec_step_seconds", "summary", "Wall time of the engine's steps.");
  out += "edgespec_step_seconds_sum " + number(e.stepSecondsSum) + "\n";
  out += "edgespec_step_seconds_count " + std::to_string(e.stepCount) + "\n";
  return out;
}

}  // namespace es::server
