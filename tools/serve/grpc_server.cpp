#include "grpc_server.hpp"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "grpc_protocol.hpp"
#include "kserve_grpc.grpc.pb.h"
#include "service.hpp"

namespace embedrt::serve {

using Clock = std::chrono::steady_clock;

namespace {

// gRPC's own memory (socket buffers, messages being received) is charged to this quota; under
// pressure gRPC shrinks its flow-control windows and refuses new streams. It is separate from
// --max-inflight-bytes, which counts what embedrt allocates; at least room for two messages.
constexpr std::uint64_t kMemoryQuota = std::uint64_t{256} << 20;
// HTTP/2 streams one connection may have open; the server-wide cap is --grpc-max-calls.
constexpr int kMaxStreamsPerConnection = 256;
// Request metadata (HTTP/2 headers), as REST's header limit.
constexpr int kMaxMetadataBytes = 16 * 1024;

grpc::StatusCode grpc_code(Refusal kind) {
  switch (kind) {
    case Refusal::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case Refusal::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case Refusal::kBusy:
    case Refusal::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case Refusal::kTooLarge: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Refusal::kInternal: break;
  }
  return grpc::StatusCode::INTERNAL;
}

grpc::Status status_of(const InferError& error) { return {grpc_code(error.kind), error.message}; }

std::optional<std::string_view> version_of(const std::string& version) {
  if (version.empty()) return std::nullopt;  // the server picks: its one version
  return version;
}

// gRPC logs through gpr_log; its errors go to stderr in the server's own format, and its info
// lines are dropped. While binding it stays quiet: a failure is reported once, by start(), with
// the reason in plain words instead of gRPC's nested error dump.
std::atomic<bool> quiet_grpc_log{false};
void log_grpc(gpr_log_func_args* args) {
  if (args->severity >= GPR_LOG_SEVERITY_ERROR && !quiet_grpc_log.load()) {
    std::fprintf(stderr, "embedrt serve: grpc: %s\n", args->message);
  }
}

// Why host:port cannot be bound, found by trying it the way gRPC does (SO_REUSEADDR, no
// SO_REUSEPORT); gRPC itself reports only that it failed.
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return std::string("cannot resolve the address: ") + gai_strerror(rc);
  }
  std::string reason = "gRPC could not bind it";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    const int error = errno;
    ::close(fd);
    if (!bound) {
      reason = std::strerror(error);
      break;
    }
  }
  ::freeaddrinfo(found);
  return reason;
}

}  // namespace

class InferCall;

struct GrpcServer::Impl final : public inference::GRPCInferenceService::CallbackService {
  Impl(serve::Service& service_, const GrpcLimits& limits_, std::function<void(std::function<void()>)> run_on_worker_)
      : service(service_), limits(limits_), run_on_worker(std::move(run_on_worker_)) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context, const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    response->set_ready(service.ready());
    return finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context, const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override {
    auto found = service.inference().find(request->name(), version_of(request->version()));
    if (found.error) return finish(context, status_of(*found.error));
    response->set_ready(!found.model->damaged.load());
    return finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* response) override {
    to_proto(describe_server(), *response);
    return finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override {
    auto found = service.inference().find(request->name(), version_of(request->version()));
    if (found.error) return finish(context, status_of(*found.error));
    to_proto(describe_model(*found.model), *response);
    return finish(context, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* context,
                                                const inference::RepositoryModelLoadRequest* request,
                                                inference::RepositoryModelLoadResponse*) override;

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context, const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;

  static grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* context, const grpc::Status& status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(status);
    return reactor;
  }

  void infer(InferCall* call, const inference::ModelInferRequest* request, inference::ModelInferResponse* response);
  void remember(InferCall* call);
  void forget(InferCall* call);

  serve::Service& service;  // qualified: inside this class, `Service` is the generated base
  GrpcLimits limits;
  std::function<void(std::function<void()>)> run_on_worker;
  std::unique_ptr<grpc::Server> server;
  std::thread drain_thread;
  std::atomic<bool> draining{false};

  // Calls in progress, for the deadline and a second signal. Recursive: cancelling a call can run
  // its OnDone inline on the cancelling thread, which unregisters it under the same lock.
  std::recursive_mutex calls_mutex;
  std::unordered_set<InferCall*> calls;
  std::atomic<std::uint64_t> active{0};
};

// One ModelInfer call: registered while in progress, holding its share of the budget until gRPC
// has sent the response (OnDone), then deleted.
class InferCall final : public grpc::ServerUnaryReactor {
 public:
  InferCall(GrpcServer::Impl& server, grpc::CallbackServerContext* context)
      : server_(server), context_(context), started_(Clock::now()) {
    server_.remember(this);
  }
  void OnDone() override {
    server_.forget(this);
    delete this;
  }
  void OnCancel() override {}  // the worker checks IsCancelled() before starting

  grpc::CallbackServerContext* context() const { return context_; }
  Clock::time_point started() const { return started_; }
  bool cancel_sent = false;  // under calls_mutex
  BudgetLease request_lease, response_lease;

 private:
  GrpcServer::Impl& server_;
  grpc::CallbackServerContext* context_;
  Clock::time_point started_;
};

void GrpcServer::Impl::remember(InferCall* call) {
  std::lock_guard<std::recursive_mutex> lock(calls_mutex);
  calls.insert(call);
  active.fetch_add(1, std::memory_order_relaxed);
}

void GrpcServer::Impl::forget(InferCall* call) {
  std::lock_guard<std::recursive_mutex> lock(calls_mutex);
  calls.erase(call);
  active.fetch_sub(1, std::memory_order_relaxed);
}

grpc::ServerUnaryReactor* GrpcServer::Impl::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  auto* call = new InferCall(*this, context);
  const auto refuse = [&](const InferError& error) {
    service.metrics().record(http_status(error.kind), 0, 0.0);
    call->Finish(status_of(error));
    return call;
  };
  if (active.load(std::memory_order_relaxed) > limits.max_calls) {
    return refuse({Refusal::kBusy, "the server has " + std::to_string(limits.max_calls) +
                                       " inference calls in progress, its limit (--grpc-max-calls); retry later"});
  }
  // The request is in memory already (gRPC received it within the message limit); what it holds
  // and what decoding it allocates are counted before anything more is made, and held until the
  // call is done. A request whose decoding alone could never fit is refused as too large.
  const Inference& inference = service.inference();
  const std::uint64_t request_bytes = request->SpaceUsedLong() + decoded_bytes(*request);
  if (request_bytes > inference.budget().limit()) {
    return refuse({Refusal::kTooLarge, "decoding this request takes " + std::to_string(request_bytes) +
                                           " bytes, more than --max-inflight-bytes " +
                                           std::to_string(inference.budget().limit()) + "; send fewer tokens"});
  }
  call->request_lease = inference.budget().try_reserve(request_bytes);
  if (!call->request_lease) return refuse(inference.busy(request_bytes));
  run_on_worker([this, call, request, response] { infer(call, request, response); });
  return call;
}

void GrpcServer::Impl::infer(InferCall* call, const inference::ModelInferRequest* request,
                             inference::ModelInferResponse* response) {
  if (call->context()->IsCancelled()) return call->Finish(grpc::Status::CANCELLED);
  const auto start = Clock::now();
  std::uint64_t tokens = 0;
  const auto finish = [&](const grpc::Status& status, int http_equivalent) {
    service.metrics().record(http_equivalent, tokens, std::chrono::duration<double>(Clock::now() - start).count());
    call->Finish(status);
  };
  const auto refuse = [&](const InferError& error) { finish(status_of(error), http_status(error.kind)); };
  try {
    const Inference& inference = service.inference();
    auto found = inference.find(request->model_name(), version_of(request->model_version()));
    if (found.error) return refuse(*found.error);
    if (auto not_ready = inference.check_ready(*found.model)) return refuse(*not_ready);
    auto inputs = decode_infer_request(*request);
    if (!inputs) return refuse({Refusal::kInvalidArgument, inputs.error().message()});
    // The outputs go straight into the response's raw_output_contents: no copy before gRPC
    // serializes them.
    InferOutcome outcome = inference.run(*found.model, *inputs, ResponseEncoding::kRaw,
                                         [response](std::size_t, std::uint64_t bytes) {
                                           std::string* raw = response->add_raw_output_contents();
                                           raw->resize(bytes);
                                           return std::span<std::byte>(reinterpret_cast<std::byte*>(raw->data()), bytes);
                                         });
    if (!outcome) return refuse(*outcome.error);
    response->set_model_name(found.model->name);
    response->set_model_version("1");
    response->set_id(inputs->id);
    describe_outputs(outcome.outputs, *response);
    call->response_lease = std::move(outcome.lease);
    tokens = outcome.tokens;
    finish(grpc::Status::OK, 200);
  } catch (const std::bad_alloc&) {
    finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server ran out of memory for this request; retry later or send less"), 503);
  } catch (const std::exception& e) {
    finish(grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what()), 500);
  }
}

grpc::ServerUnaryReactor* GrpcServer::Impl::RepositoryModelLoad(grpc::CallbackServerContext* context,
                                                                const inference::RepositoryModelLoadRequest* request,
                                                                inference::RepositoryModelLoadResponse*) {
  auto found = service.inference().find(request->model_name(), std::nullopt);
  if (found.error) return finish(context, status_of(*found.error));
  // A reload verifies every checksum (seconds on a big file): on a worker, as REST's.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  run_on_worker([this, reactor] {
    const Status s = service.load();
    if (s) return reactor->Finish(grpc::Status::OK);
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 std::string(service.ready() ? "reload refused, the previous model keeps serving: "
                                                             : "reload refused: ") + s.error().message()));
  });
  return reactor;
}

GrpcServer::GrpcServer(Service& service, const GrpcLimits& limits, std::function<void(std::function<void()>)> run_on_worker)
    : impl_(std::make_unique<Impl>(service, limits, std::move(run_on_worker))) {}

GrpcServer::~GrpcServer() {
  if (impl_->server) wait();
}

std::optional<std::string> GrpcServer::start(const std::string& host, int port) {
  Impl& s = *impl_;
  gpr_set_log_function(log_grpc);
  const std::string address = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound_port);
  builder.RegisterService(&s);
  const auto ms = [](std::chrono::milliseconds d) { return static_cast<int>(std::min<std::int64_t>(d.count(), INT_MAX)); };
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::uint64_t>(s.limits.max_message_bytes, INT_MAX)));
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, ms(s.limits.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(s.limits.idle_timeout));
  // gRPC 1.51 waits for the bytes of a message however long it declares, and a connection with
  // a stream open is never idle: a client that declares a message and goes silent would hold its
  // connection forever. Every connection is therefore ended after --idle-timeout of age (GOAWAY;
  // well-behaved clients reconnect transparently, which also spreads them over replicas behind
  // a balancer), calls in progress getting --request-timeout of grace to finish.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(s.limits.idle_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, ms(s.limits.request_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  grpc::ResourceQuota quota("embedrt-grpc");
  quota.Resize(static_cast<std::size_t>(std::max<std::uint64_t>(kMemoryQuota, 2 * s.limits.max_message_bytes + (16 << 20))));
  builder.SetResourceQuota(quota);
  quiet_grpc_log = true;
  s.server = builder.BuildAndStart();
  quiet_grpc_log = false;
  if (!s.server || bound_port == 0) {
    s.server.reset();
    return "cannot listen on " + address + " (gRPC): " + bind_failure(host, port);
  }
  return std::nullopt;
}

void GrpcServer::enforce_deadlines() {
  Impl& s = *impl_;
  const auto now = Clock::now();
  std::lock_guard<std::recursive_mutex> lock(s.calls_mutex);
  std::vector<InferCall*> late;
  for (InferCall* call : s.calls) {
    if (!call->cancel_sent && now - call->started() > s.limits.request_timeout) late.push_back(call);
  }
  for (InferCall* call : late) {
    if (!s.calls.contains(call)) continue;  // done inline by an earlier cancellation
    call->cancel_sent = true;
    call->context()->TryCancel();
  }
}

void GrpcServer::begin_drain(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  if (!s.server || s.draining.exchange(true)) return;
  // Shutdown blocks until every call is done (cancelling those still going at the deadline), so
  // it runs on a thread of its own, never on the HTTP I/O thread or a gRPC one.
  s.drain_thread = std::thread([&s, deadline = std::chrono::system_clock::now() + timeout] { s.server->Shutdown(deadline); });
}

void GrpcServer::stop_now() {
  Impl& s = *impl_;
  std::lock_guard<std::recursive_mutex> lock(s.calls_mutex);
  const std::vector<InferCall*> all(s.calls.begin(), s.calls.end());
  for (InferCall* call : all) {
    if (s.calls.contains(call)) call->context()->TryCancel();
  }
}

void GrpcServer::wait() {
  Impl& s = *impl_;
  if (!s.server) return;
  begin_drain(std::chrono::milliseconds(0));
  if (s.drain_thread.joinable()) s.drain_thread.join();
  s.server.reset();
}

std::uint64_t GrpcServer::calls_in_progress() const noexcept { return impl_->active.load(std::memory_order_relaxed); }

}  // namespace embedrt::serve
