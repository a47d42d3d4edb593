#include "model_config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

namespace embedrt::import {

struct ModelConfig::Json {
  nlohmann::json top;
  const nlohmann::json* text = nullptr;  // text_config, when it is an object

  // The value of `key`: text_config's first, then the top level's. A dotted key names a value in
  // a nested object of the top level ("vision_config.vocab_offset").
  const nlohmann::json* find(std::string_view key) const {
    if (const std::size_t dot = key.find('.'); dot != std::string_view::npos) {
      const nlohmann::json* object = &top;
      std::size_t begin = 0;
      for (std::size_t end = dot; begin <= key.size(); end = std::min(key.find('.', begin), key.size())) {
        const std::string part(key.substr(begin, end - begin));
        if (!object->is_object() || !object->contains(part)) return nullptr;
        object = &(*object)[part];
        begin = end + 1;
      }
      return object;
    }
    const std::string k(key);
    if (text != nullptr && text->contains(k)) return &(*text)[k];
    if (top.contains(k)) return &top[k];
    return nullptr;
  }
};

namespace {

// Metadata keys are [a-z0-9._]: config keys are lower snake case, anything else is not recorded.
bool recordable(std::string_view key) {
  for (char c : key) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) return false;
  }
  return !key.empty() && key.size() <= 200;
}

}  // namespace

Result<ModelConfig> ModelConfig::parse(std::string_view text, const std::string& path) {
  auto json = std::make_shared<Json>();
  // Depth-limited by the callback: a hostile config cannot drive recursion or a deep tree.
  int depth = 0;
  bool too_deep = false;
  const auto limit = [&](int d, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if (event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) {
      depth = d;
      if (d > 64) too_deep = true;
    }
    return !too_deep;
  };
  try {
    json->top = nlohmann::json::parse(text.begin(), text.end(), limit);
  } catch (const std::exception& e) {
    if (too_deep) return Error(ErrorCode::kMalformed, "'" + path + "': nested deeper than 64 levels");
    return Error(ErrorCode::kMalformed, "'" + path + "': not valid JSON: " + e.what());
  }
  (void)depth;
  if (too_deep) return Error(ErrorCode::kMalformed, "'" + path + "': nested deeper than 64 levels");
  if (!json->top.is_object()) return Error(ErrorCode::kMalformed, "'" + path + "': not a JSON object");
  ModelConfig config;
  config.path_ = path;
  const auto& top = json->top;
  if (top.contains("model_type")) {
    if (!top["model_type"].is_string()) return Error(ErrorCode::kMalformed, "'" + path + "': model_type is not a string");
    config.model_type_ = top["model_type"].get<std::string>();
  }
  if (top.contains("text_config") && top["text_config"].is_object()) {
    json->text = &top["text_config"];
    if (json->text->contains("model_type") && (*json->text)["model_type"].is_string()) {
      config.text_model_type_ = (*json->text)["model_type"].get<std::string>();
    }
  }
  if (top.contains("architectures") && top["architectures"].is_array()) {
    for (const auto& a : top["architectures"]) {
      if (a.is_string()) config.architectures_.push_back(a.get<std::string>());
    }
  }
  config.json_ = std::move(json);
  return config;
}

bool ModelConfig::has(std::string_view key) const {
  const nlohmann::json* v = json_->find(key);
  return v != nullptr && !v->is_null();
}

namespace {

Error wrong_type(const std::string& path, std::string_view key, const char* expected, const nlohmann::json& v) {
  return Error(ErrorCode::kMalformed, "'" + path + "': \"" + std::string(key) + "\" is " + v.dump().substr(0, 64) +
                                          ", expected " + expected);
}

}  // namespace

Result<std::optional<std::uint64_t>> ModelConfig::u64(std::string_view key) const {
  const nlohmann::json* v = json_->find(key);
  if (v == nullptr || v->is_null()) return std::optional<std::uint64_t>{};
  if (!v->is_number_unsigned()) return wrong_type(path_, key, "a non-negative integer", *v);
  const auto value = v->get<std::uint64_t>();
  if (recordable(key)) read_["config." + std::string(key)] = value;
  return std::optional<std::uint64_t>(value);
}

Result<std::optional<std::int64_t>> ModelConfig::i64(std::string_view key) const {
  const nlohmann::json* v = json_->find(key);
  if (v == nullptr || v->is_null()) return std::optional<std::int64_t>{};
  if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<std::uint64_t>() > INT64_MAX)) {
    return wrong_type(path_, key, "an integer", *v);
  }
  const auto value = v->get<std::int64_t>();
  if (recordable(key)) read_["config." + std::string(key)] = value;
  return std::optional<std::int64_t>(value);
}

Result<std::optional<double>> ModelConfig::f64(std::string_view key) const {
  const nlohmann::json* v = json_->find(key);
  if (v == nullptr || v->is_null()) return std::optional<double>{};
  if (!v->is_number() || !std::isfinite(v->get<double>())) return wrong_type(path_, key, "a finite number", *v);
  const auto value = v->get<double>();
  if (recordable(key)) read_["config." + std::string(key)] = value;
  return std::optional<double>(value);
}

Result<std::optional<bool>> ModelConfig::boolean(std::string_view key) const {
  const nlohmann::json* v = json_->find(key);
  if (v == nullptr || v->is_null()) return std::optional<bool>{};
  if (!v->is_boolean()) return wrong_type(path_, key, "true or false", *v);
  const bool value = v->get<bool>();
  if (recordable(key)) read_["config." + std::string(key)] = std::string(value ? "true" : "false");
  return std::optional<bool>(value);
}

Result<std::optional<std::string>> ModelConfig::string(std::string_view key) const {
  const nlohmann::json* v = json_->find(key);
  if (v == nullptr || v->is_null()) return std::optional<std::string>{};
  if (!v->is_string()) return wrong_type(path_, key, "a string", *v);
  auto value = v->get<std::string>();
  if (recordable(key)) read_["config." + std::string(key)] = value;
  return std::optional<std::string>(std::move(value));
}

}  // namespace embedrt::import
