#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "embedrt/table_file.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

nlohmann::ordered_json to_json(const TableFile& file) {
  const Metadata& m = file.metadata();
  nlohmann::ordered_json doc;
  doc["path"] = file.path();
  doc["format"] = std::to_string(file.version_major()) + "." + std::to_string(file.version_minor());
  doc["file_size"] = file.file_size();
  doc["metadata"] = {
      {"model.family", m.family},
      {"source.files", m.source_files},
      {"source.dtype", m.source_dtype},
      {"context_length", m.context_length},
      {"position.offset", m.position_offset},
      {"position.kind", position_kind_name(m.position_kind)},
      {"output.scale", m.output_scale},
      {"norm.epsilon", m.norm_epsilon},
  };
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

void print_text(const TableFile& file) {
  const Metadata& m = file.metadata();
  std::printf("%s: embt %u.%u, %llu bytes\n", file.path().c_str(), file.version_major(),
              file.version_minor(), static_cast<unsigned long long>(file.file_size()));
  std::printf("model:     %s\n", m.family.c_str());
  std::printf("positions: %s, context %llu, offset %llu\n",
              std::string(position_kind_name(m.position_kind)).c_str(),
              static_cast<unsigned long long>(m.context_length),
              static_cast<unsigned long long>(m.position_offset));
  std::printf("scale:     %s\nnorm eps:  %s\n", format_float(static_cast<float>(m.output_scale)).c_str(),
              format_float(static_cast<float>(m.norm_epsilon)).c_str());
  if (!m.source_dtype.empty()) std::printf("source:    %s\n", m.source_dtype.c_str());
  if (!m.source_files.empty()) std::printf("files:     %s\n", m.source_files.c_str());
  std::printf("\n%-32s %-12s %-6s %-18s %10s %12s\n", "table", "role", "dtype", "shape", "row_stride",
              "offset");
  for (const TableView& t : file.tables()) {
    const std::string shape = "[" + std::to_string(t.rows) + ", " + std::to_string(t.dim) + "]";
    std::printf("%-32s %-12s %-6s %-18s %10llu %12llu\n", t.name.c_str(),
                std::string(role_name(t.role)).c_str(), std::string(dtype_name(t.dtype)).c_str(),
                shape.c_str(), static_cast<unsigned long long>(t.row_stride),
                static_cast<unsigned long long>(t.offset));
  }
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show the tables, dtypes, shapes and metadata of a file");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("FILE", *path, "the file to inspect")->required();
  cmd->add_flag("--json", *json, "print one JSON object");
  return [path, json]() {
    auto file = TableFile::open(*path);
    if (!file) return report(file.error());
    if (*json) {
      std::printf("%s\n", to_json(*file).dump(2).c_str());
    } else {
      print_text(*file);
    }
    return kExitOk;
  };
}

}  // namespace embedrt::cli
