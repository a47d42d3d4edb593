// KServe v2 over gRPC for `embedrt serve --grpc-port N`, on Debian's gRPC C++ (1.51).
//
// Why the callback API: a call costs the server nothing while its client is slow — gRPC's own
// threads read and write every connection, and a handler runs only once a whole request has
// arrived. Inference then runs on the same --threads workers as REST (posted there; the gRPC
// thread returns at once), so both protocols share one pool of CPUs, one in-flight memory budget
// and one model slot. The synchronous API would instead hold one gRPC thread per call for its
// whole life, in a second pool competing with the workers for the cores; the completion-queue
// async API would do what the callback API does with a hand-written state machine.
//
// Limits, as REST's (README, "Reliability"):
// - a request message over --max-body-bytes is refused by gRPC itself (RESOURCE_EXHAUSTED);
// - a request's decoded memory (the message, the ids it decodes to) and its response (the
//   outputs and their serialized copy) are reserved from --max-inflight-bytes before they are made;
// - at most --grpc-max-calls inference calls are in progress at once (past it: UNAVAILABLE);
// - a call not finished --request-timeout after its request arrived is cancelled (the client
//   also gets its own deadline, which gRPC enforces); HTTP/2 handshakes must finish within
//   --header-timeout; a connection without calls for --idle-timeout is closed, and every
//   connection is ended (GOAWAY) at --idle-timeout of age, calls in it getting --request-timeout
//   of grace (gRPC 1.51 would otherwise wait forever for a message that was declared, not sent);
// - gRPC's own buffers are bounded by a resource quota (kMemoryQuota in grpc_server.cpp);
// - the port is bound exclusively (no SO_REUSEPORT: gRPC sets it by default);
// - SIGTERM: no new calls (gRPC answers UNAVAILABLE), calls in progress finish for up to
//   --drain-timeout, then are cancelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace embedrt::serve {

class Service;

struct GrpcLimits {
  std::uint64_t max_message_bytes = 8 << 20;
  std::uint64_t max_calls = 1024;
  std::chrono::milliseconds handshake_timeout{10'000}, idle_timeout{60'000}, request_timeout{30'000};
};

class GrpcServer {
 public:
  // `run_on_worker` queues work on the inference workers (HttpServer::post_work).
  GrpcServer(Service& service, const GrpcLimits& limits, std::function<void(std::function<void()>)> run_on_worker);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds host:port exclusively and starts serving; the error names the address and the reason.
  std::optional<std::string> start(const std::string& host, int port);

  // Cancels calls past --request-timeout. Called every tick (250 ms) on the HTTP I/O thread.
  void enforce_deadlines();
  // SIGTERM: stop taking calls, let those in progress finish for `timeout`. Returns at once.
  void begin_drain(std::chrono::milliseconds timeout);
  // A second signal: cancel every call in progress.
  void stop_now();
  // Blocks until the drain is over (starts an immediate one if none was begun). The workers must
  // still run: a call in progress finishes on one.
  void wait();

  std::uint64_t calls_in_progress() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace embedrt::serve
