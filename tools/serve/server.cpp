#include "server.hpp"

#include <cstdio>
#include <memory>
#include <thread>

#include "grpc_server.hpp"
#include "http_server.hpp"
#include "inflight_budget.hpp"
#include "service.hpp"

namespace embedrt::serve {

std::uint64_t default_max_body_bytes(std::uint64_t max_batch_tokens) {
  const std::uint64_t per_token = 2 * 32;
  if (max_batch_tokens > (UINT64_MAX - (1u << 20)) / per_token) return UINT64_MAX;
  return max_batch_tokens * per_token + (1u << 20);
}

Status run_server(const ServerOptions& options) {
  InflightBudget budget(options.max_inflight_bytes);
  Service service({options.model_path, options.name, options.max_batch_tokens, options.open, options.embedder},
                  budget);
  if (Status s = service.load(); !s) return s;
  HttpLimits limits;
  limits.max_connections = options.max_connections;
  limits.max_body_bytes = options.max_body_bytes.value_or(default_max_body_bytes(options.max_batch_tokens));
  limits.header_timeout = options.header_timeout;
  limits.request_timeout = options.request_timeout;
  limits.idle_timeout = options.idle_timeout;
  limits.drain_timeout = options.drain_timeout;
  const unsigned workers = options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());

  HttpServer* running = nullptr;
  std::unique_ptr<GrpcServer> grpc;
  HttpHooks hooks;
  hooks.on_reload_signal = [&service] { (void)service.load(); };  // a refused reload says why and keeps the old model
  hooks.on_tick = [&] {
    service.watch_file([&](std::function<void()> work) { running->post_work(std::move(work)); });
    if (grpc) grpc->enforce_deadlines();
  };
  // gRPC drains with HTTP, on the same signal and deadline, and finishes before the workers stop.
  hooks.on_drain = [&] { if (grpc) grpc->begin_drain(options.drain_timeout); };
  hooks.on_stop_now = [&] { if (grpc) grpc->stop_now(); };
  hooks.before_workers_stop = [&] { if (grpc) grpc->wait(); };
  HttpServer server(limits, service, budget, workers, std::move(hooks));
  running = &server;
  service.open_connections = [&server] { return server.open_connections(); };
  if (auto error = server.bind(options.host, options.port)) return Error(ErrorCode::kIo, *error);
  if (options.grpc_port) {
    GrpcLimits grpc_limits;
    grpc_limits.max_message_bytes = limits.max_body_bytes;
    grpc_limits.max_calls = options.grpc_max_calls;
    grpc_limits.handshake_timeout = options.header_timeout;
    grpc_limits.idle_timeout = options.idle_timeout;
    grpc_limits.request_timeout = options.request_timeout;
    grpc = std::make_unique<GrpcServer>(service, grpc_limits,
                                        [&server](std::function<void()> work) { server.post_work(std::move(work)); });
    if (auto error = grpc->start(options.host, *options.grpc_port)) return Error(ErrorCode::kIo, *error);
    std::fprintf(stderr, "embedrt serve: gRPC (inference.GRPCInferenceService) on %s:%d (message <= %llu bytes, <= %llu calls)\n",
                 options.host.c_str(), *options.grpc_port, static_cast<unsigned long long>(grpc_limits.max_message_bytes),
                 static_cast<unsigned long long>(grpc_limits.max_calls));
  }
  std::fprintf(stderr, "embedrt serve: listening on http://%s:%d/v2/models/%s (%u workers, body <= %llu bytes, "
               "in-flight <= %llu bytes, <= %llu connections)\n", options.host.c_str(), options.port,
               options.name.c_str(), workers, static_cast<unsigned long long>(limits.max_body_bytes),
               static_cast<unsigned long long>(options.max_inflight_bytes),
               static_cast<unsigned long long>(limits.max_connections));
  server.run();
  std::fprintf(stderr, "embedrt serve: stopped\n");
  return {};
}

}  // namespace embedrt::serve
