// The KServe v2 endpoints of `embedrt serve` over one hot-reloadable model: routing, inference
// under the in-flight budget, readiness, reloads and the watch on the model file. Transport-free:
// it sees HttpRequest and answers HttpResponse (http_server.hpp carries them).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "http_server.hpp"
#include "inference.hpp"
#include "inflight_budget.hpp"
#include "metrics.hpp"
#include "model_slot.hpp"

namespace embedrt::serve {

struct ServiceOptions {
  std::string model_path;
  std::string name;
  std::uint64_t max_batch_tokens = 65536;
  OpenOptions open;
  EmbedderOptions embedder;  // every load creates its Embedder with these
};

class Service final : public RequestHandler {
 public:
  Service(const ServiceOptions& options, InflightBudget& budget);

  // Loads (or reloads) the model file; a refused reload keeps the current model. Logs either way.
  Status load();

  bool is_cheap(const HttpRequest& request) const override;
  HttpResponse handle(HttpRequest&& request) override;

  // Called every tick on the I/O thread: notices the model file changing. A file rewritten in
  // place makes the model not ready and, once the file has held still for a tick, is reloaded
  // through `run_later` (a worker). A file replaced by rename keeps serving the old mapping
  // (intact: it holds the old inode) until SIGHUP or POST .../load, as before; so does a model
  // held as a private copy (--residency copy) whatever happens to the file.
  void watch_file(const std::function<void(std::function<void()>)>& run_later);

  // The protocol-neutral inference path and the state the gRPC transport shares with REST.
  const Inference& inference() const noexcept { return inference_; }
  Metrics& metrics() noexcept { return metrics_; }
  bool ready() const { return slot_.ready(); }

  // Wired by run_server: connection count for /metrics.
  std::function<std::uint64_t()> open_connections;

 private:
  HttpResponse infer(const std::shared_ptr<const ServedModel>& model, HttpRequest& request, std::uint64_t& tokens);
  Metrics::Gauges gauges() const;

  ServiceOptions options_;
  InflightBudget& budget_;
  ModelSlot slot_;
  Inference inference_;
  Metrics metrics_;
  // File watching state, I/O thread only.
  std::optional<FileStamp> last_seen_, reload_tried_, replacement_told_;
  std::shared_ptr<std::atomic<bool>> reloading_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace embedrt::serve
