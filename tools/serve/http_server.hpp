// The HTTP/1.1 layer of `embedrt serve`, on Boost.Beast and Asio (Debian's libboost-dev).
//
// Why an event loop: a connection costs a socket and a few KiB, never a thread, so idle and slow
// clients (slowloris) cannot starve anyone. One I/O thread reads and writes every connection;
// requests that do real work (inference, reload) run on a pool of worker threads and hand their
// response back to the I/O thread. Beast gives a strict HTTP/1.1 parser with header and body
// limits, pipelining and chunked bodies; Asio gives timers and signals on the same loop. (cpp-httplib,
// used before, is thread-per-connection; libevent's evhttp has no per-phase deadlines and a looser
// parser.)
//
// Every connection lives under deadlines: idle (between requests), header (from a request's
// first byte to its blank line), request (to the end of its body) and write (the client must take
// the response). A request that misses its deadline gets 408 and the connection is closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "inflight_budget.hpp"

namespace embedrt::serve {

struct HttpLimits {
  std::uint64_t max_connections = 4096;
  std::uint64_t max_body_bytes = 8 << 20;
  std::uint32_t max_header_bytes = 16 * 1024;
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds request_timeout{30'000};
  std::chrono::milliseconds drain_timeout{10'000};
};

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // as sent, e.g. "/v2/models/gpt2/infer?x=1"
  std::string body;
  std::optional<std::string> inference_header_length;  // Inference-Header-Content-Length
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  BudgetLease lease;  // memory this response holds, returned once it is written
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Cheap requests (health, metadata, metrics) are answered on the I/O thread; the rest wait for
  // a worker, so a long inference never delays a readiness probe.
  virtual bool is_cheap(const HttpRequest& request) const = 0;
  virtual HttpResponse handle(HttpRequest&& request) = 0;
};

struct HttpHooks {
  std::function<void()> on_reload_signal;  // SIGHUP, run on a worker
  std::function<void()> on_tick;           // every `tick` on the I/O thread (file watching)
  std::chrono::milliseconds tick{250};
  // Another transport sharing the workers (gRPC) drains with this one: on_drain at the first
  // SIGTERM/SIGINT (I/O thread; must not block), on_stop_now at a second one, and
  // before_workers_stop once the loop has ended, while the workers still run (it may block until
  // that transport's calls are done: they may need a worker to finish).
  std::function<void()> on_drain, on_stop_now, before_workers_stop;
};

// A JSON error body, as every refusal of the HTTP layer sends it.
std::string http_error_json(const std::string& message);

class HttpServer {
 public:
  HttpServer(const HttpLimits& limits, RequestHandler& handler, InflightBudget& budget, unsigned workers, HttpHooks hooks);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds exclusively (no SO_REUSEPORT: a second server on a taken port is an error, never a
  // silent split of traffic). The error names the address.
  std::optional<std::string> bind(const std::string& host, int port);

  // Serves until SIGTERM or SIGINT, then drains: stops accepting, closes idle connections, lets
  // requests already begun (being read, processed or written) finish for up to drain_timeout,
  // closes whatever is left, and returns. A second signal stops at once.
  void run();

  std::uint64_t open_connections() const noexcept;
  // Runs `work` on a worker thread (reloads: they verify every checksum, seconds on big files).
  void post_work(std::function<void()> work);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace embedrt::serve
