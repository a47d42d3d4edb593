#include "metrics.hpp"

#include <cstdio>

namespace embedrt::serve {

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

std::string Metrics::render(const std::string& model, std::uint64_t generation) const {
  std::string out;
  char line[256];
  const auto add = [&](const char* text) { out += text; };
  const auto counter = [&](const char* name, const char* help, std::uint64_t value) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s counter\n%s{model=\"%s\"} %llu\n", name, help, name, name,
                  model.c_str(), static_cast<unsigned long long>(value));
    add(line);
  };
  counter("embedrt_requests_total", "Inference requests handled.", requests_.load());
  counter("embedrt_errors_total", "Inference requests answered with a 4xx or 5xx status.", errors_.load());
  counter("embedrt_tokens_total", "Tokens embedded.", tokens_.load());
  counter("embedrt_reloads_total", "Successful model reloads.", reloads_.load());
  counter("embedrt_failed_reloads_total", "Reloads refused (the old model kept serving).", failed_reloads_.load());
  std::snprintf(line, sizeof line, "# HELP embedrt_model_generation Loads of the served model.\n# TYPE embedrt_model_generation gauge\n"
                "embedrt_model_generation{model=\"%s\"} %llu\n", model.c_str(), static_cast<unsigned long long>(generation));
  add(line);
  add("# HELP embedrt_request_duration_seconds Inference request latency.\n# TYPE embedrt_request_duration_seconds histogram\n");
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b <= kBuckets.size(); ++b) {
    cumulative += buckets_[b].load();
    if (b < kBuckets.size()) {
      std::snprintf(line, sizeof line, "embedrt_request_duration_seconds_bucket{model=\"%s\",le=\"%g\"} %llu\n", model.c_str(),
                    kBuckets[b], static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof line, "embedrt_request_duration_seconds_bucket{model=\"%s\",le=\"+Inf\"} %llu\n",
                    model.c_str(), static_cast<unsigned long long>(cumulative));
    }
    add(line);
  }
  std::snprintf(line, sizeof line, "embedrt_request_duration_seconds_sum{model=\"%s\"} %.6f\nembedrt_request_duration_seconds_count{model=\"%s\"} %llu\n",
                model.c_str(), static_cast<double>(latency_micros_.load()) / 1e6, model.c_str(),
                static_cast<unsigned long long>(cumulative));
  add(line);
  return out;
}

}  // namespace embedrt::serve
