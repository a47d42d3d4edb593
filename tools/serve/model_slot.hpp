// The model a server is serving, replaceable while requests run: a request takes a snapshot
// (a shared_ptr) and finishes on it, so a reload never pulls a mapping from under a request.
//
// The slot also knows which file it mapped (its FileStamp: device, inode, size, times), so the
// server can tell a file replaced by rename (the mapping keeps the old inode: safe, keep serving)
// from a file rewritten in place (the mapping shows the new bytes or faults: not ready until
// reloaded).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "embedrt/embedder.hpp"

namespace embedrt::serve {

struct ServedModel {
  std::string name;
  std::string path;
  Embedder embedder;
  std::uint64_t generation;  // 1 for the first load, +1 per successful reload
  // Set once the file is seen rewritten in place (or its mapping faulted): its data can no
  // longer be trusted, so the server answers 503 until a reload succeeds.
  mutable std::atomic<bool> damaged{false};

  // The file as it was when it was mapped, from the descriptor that was mapped: never a separate
  // stat of the path, which a file renamed over it between the stat and the open would make name
  // an inode the model does not hold (a later file reusing that inode number then looks like an
  // in-place rewrite: spurious 503s while reloading under load).
  const FileStamp& identity() const { return embedder.model().file().stamp(); }

  // The bytes are a private copy (--residency copy): no change to the file reaches them.
  bool holds_private_copy() const { return embedder.model().file().residency() == Residency::kCopy; }
};

class ModelSlot {
 public:
  // Opens, fully verifies (every checksum) and installs `path`; on any failure the current
  // model stays. Thread-safe.
  Status load(const std::string& name, const std::string& path, const OpenOptions& open, const EmbedderOptions& options);
  std::shared_ptr<const ServedModel> get() const;
  bool ready() const {
    auto model = get();
    return model && !model->damaged.load();
  }

 private:
  mutable std::mutex mutex_;  // guards the pointer swap only; requests never hold it while embedding
  std::shared_ptr<const ServedModel> current_;
  std::mutex load_mutex_;     // one reload at a time
};

}  // namespace embedrt::serve
