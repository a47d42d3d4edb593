#include "server.hpp"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <thread>

#include "kserve_protocol.hpp"
#include "metrics.hpp"
#include "model_slot.hpp"

namespace embedrt::serve {
namespace {

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

class Service {
 public:
  explicit Service(const ServerOptions& options) : options_(options) {}

  Status load() {
    const Status s = slot_.load(options_.name, options_.model_path, {});
    metrics_.record_reload(s.ok());
    if (s) {
      std::fprintf(stderr, "embedrt serve: model '%s' generation %llu from %s (isa %s)\n", options_.name.c_str(),
                   static_cast<unsigned long long>(slot_.get()->generation), options_.model_path.c_str(),
                   std::string(isa_name(slot_.get()->embedder.isa())).c_str());
    } else {
      std::fprintf(stderr, "embedrt serve: reload refused, still serving the previous model: %s\n", s.error().message().c_str());
    }
    return s;
  }

  void routes(httplib::Server& server) {
    server.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, R"({"live":true})"); });
    server.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, slot_.get() ? 200 : 503, slot_.get() ? R"({"ready":true})" : R"({"ready":false})");
    });
    server.Get(R"(/v2/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      auto model = served(req.matches[1], res);
      if (!model) return;
      const Model& m = model->embedder.model();
      send_json(res, 200, model_metadata_json(model->name, m.dim(), m.segment() != nullptr, natural_output_dtype(m)));
    });
    server.Get(R"(/v2/models/([^/]+)/ready)", [this](const httplib::Request& req, httplib::Response& res) {
      if (served(req.matches[1], res)) send_json(res, 200, R"({"ready":true})");
    });
    server.Post(R"(/v2/models/([^/]+)/infer)", [this](const httplib::Request& req, httplib::Response& res) { infer(req, res); });
    server.Post(R"(/v2/repository/models/([^/]+)/load)", [this](const httplib::Request& req, httplib::Response& res) {
      if (!served(req.matches[1], res)) return;
      const Status s = load();
      if (s) {
        send_json(res, 200, R"({"loaded":true})");
      } else {
        send_json(res, 400, error_json("reload refused, the previous model keeps serving: " + s.error().message()));
      }
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      auto model = slot_.get();
      res.set_content(metrics_.render(options_.name, model ? model->generation : 0), "text/plain; version=0.0.4");
    });
    server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        send_json(res, 413, error_json("request body is larger than the configured limit (--max-body-bytes)"));
      } else if (res.status == 404) {
        send_json(res, 404, error_json("no route for " + req.method + " " + req.path));
      } else {
        send_json(res, res.status, error_json("HTTP error " + std::to_string(res.status)));
      }
    });
  }

 private:
  std::shared_ptr<const ServedModel> served(const std::string& name, httplib::Response& res) {
    auto model = slot_.get();
    if (!model || model->name != name) {
      send_json(res, 404, error_json("model '" + name + "' is not served here" +
                                     (model ? " (serving '" + model->name + "')" : std::string())));
      return nullptr;
    }
    return model;
  }

  void infer(const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t tokens = 0;
    handle_infer(req, res, tokens);
    metrics_.record(res.status, tokens, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  void handle_infer(const httplib::Request& req, httplib::Response& res, std::uint64_t& tokens) {
    auto model = served(req.matches[1], res);  // this request finishes on this snapshot
    if (!model) return;
    std::optional<std::uint64_t> header_length;
    if (req.has_header("Inference-Header-Content-Length")) {
      const std::string value = req.get_header_value("Inference-Header-Content-Length");
      std::uint64_t n = 0;
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || ptr != value.data() + value.size()) {
        return send_json(res, 400, error_json("Inference-Header-Content-Length '" + value + "' is not a byte count"));
      }
      header_length = n;
    }
    auto request = parse_infer_request(req.body, header_length, options_.max_batch_tokens);
    if (!request) return send_json(res, 400, error_json(request.error().message()));
    const std::uint64_t dim = model->embedder.model().dim();
    // The model's own output dtype (bf16 for a bf16 table, as transformers computes it).
    const OutputDType dtype = natural_output_dtype(model->embedder.model());
    const std::size_t count = request->ids.size() * dim;
    std::vector<float> out_f32(dtype == OutputDType::kF32 ? count : 0);
    std::vector<std::uint16_t> out_16(dtype == OutputDType::kF32 ? 0 : count);
    const OutputSpan out_span = dtype == OutputDType::kF32 ? OutputSpan(out_f32) : OutputSpan(out_16, dtype);
    EmbedRequest r;
    r.ids = request->ids;
    r.sequences = request->batch;
    r.start_positions = request->starts;
    r.segment_ids = request->segments;
    if (Status s = model->embedder.embed(r, out_span); !s) {
      return send_json(res, 400, error_json(std::string(protocol_input(s.error())) + ": " + s.error().message()));
    }
    tokens = request->ids.size();
    const auto bytes = dtype == OutputDType::kF32 ? std::as_bytes(std::span(out_f32)) : std::as_bytes(std::span(out_16));
    InferResponse response = make_infer_response(model->name, *request, dim, dtype, bytes);
    res.status = 200;
    if (response.header_length) {
      res.set_header("Inference-Header-Content-Length", std::to_string(*response.header_length));
      res.set_content(std::move(response.body), "application/octet-stream");
    } else {
      res.set_content(std::move(response.body), "application/json");
    }
  }

  const ServerOptions& options_;
  ModelSlot slot_;
  Metrics metrics_;
};

}  // namespace

int run_server(const ServerOptions& options) {
  // Signals are taken by one thread with sigwait: blocked here, before any thread starts, so
  // every thread inherits the mask and no handler runs in the middle of a request.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Service service(options);
  if (Status s = service.load(); !s) {
    std::fprintf(stderr, "embedrt: error: %s\n", s.error().message().c_str());
    return 1;
  }
  httplib::Server server;
  const int threads = options.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server.set_payload_max_length(options.max_body_bytes);
  // Small responses must not wait for the client's delayed ACK (Nagle): 43 ms p50 without this.
  server.set_tcp_nodelay(true);
  service.routes(server);
  if (!server.bind_to_port(options.host.c_str(), options.port)) {
    std::fprintf(stderr, "embedrt: error: cannot listen on %s:%d\n", options.host.c_str(), options.port);
    return 1;
  }

  std::thread signal_thread([&] {
    for (;;) {
      int signal = 0;
      if (sigwait(&signals, &signal) != 0) continue;
      if (signal == SIGHUP) {
        (void)service.load();  // a refused reload keeps the old model; the message says why
        continue;
      }
      std::fprintf(stderr, "embedrt serve: %s, finishing in-flight requests\n", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      server.stop();
      return;
    }
  });
  std::fprintf(stderr, "embedrt serve: listening on http://%s:%d/v2/models/%s\n", options.host.c_str(), options.port,
               options.name.c_str());
  const bool clean = server.listen_after_bind();
  if (!clean && server.is_running()) server.stop();
  // listen_after_bind returns once stopped and its worker pool has drained.
  signal_thread.join();
  std::fprintf(stderr, "embedrt serve: stopped\n");
  return 0;
}

}  // namespace embedrt::serve
