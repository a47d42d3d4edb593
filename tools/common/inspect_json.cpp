#include "inspect_json.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <variant>

namespace embedrt::describe {

nlohmann::ordered_json metadata_json(const Metadata& m) {
  nlohmann::ordered_json doc = {
      {"model.family", m.family},
      {"source.files", m.source_files},
      {"source.dtype", m.source_dtype},
      {"context_length", m.context_length},
      {"position.offset", m.position_offset},
      {"position.kind", position_kind_name(m.position_kind)},
      {"token.scale", m.token_scale},
      {"output.scale", m.output_scale},
      {"norm.epsilon", m.norm_epsilon},
  };
  if (m.padding_id >= 0) doc["position.padding_id"] = m.padding_id;
  // 1.2 rules of the primary output (output.name, output.shape, ...); the other outputs' are in
  // outputs_json.
  for (const auto& [key, value] : output_rule_values(m.primary(), true)) {
    if (!doc.contains(key)) std::visit([&, k = key](const auto& v) { doc[k] = v; }, value);
  }
  for (const auto& [key, value] : m.extra) {
    std::visit([&, k = key](const auto& v) { doc[k] = v; }, value);
  }
  return doc;
}

nlohmann::ordered_json outputs_json(const Metadata& m) {
  auto outputs = nlohmann::ordered_json::array();
  outputs.push_back({{"name", m.name}, {"primary", true}});
  for (const OutputRules& o : m.outputs) {
    nlohmann::ordered_json entry = {{"name", o.name}, {"primary", false}};
    for (const auto& [key, value] : output_rule_values(o, false)) {
      std::visit([&, k = key](const auto& v) { entry[k] = v; }, value);
    }
    outputs.push_back(std::move(entry));
  }
  return outputs;
}

nlohmann::ordered_json table_file_json(const TableFile& file) {
  nlohmann::ordered_json doc;
  doc["path"] = file.path();
  doc["format"] = std::to_string(file.version_major()) + "." + std::to_string(file.version_minor());
  doc["file_size"] = file.file_size();
  doc["metadata"] = metadata_json(file.metadata());
  doc["outputs"] = outputs_json(file.metadata());
  auto& tables = doc["tables"] = nlohmann::ordered_json::array();
  for (const TableView& t : file.tables()) {
    char checksum[19];
    std::snprintf(checksum, sizeof checksum, "0x%016llx", static_cast<unsigned long long>(t.checksum));
    tables.push_back({{"name", t.name},
                      {"role", role_name(t.role)},
                      {"dtype", dtype_name(t.dtype)},
                      {"shape", {t.rows, t.dim}},
                      {"row_stride", t.row_stride},
                      {"offset", t.offset},
                      {"size", t.bytes.size()},
                      {"checksum", checksum}});
  }
  return doc;
}

nlohmann::ordered_json checkpoint_json(const import::Checkpoint& checkpoint, const Result<import::ModelPlan>& plan) {
  nlohmann::ordered_json doc;
  doc["files"] = checkpoint.files;
  doc["formats"] = checkpoint.formats;
  if (!checkpoint.config_path.empty()) doc["config"] = checkpoint.config_path;
  if (plan) {
    doc["recipe"] = {{"name", plan->family}, {"evidence", plan->explanation}};
    for (const import::ChosenTable& c : plan->tables) doc["recipe"]["tables"][std::string(role_name(c.role))] = c.tensor->name;
  } else {
    doc["recipe"] = {{"error", plan.error().message()}};
  }
  auto& tensors = doc["tensors"] = nlohmann::ordered_json::array();
  for (const import::SourceTensor& t : checkpoint.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", import::source_dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"strides", t.strides},
                       {"storage_offset", t.storage_offset}});
  }
  return doc;
}

bool looks_like_embt(const std::string& path) {
  unsigned char magic[8] = {};
  // Not a regular file (a FIFO would block fopen forever): let TableFile::open refuse it.
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(path, ignored)) return true;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return true;  // let TableFile::open report the error
  const std::size_t n = std::fread(magic, 1, sizeof magic, f);
  std::fclose(f);
  static constexpr unsigned char kMagic[8] = {0x89, 'E', 'M', 'B', '\r', '\n', 0x1a, '\n'};
  return n >= 4 && std::memcmp(magic, kMagic, 4) == 0;
}

Result<nlohmann::ordered_json> inspect_json(const std::string& path) {
  std::error_code error;
  if (!looks_like_embt(path) || std::filesystem::is_directory(path, error)) {
    auto checkpoint = import::open_checkpoint({path});
    if (!checkpoint) return std::move(checkpoint).error();
    return checkpoint_json(*checkpoint, import::plan_model(*checkpoint));
  }
  auto file = TableFile::open(path);
  if (!file) return std::move(file).error();
  return table_file_json(*file);
}

}  // namespace embedrt::describe
