// `embedrt serve`: the KServe v2 HTTP endpoints over one hot-reloadable model.
#pragma once

#include <cstdint>
#include <string>

namespace embedrt::serve {

struct ServerOptions {
  std::string model_path;
  std::string name;  // default: the file's stem
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 8;   // HTTP worker threads
  std::uint64_t max_batch_tokens = 65536;
  std::uint64_t max_body_bytes = 64u << 20;
};

// Serves until SIGTERM or SIGINT (graceful: in-flight requests finish), then returns the exit
// code: 0 after a clean stop, 1 when the model cannot be loaded or the port cannot be bound.
int run_server(const ServerOptions& options);

}  // namespace embedrt::serve
