#include "model_slot.hpp"

namespace embedrt::serve {

Status ModelSlot::load(const std::string& name, const std::string& path, const OpenOptions& open,
                       const EmbedderOptions& options) {
  std::lock_guard<std::mutex> one_at_a_time(load_mutex_);
  auto model = Model::open(path, open);
  if (!model) return std::move(model).error();
  if (Status s = model->file().verify(); !s) return s;
  auto embedder = Embedder::create(std::move(*model), options);
  if (!embedder) return std::move(embedder).error();
  const std::uint64_t generation = get() ? get()->generation + 1 : 1;
  // Braces, not make_shared's parentheses: clang 14 (the fuzz build) lacks C++20's parenthesized
  // aggregate initialization.
  std::shared_ptr<const ServedModel> next(
      new ServedModel{name, path, std::move(*embedder), generation});
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = std::move(next);
  return {};
}

std::shared_ptr<const ServedModel> ModelSlot::get() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

}  // namespace embedrt::serve
