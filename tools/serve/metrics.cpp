#include "metrics.hpp"

#include <cstdio>

namespace embedrt::serve {

std::string prometheus_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Metrics::record(int status, std::uint64_t tokens, double seconds) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (status >= 400) errors_.fetch_add(1, std::memory_order_relaxed);
  tokens_.fetch_add(tokens, std::memory_order_relaxed);
  std::size_t b = 0;
  while (b < kBuckets.size() && seconds > kBuckets[b]) ++b;
  buckets_[b].fetch_add(1, std::memory_order_relaxed);
  latency_micros_.fetch_add(static_cast<std::uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

void Metrics::record_reload(bool ok) { (ok ? reloads_ : failed_reloads_).fetch_add(1, std::memory_order_relaxed); }

std::string Metrics::render(const std::string& model, const Gauges& gauges) const {
  const std::string label = "{model=\"" + prometheus_label(model) + "\"";
  std::string out;
  const auto sample = [&](const char* name, const std::string& extra_labels, const std::string& value) {
    out += name;
    out += label + extra_labels + "} " + value + "\n";
  };
  const auto metric = [&](const char* name, const char* type, const char* help, std::uint64_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    sample(name, "", std::to_string(value));
  };
  metric("embedrt_requests_total", "counter", "Inference requests handled.", requests_.load());
  metric("embedrt_errors_total", "counter", "Inference requests answered with a 4xx or 5xx status.", errors_.load());
  metric("embedrt_tokens_total", "counter", "Tokens embedded.", tokens_.load());
  metric("embedrt_reloads_total", "counter", "Successful model reloads.", reloads_.load());
  metric("embedrt_failed_reloads_total", "counter", "Reloads refused (the old model kept serving).", failed_reloads_.load());
  metric("embedrt_model_generation", "gauge", "Loads of the served model.", gauges.generation);
  metric("embedrt_model_ready", "gauge", "1 when the model answers requests, 0 while its file is being rewritten.",
         gauges.ready ? 1 : 0);
  metric("embedrt_open_connections", "gauge", "Client connections open.", gauges.open_connections);
  metric("embedrt_inflight_bytes", "gauge", "Bytes reserved by requests in flight (--max-inflight-bytes).",
         gauges.inflight_bytes);
  metric("embedrt_inflight_limit_bytes", "gauge", "The in-flight memory budget.", gauges.inflight_limit);
  out += "# HELP embedrt_request_duration_seconds Inference request latency.\n"
         "# TYPE embedrt_request_duration_seconds histogram\n";
  std::uint64_t cumulative = 0;
  char number[64];
  for (std::size_t b = 0; b <= kBuckets.size(); ++b) {
    cumulative += buckets_[b].load();
    if (b < kBuckets.size()) {
      std::snprintf(number, sizeof number, "%g", kBuckets[b]);
    } else {
      std::snprintf(number, sizeof number, "+Inf");
    }
    sample("embedrt_request_duration_seconds_bucket", std::string(",le=\"") + number + "\"", std::to_string(cumulative));
  }
  std::snprintf(number, sizeof number, "%.6f", static_cast<double>(latency_micros_.load()) / 1e6);
  sample("embedrt_request_duration_seconds_sum", "", number);
  sample("embedrt_request_duration_seconds_count", "", std::to_string(cumulative));
  return out;
}

}  // namespace embedrt::serve
