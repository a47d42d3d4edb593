#include "http_server.hpp"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace embedrt::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

std::string http_error_json(const std::string& message) {
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

// Connections refused past --max-connections still get a 503; past this many refusals in
// flight, further ones are closed without a word so refusing stays cheap.
constexpr std::uint64_t kMaxRefusalsInFlight = 256;
// After a response that closes the connection, unread request bytes are drained for this long,
// so the client reads the response instead of a reset.
constexpr std::chrono::milliseconds kLinger{1000};
// Bytes read from a socket at a time.
constexpr std::size_t kReadChunk = 16 * 1024;

}  // namespace

class Connection;

struct HttpServer::Impl {
  Impl(const HttpLimits& limits_, RequestHandler& handler_, InflightBudget& budget_, unsigned workers, HttpHooks hooks_)
      : limits(limits_), handler(handler_), budget(budget_), hooks(std::move(hooks_)), pool(std::max(1u, workers)) {}

  void accept();
  void refuse_connection(tcp::socket socket);
  void wait_for_signal();
  void tick();
  void drain();
  void remember(Connection* c, bool counted);
  void forget(Connection* c, bool counted);

  HttpLimits limits;
  RequestHandler& handler;
  InflightBudget& budget;
  HttpHooks hooks;

  // Declared before the io_context: connections still queued in it when it is destroyed unregister
  // themselves from here.
  std::mutex live_mutex;
  std::unordered_set<Connection*> live;
  std::atomic<std::uint64_t> connections{0};
  std::atomic<std::uint64_t> refusals{0};
  std::atomic<bool> draining{false};

  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc, SIGTERM, SIGINT, SIGHUP};
  net::steady_timer tick_timer{ioc}, drain_timer{ioc}, accept_retry{ioc};
  net::thread_pool pool;
};

// One client connection: a loop of wait -> read header -> read body -> process -> write, each
// phase under its deadline. All members are touched on the I/O thread only; processing runs on
// the pool with the request moved into the task.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& server, tcp::socket socket, bool counted)
      : server_(server),
        socket_(std::move(socket)),
        deadline_(server.ioc),
        counted_(counted),
        // Headers plus one read of body: what a connection holds while a request arrives (the
        // body itself moves into the request, reserved from the budget).
        buffer_(server.limits.max_header_bytes + kReadChunk) {
    server_.remember(this, counted_);
  }
  ~Connection() { server_.forget(this, counted_); }

  void start() { wait_for_request(); }

  void start_refused() {
    keep_alive_ = false;
    refuse(503, "the server has " + std::to_string(server_.limits.max_connections) +
                    " open connections, its limit (--max-connections); retry later", true);
  }

  // Drain: idle connections are closed now; a request already begun may finish (reading,
  // processing and writing it) until the drain deadline cuts it.
  void close_if_idle() {
    if (phase_ == Phase::kIdle) close();
  }

 private:
  enum class Phase { kIdle, kReading, kProcessing, kWriting, kLingering, kClosed };

  void arm(Clock::time_point when) {
    ++deadline_generation_;
    deadline_.expires_at(when);
    deadline_.async_wait([self = shared_from_this(), generation = deadline_generation_](error_code ec) {
      if (!ec && generation == self->deadline_generation_) self->on_deadline();
    });
  }
  void disarm() {
    ++deadline_generation_;
    deadline_.cancel();
  }

  void on_deadline() {
    switch (phase_) {
      case Phase::kReading: {
        // Cancel the read; its handler answers 408.
        timed_out_ = true;
        error_code ignored;
        socket_.cancel(ignored);
        break;
      }
      case Phase::kIdle:
      case Phase::kWriting:
      case Phase::kLingering: close(); break;
      case Phase::kProcessing:
      case Phase::kClosed: break;
    }
  }

  void wait_for_request() {
    if (server_.draining) return close();
    phase_ = Phase::kIdle;
    if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
    arm(Clock::now() + server_.limits.idle_timeout);
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, std::size_t n) {
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    phase_ = Phase::kReading;
    timed_out_ = false;
    request_start_ = Clock::now();
    parser_.emplace();
    parser_->header_limit(server_.limits.max_header_bytes);
    parser_->body_limit(server_.limits.max_body_bytes);
    arm(request_start_ + std::min(server_.limits.header_timeout, server_.limits.request_timeout));
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (ec) return read_failed(ec, "headers", server_.limits.header_timeout, "--header-timeout");
    const auto& request = parser_->get();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    if (request.count(http::field::content_length) > 1) {
      return refuse(400, "the request has more than one Content-Length header");
    }
    const std::uint64_t max_body = server_.limits.max_body_bytes;
    const auto length = parser_->content_length();
    if (length && *length > max_body) {
      return refuse(413, "the request body of " + std::to_string(*length) + " bytes is larger than --max-body-bytes " +
                             std::to_string(max_body));
    }
    // The body is reserved before it is read: past the budget the request is refused, not buffered.
    const std::uint64_t body_bytes = length ? *length : (parser_->chunked() ? max_body : 0);
    if (body_bytes > 0) {
      body_lease_ = server_.budget.try_reserve(body_bytes);
      if (!body_lease_) {
        return refuse(503, "the server holds its in-flight memory budget (--max-inflight-bytes " +
                               std::to_string(server_.budget.limit()) + "); retry later", true);
      }
    }
    if (parser_->is_done()) return dispatch();
    if (beast::iequals(request[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(socket_, net::buffer(kContinue), [self = shared_from_this()](error_code e, std::size_t) {
        if (e) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    arm(request_start_ + server_.limits.request_timeout);
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) return self->read_failed(ec, "body", self->server_.limits.request_timeout, "--request-timeout");
      self->dispatch();
    });
  }

  void read_failed(error_code ec, const char* part, std::chrono::milliseconds limit, const char* flag) {
    if (phase_ == Phase::kClosed) return;
    if (timed_out_) {
      return refuse(408, std::string("the request's ") + part + " did not arrive within " + seconds_text(limit) + " (" +
                             flag + ")");
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return refuse(431, "the request headers exceed " + std::to_string(server_.limits.max_header_bytes) + " bytes");
    }
    if (ec == http::error::body_limit) {
      return refuse(413, "the request body is larger than --max-body-bytes " + std::to_string(server_.limits.max_body_bytes));
    }
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return close();  // the client went away (or the server is draining)
    }
    refuse(400, "malformed HTTP request: " + ec.message());
  }

  void dispatch() {
    disarm();
    phase_ = Phase::kProcessing;
    auto message = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.body = std::move(message.body());
    if (auto it = message.find("Inference-Header-Content-Length"); it != message.end()) {
      request.inference_header_length = std::string(it->value());
    }
    if (server_.handler.is_cheap(request)) {
      body_lease_.release();
      return send(handle_safely(server_.handler, std::move(request)));
    }
    net::post(server_.pool, [self = shared_from_this(), request = std::move(request), lease = std::move(body_lease_)]() mutable {
      HttpResponse response = handle_safely(self->server_.handler, std::move(request));
      lease.release();
      net::post(self->server_.ioc, [self, response = std::move(response)]() mutable { self->send(std::move(response)); });
    });
  }

  static HttpResponse handle_safely(RequestHandler& handler, HttpRequest&& request) noexcept {
    HttpResponse response;
    try {
      return handler.handle(std::move(request));
    } catch (const std::bad_alloc&) {
      response.status = 503;
      response.body = http_error_json("the server ran out of memory for this request; retry later or send less");
    } catch (const std::exception& e) {
      response.status = 500;
      response.body = http_error_json(std::string("internal error: ") + e.what());
    }
    return response;
  }

  void refuse(int status, const std::string& message, bool retry_later = false) {
    HttpResponse response;
    response.status = status;
    response.body = http_error_json(message);
    if (retry_later) response.headers.emplace_back("Retry-After", "1");
    keep_alive_ = false;  // the rest of this request was not read: the connection cannot go on
    send(std::move(response));
  }

  void send(HttpResponse response) {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kWriting;
    const bool keep = keep_alive_ && !server_.draining;
    auto message = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(response.status), version_);
    message->set(http::field::server, "embedrt");
    message->set(http::field::content_type, response.content_type);
    for (auto& [name, value] : response.headers) message->set(name, value);
    message->body() = std::move(response.body);
    message->keep_alive(keep);
    message->prepare_payload();
    auto lease = std::make_shared<BudgetLease>(std::move(response.lease));
    // The client must take the response within the request deadline, or lose the connection.
    arm(Clock::now() + server_.limits.request_timeout);
    http::async_write(socket_, *message, [self = shared_from_this(), message, lease, keep](error_code ec, std::size_t) {
      lease->release();
      if (ec) return self->close();
      if (!keep) return self->linger();
      self->wait_for_request();
    });
  }

  // Half-closes and reads until the client closes (or kLinger passes), so a client still
  // sending a refused body sees the response rather than a connection reset.
  void linger() {
    phase_ = Phase::kLingering;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm(Clock::now() + kLinger);
    discard();
  }
  void discard() {
    buffer_.consume(buffer_.size());
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, std::size_t) {
      if (ec) return self->close();
      self->discard();
    });
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    disarm();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  HttpServer::Impl& server_;
  tcp::socket socket_;
  net::steady_timer deadline_;
  std::uint64_t deadline_generation_ = 0;
  bool counted_;
  Phase phase_ = Phase::kIdle;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  unsigned version_ = 11;
  Clock::time_point request_start_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  BudgetLease body_lease_;
};

void HttpServer::Impl::remember(Connection* c, bool counted) {
  std::lock_guard<std::mutex> lock(live_mutex);
  live.insert(c);
  (counted ? connections : refusals).fetch_add(1, std::memory_order_relaxed);
}

void HttpServer::Impl::forget(Connection* c, bool counted) {
  std::lock_guard<std::mutex> lock(live_mutex);
  live.erase(c);
  (counted ? connections : refusals).fetch_sub(1, std::memory_order_relaxed);
  if (draining && live.empty()) ioc.stop();
}

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (draining) return;
    if (ec) {
      if (ec == net::error::operation_aborted) return;
      // Out of file descriptors (or a similar transient failure): wait instead of spinning.
      static std::atomic<bool> told{false};
      if (!told.exchange(true)) std::fprintf(stderr, "embedrt serve: accept failed: %s (retrying)\n", ec.message().c_str());
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code e) {
        if (!e && !draining) accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // small responses must not wait for Nagle
    if (connections.load(std::memory_order_relaxed) >= limits.max_connections) {
      refuse_connection(std::move(socket));
    } else {
      std::make_shared<Connection>(*this, std::move(socket), true)->start();
    }
    accept();
  });
}

void HttpServer::Impl::refuse_connection(tcp::socket socket) {
  if (refusals.load(std::memory_order_relaxed) >= kMaxRefusalsInFlight) return;  // socket closes here
  std::make_shared<Connection>(*this, std::move(socket), false)->start_refused();
}

void HttpServer::Impl::wait_for_signal() {
  signals.async_wait([this](error_code ec, int signal) {
    if (ec) return;
    if (signal == SIGHUP) {
      if (hooks.on_reload_signal) net::post(pool, hooks.on_reload_signal);
    } else if (draining) {
      std::fprintf(stderr, "embedrt serve: second %s, stopping now\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      if (hooks.on_stop_now) hooks.on_stop_now();
      ioc.stop();
      return;
    } else {
      std::fprintf(stderr, "embedrt serve: %s, finishing in-flight requests (up to %s)\n",
                   signal == SIGTERM ? "SIGTERM" : "SIGINT", seconds_text(limits.drain_timeout).c_str());
      drain();
    }
    wait_for_signal();
  });
}

void HttpServer::Impl::tick() {
  tick_timer.expires_after(hooks.tick);
  tick_timer.async_wait([this](error_code ec) {
    if (ec || draining) return;
    hooks.on_tick();
    tick();
  });
}

void HttpServer::Impl::drain() {
  draining = true;
  if (hooks.on_drain) hooks.on_drain();
  error_code ignored;
  acceptor.close(ignored);
  tick_timer.cancel();
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    if (live.empty()) {
      ioc.stop();
      return;
    }
    // A connection whose destructor waits for this lock has no owner left: lock() is null.
    for (Connection* c : live) {
      if (auto owned = c->weak_from_this().lock()) open.push_back(std::move(owned));
    }
  }
  for (auto& c : open) c->close_if_idle();
  drain_timer.expires_after(limits.drain_timeout);
  drain_timer.async_wait([this](error_code ec) {
    if (ec) return;
    std::fprintf(stderr, "embedrt serve: drain deadline (--drain-timeout) passed, closing the remaining connections\n");
    ioc.stop();
  });
}

HttpServer::HttpServer(const HttpLimits& limits, RequestHandler& handler, InflightBudget& budget, unsigned workers,
                       HttpHooks hooks)
    : impl_(std::make_unique<Impl>(limits, handler, budget, workers, std::move(hooks))) {}

HttpServer::~HttpServer() = default;

std::optional<std::string> HttpServer::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  const std::string where = host + ":" + std::to_string(port);
  error_code ec;
  tcp::resolver resolver(s.ioc);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return "cannot resolve the address '" + host + "': " + ec.message();
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only lets a restarted server bind past old TIME_WAIT sockets; without
  // SO_REUSEPORT (never set) a second listener on the same port fails with EADDRINUSE.
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return "cannot listen on " + where + ": " + ec.message();

  // Every connection is a file descriptor: raise the soft limit to the hard one and make sure
  // the connection cap fits under it (with room for the model, logs and refusals).
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
    (void)getrlimit(RLIMIT_NOFILE, &files);
    const std::uint64_t reserve = 64 + kMaxRefusalsInFlight;
    if (files.rlim_cur != RLIM_INFINITY && s.limits.max_connections + reserve > files.rlim_cur) {
      const std::uint64_t fit = files.rlim_cur > reserve ? files.rlim_cur - reserve : 1;
      std::fprintf(stderr, "embedrt serve: the open-file limit (%llu) holds %llu connections, not --max-connections %llu; using %llu\n",
                   static_cast<unsigned long long>(files.rlim_cur), static_cast<unsigned long long>(fit),
                   static_cast<unsigned long long>(s.limits.max_connections), static_cast<unsigned long long>(fit));
      s.limits.max_connections = fit;
    }
  }
  return std::nullopt;
}

void HttpServer::run() {
  Impl& s = *impl_;
  s.accept();
  s.wait_for_signal();
  if (s.hooks.on_tick) s.tick();
  s.ioc.run();
  if (s.hooks.before_workers_stop) s.hooks.before_workers_stop();
  // Queued work is dropped; a request being computed finishes (bounded by one request's size).
  s.pool.stop();
  s.pool.join();
}

void HttpServer::post_work(std::function<void()> work) { net::post(impl_->pool, std::move(work)); }

std::uint64_t HttpServer::open_connections() const noexcept { return impl_->connections.load(std::memory_order_relaxed); }

}  // namespace embedrt::serve
