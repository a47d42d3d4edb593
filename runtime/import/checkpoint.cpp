#include "embedrt/import.hpp"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <cstring>

#include "safetensors.hpp"
#include "torch_checkpoint.hpp"
#include "zip_archive.hpp"

namespace embedrt::import {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool looks_like_safetensors(std::span<const std::byte> file) {
  std::uint64_t n = 0;
  if (file.size() < 9) return false;
  std::memcpy(&n, file.data(), 8);
  return n <= kMaxSafetensorsHeader && file[8] == std::byte{'{'};
}

// Picks the checkpoint inside a model folder, in the order Hugging Face loaders prefer.
Result<std::string> resolve_folder(const std::string& folder) {
  for (const char* name : {"model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
                           "pytorch_model.bin"}) {
    if (fs::exists(fs::path(folder) / name)) return (fs::path(folder) / name).string();
  }
  std::vector<std::string> candidates;
  std::error_code error;
  for (const auto& e : fs::directory_iterator(folder, error)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (ends_with(name, ".safetensors") || ends_with(name, ".pt") || ends_with(name, ".pth") ||
                                ends_with(name, ".bin") || ends_with(name, ".index.json"))) {
      candidates.push_back(e.path().string());
    }
  }
  if (error) return Error(ErrorCode::kIo, "cannot list folder '" + folder + "': " + error.message());
  if (candidates.size() == 1) return candidates[0];
  std::string list;
  for (const auto& c : candidates) list += "\n  " + c;
  return Error(candidates.empty() ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
               "folder '" + folder + "' holds " + (candidates.empty() ? std::string("no checkpoint file") :
                                                   "several checkpoint files; name one:" + list));
}

// config.json is small; anything past 16 MiB, or not a regular file, is refused unread.
Result<std::string> read_config(const std::string& path) {
  constexpr std::uint64_t kMaxConfigBytes = 16u << 20;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return Error(ErrorCode::kNotFound, "config '" + path + "' is not a regular file");
  auto mapping = MappedFile::map(path, {});
  if (!mapping) return std::move(mapping).error();
  const auto bytes = mapping->bytes();
  if (bytes.size() > kMaxConfigBytes) {
    return Error(ErrorCode::kMalformed, "config '" + path + "' is " + std::to_string(bytes.size()) + " bytes, more than 16 MiB");
  }
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

class Loader {
 public:
  explicit Loader(const CheckpointOptions& options) : options_(options) {}
  Checkpoint result;

  Status load_path(const std::string& path) {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      auto file = resolve_folder(path);
      if (!file) return std::move(file).error();
      return load_path(*file);
    }
    if (ends_with(path, ".index.json")) return load_index(path);
    return load_file(path, nullptr);
  }

 private:
  // Loads one file; with `wanted`, keeps only the named tensors (shards of an index).
  Status load_file(const std::string& path, const std::set<std::string>* wanted) {
    auto mapping = MappedFile::map(path, {});
    if (!mapping) return std::move(mapping).error();
    const auto bytes = mapping->bytes();
    Result<std::vector<SourceTensor>> tensors = std::vector<SourceTensor>{};
    std::string format;
    if (ZipArchive::looks_like_zip(bytes)) {
      format = "torch zip";
      tensors = load_torch_zip(bytes, path, {.check_crc = options_.check_crc});
    } else if (looks_like_torch_legacy(bytes)) {
      format = "torch legacy";
      tensors = load_torch_legacy(bytes, path);
    } else if (looks_like_safetensors(bytes) || ends_with(path, ".safetensors")) {
      // By content, or by name so a damaged header gets the safetensors-specific refusal.
      format = "safetensors";
      tensors = load_safetensors(bytes, path);
    } else {
      return Error(ErrorCode::kMalformed, "'" + path + "' is neither a torch checkpoint (zip or legacy) nor safetensors");
    }
    if (!tensors) return std::move(tensors).error();
    for (SourceTensor& t : *tensors) {
      if (wanted != nullptr && wanted->count(t.name) == 0) continue;
      if (!names_.insert(t.name).second) {
        return Error(ErrorCode::kMalformed, "tensor '" + t.name + "' appears in more than one input (again in '" + path + "')");
      }
      result.tensors.push_back(std::move(t));
    }
    result.files.push_back(path);
    result.formats.push_back(format);
    result.mappings.push_back(std::move(*mapping));
    return {};
  }

  Status load_index(const std::string& path) {
    auto mapping = MappedFile::map(path, {});
    if (!mapping) return std::move(mapping).error();
    const auto bytes = mapping->bytes();
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(reinterpret_cast<const char*>(bytes.data()),
                                    reinterpret_cast<const char*>(bytes.data()) + bytes.size());
    } catch (const std::exception& e) {
      return Error(ErrorCode::kMalformed, "'" + path + "': not valid JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return Error(ErrorCode::kMalformed, "'" + path + "': no \"weight_map\" object");
    }
    std::map<std::string, std::set<std::string>> shards;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) return Error(ErrorCode::kMalformed, "'" + path + "': shard of '" + tensor + "' is not a string");
      const std::string name = shard.get<std::string>();
      // Shards must be plain file names inside the model folder.
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
          name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) {
        return Error(ErrorCode::kMalformed, "'" + path + "': shard '" + name + "' of tensor '" + tensor +
                                                "' is not a file name inside the model folder");
      }
      shards[name].insert(tensor);
    }
    const fs::path folder = fs::path(path).parent_path();
    for (const auto& [shard, tensors] : shards) {
      const std::size_t before = result.tensors.size();
      if (Status s = load_file((folder / shard).string(), &tensors); !s) return s;
      if (result.tensors.size() - before != tensors.size()) {
        for (const std::string& t : tensors) {
          if (names_.count(t) == 0) {
            return Error(ErrorCode::kMalformed, "'" + path + "' maps tensor '" + t + "' to shard '" + shard + "', which does not hold it");
          }
        }
      }
    }
    return {};
  }

  const CheckpointOptions& options_;
  std::set<std::string> names_;
};

}  // namespace

Result<Checkpoint> open_checkpoint(const std::vector<std::string>& inputs, const CheckpointOptions& options) {
  Loader loader(options);
  for (const std::string& input : inputs) {
    if (Status s = loader.load_path(input); !s) return std::move(s).error();
  }
  Checkpoint checkpoint = std::move(loader.result);
  if (!options.ignore_config) {
    std::string config = options.config_path;
    if (config.empty() && !inputs.empty()) {
      std::error_code error;
      const fs::path first(inputs[0]);
      const fs::path beside = (fs::is_directory(first, error) ? first : first.parent_path()) / "config.json";
      if (fs::is_regular_file(beside, error)) config = beside.string();
    }
    if (!config.empty()) {
      auto text = read_config(config);
      if (!text) return std::move(text).error();
      checkpoint.config_path = config;
      checkpoint.config_json = std::move(*text);
    }
  }
  if (!options.key.empty()) {
    const std::string prefix = options.key + ".";
    std::vector<SourceTensor> kept;
    std::set<std::string> top_level;
    for (SourceTensor& t : checkpoint.tensors) {
      top_level.insert(t.name.substr(0, t.name.find('.')));
      if (t.name.rfind(prefix, 0) == 0) {
        t.name = t.name.substr(prefix.size());
        kept.push_back(std::move(t));
      }
    }
    if (kept.empty()) {
      std::string keys;
      for (const auto& k : top_level) keys += (keys.empty() ? "" : ", ") + k;
      return Error(ErrorCode::kNotFound, "`key` '" + options.key + "' holds no tensors; top-level keys with tensors: " +
                                             (keys.empty() ? "(none)" : keys));
    }
    checkpoint.tensors = std::move(kept);
  }
  return checkpoint;
}

}  // namespace embedrt::import
