#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include "commands.hpp"
#include "server.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

// A timeout given in (fractional) seconds: between 1 ms and one day.
struct Seconds {
  double value;
  std::chrono::milliseconds* target;
};

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP and gRPC (KServe v2 / Open Inference Protocol)");
  auto options = std::make_shared<serve::ServerOptions>();
  auto timeouts = std::make_shared<std::vector<Seconds>>();
  timeouts->reserve(4);
  cmd->add_option("MODEL", options->model_path, "the .embt model")->required();
  cmd->add_option("--name", options->name, "model name in URLs (default: the file's stem)");
  cmd->add_option("--host", options->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", options->port, "port (default 8080)")->check(CLI::Range(1, 65535));
  cmd->add_option("--grpc-port", options->grpc_port,
                  "also serve KServe v2 over gRPC (inference.GRPCInferenceService) on this port")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--grpc-max-calls", options->grpc_max_calls,
                  "gRPC inference calls in progress at once; more get UNAVAILABLE (default 1024)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
  add_open_options(cmd, options->open, true);
  add_prefetch_level_option(cmd, options->embedder.prefetch_level);
  add_min_rows_ahead_option(cmd, options->embedder.min_rows_ahead);
  cmd->add_option("--threads", options->threads, "inference worker threads (default: one per hardware thread)")
      ->check(CLI::Range(1u, 1024u));
  cmd->add_option("--max-batch-tokens", options->max_batch_tokens, "largest batch x length accepted (default 65536)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  cmd->add_option("--max-body-bytes", options->max_body_bytes,
                  "largest request body (default: what --max-batch-tokens needs as JSON, 64 bytes a token + 1 MiB)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  cmd->add_option("--max-connections", options->max_connections,
                  "open client connections; more are answered 503 and closed (default 4096)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 20));
  cmd->add_option("--max-inflight-bytes", options->max_inflight_bytes,
                  "memory all requests in flight may hold (bodies, parsed ids, embeddings, response text); "
                  "past it requests get 503 (default 1 GiB)")
      ->check(CLI::Range(std::uint64_t{1} << 16, std::uint64_t{1} << 46));
  const auto add_timeout = [&](const char* flag, std::chrono::milliseconds* target, const char* help) {
    timeouts->push_back({static_cast<double>(target->count()) / 1000.0, target});
    cmd->add_option(flag, timeouts->back().value, help)->check(CLI::Range(0.001, 86400.0));
  };
  add_timeout("--header-timeout", &options->header_timeout,
              "seconds from a request's first byte to the end of its headers, else 408 (default 10)");
  add_timeout("--request-timeout", &options->request_timeout,
              "seconds from a request's first byte to the end of its body, and for the client to take the "
              "response (default 30)");
  add_timeout("--idle-timeout", &options->idle_timeout, "seconds a keep-alive connection may sit idle (default 60)");
  add_timeout("--drain-timeout", &options->drain_timeout,
              "seconds SIGTERM waits for requests in flight before closing them (default 10)");
  return [options, timeouts]() {
    for (const Seconds& t : *timeouts) *t.target = std::chrono::milliseconds(std::llround(t.value * 1000.0));
    if (options->name.empty()) options->name = std::filesystem::path(options->model_path).stem().string();
    if (Status s = serve::run_server(*options); !s) return report(s.error());
    return kExitOk;
  };
}

}  // namespace embedrt::cli
