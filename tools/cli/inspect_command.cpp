#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <variant>

#include "commands.hpp"
#include "inspect_json.hpp"
#include "embedrt/import.hpp"
#include "embedrt/table_file.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

// A metadata value as inspect prints it (doubles to 17 digits).
std::string value_text(const MetadataValue& value) {
  return std::visit([](const auto& v) -> std::string {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::string>) return v;
    else if constexpr (std::is_same_v<T, double>) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.17g", v);
      return buffer;
    }
    else return std::to_string(v);
  }, value);
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
  if (m.padding_id >= 0) {
    std::printf("padding:   id %lld takes position row %llu; other tokens count non-pads only\n",
                static_cast<long long>(m.padding_id), static_cast<unsigned long long>(m.position_offset - 1));
  }
  std::printf("scale:     token %s, output %s\nnorm eps:  %s\n", format_float(static_cast<float>(m.token_scale)).c_str(),
              format_float(static_cast<float>(m.output_scale)).c_str(), format_float(static_cast<float>(m.norm_epsilon)).c_str());
  // Several outputs (1.2): each with the rules it sets.
  if (m.required_version() >= FormatVersion{1, 2}) {
    std::string rules;
    for (const auto& [key, value] : output_rule_values(m.primary(), true)) {
      if (key == "output.shape" || key.rfind("ids.", 0) == 0 || key.rfind("pooling.", 0) == 0) {
        rules += ", " + key + " " + value_text(value);
      }
    }
    std::printf("output:    %s (primary)%s\n", m.name.c_str(), printable(rules).c_str());
    for (const OutputRules& o : m.outputs) {
      rules.clear();
      for (const auto& [key, value] : output_rule_values(o, false)) rules += (rules.empty() ? "" : ", ") + key + " " + value_text(value);
      std::printf("output:    %s: %s\n", o.name.c_str(), printable(rules).c_str());
    }
  }
  for (const auto& [key, value] : m.extra) {
    std::printf("%-10s %s\n", (key + ":").c_str(), printable(value_text(value)).c_str());
  }
  if (!m.source_dtype.empty()) std::printf("source:    %s\n", m.source_dtype.c_str());
  if (!m.source_files.empty()) std::printf("files:     %s\n", m.source_files.c_str());
  std::printf("\n%-32s %-12s %-6s %-18s %10s %12s\n", "table", "role", "dtype", "shape", "row_stride",
              "offset");
  for (const TableView& t : file.tables()) {
    const std::string shape = "[" + std::to_string(t.rows) + ", " + std::to_string(t.dim) + "]";
    std::printf("%-32s %-12s %-6s %-18s %10llu %12llu\n", printable(t.name).c_str(),
                std::string(role_name(t.role)).c_str(), std::string(dtype_name(t.dtype)).c_str(),
                shape.c_str(), static_cast<unsigned long long>(t.row_stride),
                static_cast<unsigned long long>(t.offset));
  }
}

int inspect_checkpoint(const std::string& path, bool json) {
  auto checkpoint = import::open_checkpoint({path});
  if (!checkpoint) return report(checkpoint.error());
  // What convert would do with it: the recipe and its evidence, or why none fits.
  auto plan = import::plan_model(*checkpoint);
  if (json) {
    std::printf("%s\n", describe::checkpoint_json(*checkpoint, plan).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  for (std::size_t i = 0; i < checkpoint->files.size(); ++i) {
    std::printf("%s: %s\n", printable(checkpoint->files[i]).c_str(), checkpoint->formats[i].c_str());
  }
  if (!checkpoint->config_path.empty()) std::printf("config: %s\n", printable(checkpoint->config_path).c_str());
  if (plan) {
    std::printf("recipe: %s (%s)\n", plan->family.c_str(), printable(plan->explanation).c_str());
    for (const import::ChosenTable& c : plan->tables) {
      std::printf("  %-12s %s\n", std::string(role_name(c.role)).c_str(), printable(c.tensor->name).c_str());
    }
  } else {
    std::printf("recipe: none: %s\n", printable(plan.error().message()).c_str());
  }
  std::printf("\n%-48s %-9s %-18s %-16s %s\n", "tensor", "dtype", "shape", "strides", "storage offset");
  for (const import::SourceTensor& t : checkpoint->tensors) {
    std::printf("%-48s %-9s %-18s %-16s %lld\n", printable(t.name).c_str(), std::string(import::source_dtype_name(t.dtype)).c_str(),
                import::shape_string(t.shape).c_str(), import::shape_string(t.strides).c_str(),
                static_cast<long long>(t.storage_offset));
  }
  return kExitOk;
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show the tables of an .embt file, or the tensors of a checkpoint");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("FILE", *path, "the file to inspect")->required();
  cmd->add_flag("--json", *json, "print one JSON object");
  return [path, json]() {
    std::error_code error;
    if (!describe::looks_like_embt(*path) || std::filesystem::is_directory(*path, error)) return inspect_checkpoint(*path, *json);
    auto file = TableFile::open(*path);
    if (!file) return report(file.error());
    if (*json) {
      std::printf("%s\n", describe::table_file_json(*file).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      print_text(*file);
    }
    return kExitOk;
  };
}

}  // namespace embedrt::cli
