// Files written by torch.save: the zip format (torch 1.6 to 2.x) and the legacy format (earlier).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/import.hpp"

namespace embedrt::import {

struct TorchLoadOptions {
  bool check_crc = true;
};

// Every tensor reachable through nested dicts, named by the dotted path of keys
// ("model.transformer.wte.weight"). Spans point into `file`.
Result<std::vector<SourceTensor>> load_torch_zip(std::span<const std::byte> file, const std::string& label,
                                                 const TorchLoadOptions& options = {});
Result<std::vector<SourceTensor>> load_torch_legacy(std::span<const std::byte> file, const std::string& label);

// The state-dict pickle of a zip checkpoint on its own: `record(key)` returns the bytes of
// storage `key` or nullopt when there is none. Used by load_torch_zip and by the fuzz target.
using StorageLookup = std::function<std::optional<std::span<const std::byte>>(const std::string& key)>;
Result<std::vector<SourceTensor>> load_state_dict_pickle(std::span<const std::byte> pickle, const std::string& label,
                                                         const StorageLookup& record);

// True when the file starts with the legacy format's magic-number pickle.
bool looks_like_torch_legacy(std::span<const std::byte> file) noexcept;

}  // namespace embedrt::import
