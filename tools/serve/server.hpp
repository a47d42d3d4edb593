// `embedrt serve`: the KServe v2 endpoints over one hot-reloadable model, over HTTP and,
// with a gRPC port, over gRPC too.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "embedrt/embedder.hpp"
#include "embedrt/error.hpp"
#include "embedrt/table_file.hpp"

namespace embedrt::serve {

struct ServerOptions {
  std::string model_path;
  std::string name;  // default: the file's stem
  // Residency and locking of the model (README "Residency"). Populated at open by default: a
  // server reads the file once at startup instead of in its first requests (measured: Gemma-3's
  // first request 2.2 s from a cold page cache when faulted lazily), and processes still share it.
  OpenOptions open{.residency = Residency::kPopulate};
  // The embedder's memory choices: prefetch level and distance (--prefetch-level, --min-rows-ahead).
  EmbedderOptions embedder;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::optional<int> grpc_port;  // KServe v2 over gRPC as well, when given
  std::uint64_t grpc_max_calls = 1024;
  unsigned threads = 0;  // inference workers; 0: one per hardware thread
  std::uint64_t max_batch_tokens = 65536;
  std::optional<std::uint64_t> max_body_bytes;  // default: default_max_body_bytes(max_batch_tokens)
  std::uint64_t max_connections = 4096;
  std::uint64_t max_inflight_bytes = std::uint64_t{1} << 30;
  std::chrono::milliseconds header_timeout{10'000}, request_timeout{30'000}, idle_timeout{60'000},
      drain_timeout{10'000};
};

// The largest body a request of `max_batch_tokens` needs: input_ids and token_type_ids as JSON
// (up to 32 bytes per value with separators and spaces) plus 1 MiB for everything else.
std::uint64_t default_max_body_bytes(std::uint64_t max_batch_tokens);

// Serves until SIGTERM or SIGINT (graceful: in-flight requests finish), then returns success; an
// error when the model cannot be loaded (its own code) or the address cannot be bound (kIo).
Status run_server(const ServerOptions& options);

}  // namespace embedrt::serve
