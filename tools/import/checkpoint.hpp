// Opens what a user passes to `embedrt convert` / `inspect`: torch zip or legacy files,
// safetensors files, Hugging Face sharded indexes, or a folder holding one of these.
#pragma once

#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "mapped_file.hpp"
#include "source_tensor.hpp"

namespace embedrt::import {

struct CheckpointOptions {
  bool check_crc = true;
  std::string key;  // keep only tensors under this dotted path, and strip it ("model")
};

struct Checkpoint {
  std::vector<SourceTensor> tensors;
  std::vector<std::string> files;    // every file read, in order
  std::vector<std::string> formats;  // "torch zip", "torch legacy", "safetensors", per file
  std::vector<detail::MappedFile> mappings;  // keep the tensors' bytes alive
};

Result<Checkpoint> open_checkpoint(const std::vector<std::string>& inputs, const CheckpointOptions& options = {});

}  // namespace embedrt::import
