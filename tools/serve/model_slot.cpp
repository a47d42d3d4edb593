#include "model_slot.hpp"

namespace embedrt::serve {

Status ModelSlot::load(const std::string& name, const std::string& path, const EmbedderOptions& options) {
  std::lock_guard<std::mutex> one_at_a_time(load_mutex_);
  auto model = Model::open(path);
  if (!model) return std::move(model).error();
  if (Status s = model->file().verify(); !s) return s;
  auto embedder = Embedder::create(std::move(*model), options);
  if (!embedder) return std::move(embedder).error();
  const std::uint64_t generation = get() ? get()->generation + 1 : 1;
  auto next = std::make_shared<const ServedModel>(ServedModel{name, path, std::move(*embedder), generation});
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = std::move(next);
  return {};
}

std::shared_ptr<const ServedModel> ModelSlot::get() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

}  // namespace embedrt::serve
