// The model a server is serving, replaceable while requests run: a request takes a snapshot
// (a shared_ptr) and finishes on it, so a reload never pulls a mapping from under a request.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "embedrt/embedder.hpp"

namespace embedrt::serve {

struct ServedModel {
  std::string name;
  std::string path;
  Embedder embedder;
  std::uint64_t generation;  // 1 for the first load, +1 per successful reload
};

class ModelSlot {
 public:
  // Opens, fully verifies (every checksum) and installs `path`; on any failure the current
  // model stays. Thread-safe.
  Status load(const std::string& name, const std::string& path, const EmbedderOptions& options);
  std::shared_ptr<const ServedModel> get() const;

 private:
  mutable std::mutex mutex_;  // guards the pointer swap only; requests never hold it while embedding
  std::shared_ptr<const ServedModel> current_;
  std::mutex load_mutex_;     // one reload at a time
};

}  // namespace embedrt::serve
