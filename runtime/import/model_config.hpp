// A Hugging Face config.json as the recipes read it: typed look-ups that follow `text_config`
// (multimodal wrappers keep the language model's settings there) and remember every value read,
// so the converter can store where each number of the plan came from.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"

namespace embedrt::import {

class ModelConfig {
 public:
  // Parses config.json text; `path` names it in errors. Refuses anything but a JSON object.
  static Result<ModelConfig> parse(std::string_view text, const std::string& path);

  const std::string& path() const noexcept { return path_; }
  const std::string& model_type() const noexcept { return model_type_; }            // top level
  const std::string& text_model_type() const noexcept { return text_model_type_; }  // of text_config
  const std::vector<std::string>& architectures() const noexcept { return architectures_; }
  bool has(std::string_view key) const;

  // A value from text_config if it has the key, else from the top level; a dotted key names a value
  // in nested objects of the top level ("vision_config.vocab_offset"). A key present with another
  // JSON type is an error naming the key; absent keys give nullopt.
  Result<std::optional<std::uint64_t>> u64(std::string_view key) const;
  Result<std::optional<std::int64_t>> i64(std::string_view key) const;
  Result<std::optional<double>> f64(std::string_view key) const;
  Result<std::optional<bool>> boolean(std::string_view key) const;
  Result<std::optional<std::string>> string(std::string_view key) const;

  // Every value read so far, as "config.<key>" metadata.
  const std::map<std::string, MetadataValue, std::less<>>& values_read() const noexcept { return read_; }

 private:
  struct Json;
  std::shared_ptr<const Json> json_;
  std::string path_, model_type_, text_model_type_;
  std::vector<std::string> architectures_;
  mutable std::map<std::string, MetadataValue, std::less<>> read_;
};

}  // namespace embedrt::import
