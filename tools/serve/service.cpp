#include "service.hpp"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kserve_protocol.hpp"

namespace embedrt::serve {
namespace {

HttpResponse json_response(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

HttpResponse error_response(int status, const std::string& message) { return json_response(status, error_json(message)); }

HttpResponse refusal_response(const InferError& error) {
  HttpResponse response = error_response(http_status(error.kind), error.message);
  if (error.kind == Refusal::kBusy) response.headers.emplace_back("Retry-After", "1");
  return response;
}

std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    unsigned value = 0;
    if (text.size() - i < 3) return std::nullopt;
    const auto [ptr, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    if (ec != std::errc() || ptr != text.data() + i + 3) return std::nullopt;
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

enum class Endpoint { kNone, kServer, kLive, kReady, kModel, kModelReady, kInfer, kLoad, kMetrics };

struct Route {
  Endpoint endpoint = Endpoint::kNone;
  std::string model;
  std::optional<std::string> version;  // from /versions/{v}/
  const char* method = "GET";
};

// The route of a request target ("/v2/models/gpt2/versions/1/infer?x"), or nullopt when a
// percent-escape in it is malformed.
std::optional<Route> route_of(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string> parts;
  if (target.empty() || target[0] != '/') return Route{};
  for (std::size_t begin = 1; begin <= target.size();) {
    const std::size_t end = std::min(target.find('/', begin), target.size());
    auto part = percent_decode(target.substr(begin, end - begin));
    if (!part) return std::nullopt;
    parts.push_back(std::move(*part));
    begin = end + 1;
  }
  Route r;
  const auto is = [&](std::initializer_list<const char*> expected) {
    if (parts.size() != expected.size()) return false;
    std::size_t i = 0;
    for (const char* e : expected) {
      if (e != nullptr && parts[i] != e) return false;
      ++i;
    }
    return true;
  };
  if (is({"v2"})) {
    r.endpoint = Endpoint::kServer;
  } else if (is({"v2", "health", "live"})) {
    r.endpoint = Endpoint::kLive;
  } else if (is({"v2", "health", "ready"})) {
    r.endpoint = Endpoint::kReady;
  } else if (is({"metrics"})) {
    r.endpoint = Endpoint::kMetrics;
  } else if (is({"v2", "repository", "models", nullptr, "load"})) {
    r = {Endpoint::kLoad, parts[3], std::nullopt, "POST"};
  } else if (parts.size() >= 3 && parts[0] == "v2" && parts[1] == "models") {
    r.model = parts[2];
    std::size_t rest = 3;
    if (parts.size() >= 5 && parts[3] == "versions") {
      r.version = parts[4];
      rest = 5;
    }
    if (parts.size() == rest) {
      r.endpoint = Endpoint::kModel;
    } else if (parts.size() == rest + 1 && parts[rest] == "ready") {
      r.endpoint = Endpoint::kModelReady;
    } else if (parts.size() == rest + 1 && parts[rest] == "infer") {
      r.endpoint = Endpoint::kInfer;
      r.method = "POST";
    }
  }
  return r;
}

std::string path_of(std::string_view target) { return std::string(target.substr(0, target.find('?'))); }

}  // namespace

Service::Service(const ServiceOptions& options, InflightBudget& budget)
    : options_(options), budget_(budget), inference_(slot_, budget, options.max_batch_tokens) {}

Status Service::load() {
  const Status s = slot_.load(options_.name, options_.model_path, options_.open, options_.embedder);
  metrics_.record_reload(s.ok());
  if (s) {
    auto model = slot_.get();
    std::fprintf(stderr, "embedrt serve: model '%s' generation %llu from %s (isa %s, residency %s, prefetch %s, rows ahead %llu)\n",
                 options_.name.c_str(), static_cast<unsigned long long>(model->generation),
                 options_.model_path.c_str(), std::string(isa_name(model->embedder.isa())).c_str(),
                 std::string(residency_name(model->embedder.model().file().residency())).c_str(),
                 std::string(prefetch_level_name(model->embedder.prefetch_level())).c_str(),
                 static_cast<unsigned long long>(model->embedder.min_rows_ahead()));
  } else if (slot_.get()) {  // (a failed first load is the caller's error to report)
    std::fprintf(stderr, "embedrt serve: reload refused, %s: %s\n",
                 slot_.ready() ? "still serving the previous model" : "not ready until a reload succeeds",
                 s.error().message().c_str());
  }
  return s;
}

bool Service::is_cheap(const HttpRequest& request) const {
  const auto route = route_of(request.target);
  return !route || (route->endpoint != Endpoint::kInfer && route->endpoint != Endpoint::kLoad);
}

Metrics::Gauges Service::gauges() const {
  auto model = slot_.get();
  Metrics::Gauges g;
  g.generation = model ? model->generation : 0;
  g.ready = model && !model->damaged.load();
  g.open_connections = open_connections ? open_connections() : 0;
  g.inflight_bytes = budget_.in_use();
  g.inflight_limit = budget_.limit();
  return g;
}

HttpResponse Service::handle(HttpRequest&& request) {
  const auto route = route_of(request.target);
  if (!route) return error_response(400, "the URL " + path_of(request.target) + " holds a malformed percent-escape");
  if (route->endpoint == Endpoint::kNone) {
    return error_response(404, "no route for " + request.method + " " + path_of(request.target));
  }
  if (request.method != route->method) {
    HttpResponse response = error_response(405, request.method + " is not allowed on " + path_of(request.target) +
                                                    " (use " + route->method + ")");
    response.headers.emplace_back("Allow", route->method);
    return response;
  }
  auto model = slot_.get();
  const bool ready = model && !model->damaged.load();
  switch (route->endpoint) {
    case Endpoint::kServer: return json_response(200, server_metadata_json(describe_server()));
    case Endpoint::kLive: return json_response(200, R"({"live":true})");
    case Endpoint::kReady: return json_response(ready ? 200 : 503, ready ? R"({"ready":true})" : R"({"ready":false})");
    case Endpoint::kMetrics: {
      HttpResponse response = json_response(200, metrics_.render(options_.name, gauges()));
      response.content_type = "text/plain; version=0.0.4";
      return response;
    }
    default: break;
  }
  // Model endpoints: the name (and version, when given) must be the served one.
  auto found = inference_.find(route->model, route->version);
  if (found.error) return refusal_response(*found.error);
  model = std::move(found.model);
  switch (route->endpoint) {
    case Endpoint::kModel: return json_response(200, model_metadata_json(describe_model(*model)));
    case Endpoint::kModelReady: return json_response(ready ? 200 : 503, ready ? R"({"ready":true})" : R"({"ready":false})");
    case Endpoint::kLoad: {
      const Status s = load();
      if (s) return json_response(200, R"({"loaded":true})");
      return error_response(400, std::string(slot_.ready() ? "reload refused, the previous model keeps serving: "
                                                           : "reload refused: ") + s.error().message());
    }
    case Endpoint::kInfer: {
      const auto start = std::chrono::steady_clock::now();
      std::uint64_t tokens = 0;
      HttpResponse response = infer(model, request, tokens);
      metrics_.record(response.status, tokens, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return response;
    }
    default: break;
  }
  return error_response(404, "no route for " + request.method + " " + path_of(request.target));
}

HttpResponse Service::infer(const std::shared_ptr<const ServedModel>& model, HttpRequest& request, std::uint64_t& tokens) {
  if (auto not_ready = inference_.check_ready(*model)) return refusal_response(*not_ready);
  std::optional<std::uint64_t> header_length;
  if (request.inference_header_length) {
    const std::string& value = *request.inference_header_length;
    std::uint64_t n = 0;
    const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || ptr != value.data() + value.size()) {
      return error_response(400, "Inference-Header-Content-Length '" + value + "' is not a byte count");
    }
    header_length = n;
  }
  // Parsing builds a JSON tree and integer vectors: first a pass that builds nothing checks the
  // syntax and nesting and counts the values; then what the tree will take is reserved: 64 bytes
  // a value (a 16-byte node with vector growth, the flattened int64 with growth, two copies), the
  // text again for strings, and 4 bytes per byte of binary data (int32 widened, copied).
  const std::uint64_t json_bytes = std::min<std::uint64_t>(header_length.value_or(request.body.size()), request.body.size());
  const auto values = scan_json(std::string_view(request.body).substr(0, json_bytes));
  if (!values) return error_response(400, values.error().message());
  const std::uint64_t parse_bytes = 64 * *values + json_bytes + 4 * (request.body.size() - json_bytes);
  if (parse_bytes > budget_.limit()) {
    return error_response(413, "parsing this body's " + std::to_string(*values) + " JSON values needs " +
                                   std::to_string(parse_bytes) + " bytes, more than --max-inflight-bytes " +
                                   std::to_string(budget_.limit()) + "; send fewer tokens or use binary tensors");
  }
  BudgetLease parse_lease = budget_.try_reserve(parse_bytes);
  if (!parse_lease) return refusal_response(inference_.busy(parse_bytes));
  auto parsed = parse_infer_request(request.body, header_length);
  if (!parsed) return error_response(400, parsed.error().message());
  request.body = std::string();  // the ids are parsed out; the text is no longer needed

  InferOutcome outcome = inference_.run(*model, parsed->inputs,
                                        parsed->binary_output ? ResponseEncoding::kRaw : ResponseEncoding::kJsonText);
  if (!outcome) return refusal_response(*outcome.error);
  auto made = make_infer_response(model->name, parsed->inputs.id, outcome.outputs, parsed->binary_output);
  if (!made) return error_response(500, made.error().message());
  tokens = outcome.tokens;
  HttpResponse response = json_response(200, std::move(made->body));
  if (made->header_length) {
    response.headers.emplace_back("Inference-Header-Content-Length", std::to_string(*made->header_length));
    response.content_type = "application/octet-stream";
  }
  response.lease = std::move(outcome.lease);
  return response;
}

void Service::watch_file(const std::function<void(std::function<void()>)>& run_later) {
  auto model = slot_.get();
  if (!model) return;
  const std::optional<FileStamp> now = FileStamp::of(model->path);
  const std::optional<FileStamp> before = std::exchange(last_seen_, now);
  if (now && *now == model->identity()) return;
  // Replaced by rename or removed: the mapping still holds the old inode, intact. A private copy
  // is intact whatever happened to the file, rewrites in place included.
  if ((!now || !now->same_file(model->identity()) || model->holds_private_copy()) && !model->damaged.load()) {
    if (now != replacement_told_) {
      replacement_told_ = now;
      const char* what = !now ? "removed" : now->same_file(model->identity()) ? "changed in place" : "replaced";
      std::fprintf(stderr, "embedrt serve: %s was %s; still serving generation %llu%s (SIGHUP or POST "
                   "/v2/repository/models/%s/load switches)\n", model->path.c_str(), what,
                   static_cast<unsigned long long>(model->generation), model->holds_private_copy() ? " from its copy" : "",
                   model->name.c_str());
    }
    return;
  }
  // Same inode, new size or times: rewritten in place under the mapping (or, once damaged,
  // anything new at the path is worth a reload).
  if (!model->damaged.exchange(true)) {
    std::fprintf(stderr, "embedrt serve: %s is being rewritten in place; not ready until it is valid and reloaded\n",
                 model->path.c_str());
  }
  // Reload once the file has held still for a tick, once per state of the file.
  if (!now || before != now || reload_tried_ == now || reloading_->exchange(true)) return;
  reload_tried_ = now;
  run_later([this, flag = reloading_] {
    (void)load();
    flag->store(false);
  });
}

}  // namespace embedrt::serve
