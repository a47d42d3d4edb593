// Counters and a latency histogram, rendered in the Prometheus text format. Lock-free updates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace embedrt::serve {

class Metrics {
 public:
  static constexpr std::array<double, 12> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                      0.01,   0.025,   0.05,   0.1,   0.25,   1.0};

  void record(int status, std::uint64_t tokens, double seconds);
  void record_reload(bool ok);

  // Values read at render time.
  struct Gauges {
    std::uint64_t generation = 0;
    bool ready = false;
    std::uint64_t open_connections = 0;
    std::uint64_t inflight_bytes = 0, inflight_limit = 0;
  };
  std::string render(const std::string& model, const Gauges& gauges) const;

 private:
  std::atomic<std::uint64_t> requests_{0}, errors_{0}, tokens_{0}, reloads_{0}, failed_reloads_{0};
  std::array<std::atomic<std::uint64_t>, kBuckets.size() + 1> buckets_{};  // last: +Inf
  std::atomic<std::uint64_t> latency_micros_{0};
};

// A label value escaped as the Prometheus text format requires (backslash, double quote, newline).
std::string prometheus_label(const std::string& value);

}  // namespace embedrt::serve
