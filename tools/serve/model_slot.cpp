#include "model_slot.hpp"

#include <sys/stat.h>

namespace embedrt::serve {

std::optional<FileIdentity> FileIdentity::of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  FileIdentity id;
  id.device = static_cast<std::uint64_t>(st.st_dev);
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.size = static_cast<std::uint64_t>(st.st_size);
  id.modified_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  id.changed_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return id;
}

Status ModelSlot::load(const std::string& name, const std::string& path, const OpenOptions& open,
                       const EmbedderOptions& options) {
  std::lock_guard<std::mutex> one_at_a_time(load_mutex_);
  // Taken before opening: a change after this point shows up as a difference on the next check.
  const std::optional<FileIdentity> identity = FileIdentity::of(path);
  auto model = Model::open(path, open);
  if (!model) return std::move(model).error();
  if (Status s = model->file().verify(); !s) return s;
  auto embedder = Embedder::create(std::move(*model), options);
  if (!embedder) return std::move(embedder).error();
  const std::uint64_t generation = get() ? get()->generation + 1 : 1;
  // Braces, not make_shared's parentheses: clang 14 (the fuzz build) lacks C++20's parenthesized
  // aggregate initialization.
  std::shared_ptr<const ServedModel> next(
      new ServedModel{name, path, std::move(*embedder), generation, identity.value_or(FileIdentity{})});
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = std::move(next);
  return {};
}

std::shared_ptr<const ServedModel> ModelSlot::get() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

}  // namespace embedrt::serve
