// embedrt.convert, embedrt.inspect and embedrt.verify: the importer library and the file reader,
// with the GIL released while they read and write files.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "arguments.hpp"
#include "bindings.hpp"
#include "embedrt/import.hpp"
#include "errors.hpp"
#include "inspect_json.hpp"
#include "python_json.hpp"

namespace embedrt::python {
namespace {

std::vector<std::string> read_sources(nb::handle src) {
  std::vector<std::string> inputs;
  if (PyList_Check(src.ptr()) || PyTuple_Check(src.ptr())) {
    for (nb::handle item : src) inputs.push_back(read_path(item, "src"));
    if (inputs.empty()) raise_invalid("src", "is an empty list");
  } else {
    inputs.push_back(read_path(src, "src"));
  }
  return inputs;
}

std::optional<DType> read_table_dtype(const std::string& name) {
  if (name == "native") return std::nullopt;
  const std::string canonical = name == "float32" ? "f32" : name == "float16" ? "f16" : name == "bfloat16" ? "bf16" : name;
  const std::optional<DType> dtype = parse_dtype(canonical);
  if (!dtype || !is_value_dtype(*dtype)) raise_invalid("dtype", "'" + name + "'; expected native, f32, f16, bf16, int8 or int4");
  return dtype;
}

struct ConvertArgs {
  std::vector<std::string> inputs;
  std::string output;
  import::CheckpointOptions checkpoint;
  import::PlanOptions plan;
  import::ConvertOptions convert;
  std::uint64_t sinusoidal_context = 0;
};

// Everything the library does, without the GIL: open, plan, convert.
Result<nlohmann::ordered_json> run_convert(const ConvertArgs& args) {
  auto checkpoint = import::open_checkpoint(args.inputs, args.checkpoint);
  if (!checkpoint) return std::move(checkpoint).error();
  auto plan = import::plan_model(*checkpoint, args.plan);
  if (!plan) return std::move(plan).error();
  if (args.sinusoidal_context > 0) {
    if (Status s = import::add_sinusoidal_positions(*plan, args.sinusoidal_context); !s) return std::move(s).error();
  }
  auto reports = import::convert_model(*plan, args.output, args.convert);
  if (!reports) return std::move(reports).error();
  nlohmann::ordered_json doc;
  doc["path"] = args.output;
  doc["recipe"] = plan->family;
  doc["evidence"] = plan->explanation;
  const auto rules = plan->metadata.extra.find("recipe.rules");
  doc["rules"] = rules != plan->metadata.extra.end() && std::holds_alternative<std::string>(rules->second)
                     ? nlohmann::ordered_json(std::get<std::string>(rules->second))
                     : nlohmann::ordered_json(nullptr);
  doc["table_dtype"] = dtype_name(import::table_dtype(*plan, args.convert));
  auto& tables = doc["tables"] = nlohmann::ordered_json::array();
  for (const import::TableReport& r : *reports) {
    tables.push_back({{"name", r.source_name}, {"role", role_name(r.role)}, {"dtype", dtype_name(r.dtype)},
                      {"shape", {r.rows, r.dim}}, {"exact", r.exact}, {"max_abs_error", r.max_abs_error},
                      {"mean_abs_error", r.mean_abs_error}, {"rms_error", r.rms_error}});
  }
  return doc;
}

nb::object convert(nb::handle src, nb::handle dst, const std::string& dtype, const std::string& preset, bool force,
                   nb::handle config, bool ignore_config, std::optional<std::string> key, std::optional<std::string> token,
                   std::optional<std::string> position, std::optional<std::string> segment,
                   std::optional<std::string> norm_weight, std::optional<std::string> norm_bias,
                   std::optional<double> norm_eps, std::optional<std::string> positions,
                   std::optional<std::uint64_t> context, bool allow_overflow, bool check_crc,
                   std::optional<std::string> pooling, std::optional<bool> normalize) {
  ConvertArgs args;
  args.inputs = read_sources(src);
  args.output = read_path(dst, "dst");
  args.convert = {.dtype = read_table_dtype(dtype), .overwrite = force, .allow_overflow = allow_overflow};
  if (!config.is_none()) {
    if (ignore_config) raise_invalid("config", "config and ignore_config exclude each other");
    args.checkpoint.config_path = read_path(config, "config");
  }
  args.checkpoint.ignore_config = ignore_config;
  args.checkpoint.check_crc = check_crc;
  args.checkpoint.key = key.value_or("");
  args.plan.preset = preset;
  args.plan.overrides = {.token = token.value_or(""), .position = position.value_or(""), .segment = segment.value_or(""),
                         .norm_weight = norm_weight.value_or(""), .norm_bias = norm_bias.value_or("")};
  if (norm_eps) {
    if (!(*norm_eps >= 1e-30 && *norm_eps <= 1.0)) raise_invalid("norm_eps", std::to_string(*norm_eps) + " is outside [1e-30, 1]");
    args.plan.overrides.norm_epsilon = *norm_eps;
  }
  if (positions) {
    if (*positions != "sinusoidal") raise_invalid("positions", "'" + *positions + "': only 'sinusoidal' is generated");
    if (!context || *context < 1 || *context > (std::uint64_t{1} << 24)) {
      raise_invalid("context", "positions='sinusoidal' needs context, the rows of the table (1 to 16777216)");
    }
    args.sinusoidal_context = *context;
  } else if (context) {
    raise_invalid("context", "is only used with positions='sinusoidal'");
  }
  if (pooling) {
    args.plan.pooling = parse_pooling_mode(*pooling);
    if (!args.plan.pooling || *args.plan.pooling == PoolingMode::kNone) {
      raise_invalid("pooling", "'" + *pooling + "'; expected 'sum', 'mean' or 'max'");
    }
  }
  args.plan.normalize = normalize;
  if (!force && ::access(args.output.c_str(), F_OK) == 0) {
    throw RaisedError(Error(ErrorCode::kAlreadyExists, "'" + args.output + "' exists; pass force=True to replace it",
                            {.file = args.output, .field = "dst"}));
  }
  std::optional<Result<nlohmann::ordered_json>> report;
  {
    nb::gil_scoped_release release;
    report.emplace(run_convert(args));
  }
  if (!*report) raise_error(std::move(*report).error());
  return to_python(**report);
}

nb::object inspect(nb::handle path) {
  const std::string file = read_path(path, "path");
  std::optional<Result<nlohmann::ordered_json>> doc;
  {
    nb::gil_scoped_release release;
    doc.emplace(describe::inspect_json(file));
  }
  if (!*doc) raise_error(std::move(*doc).error());
  return to_python(**doc);
}

void verify(nb::handle path) {
  const std::string file = read_path(path, "path");
  std::optional<Status> status;
  {
    nb::gil_scoped_release release;
    auto opened = TableFile::open(file);
    status.emplace(opened ? opened->verify() : Status(std::move(opened).error()));
  }
  if (!*status) raise_error(std::move(*status).error());
}

}  // namespace

void bind_files(nb::module_& m) {
  m.def("convert", &convert, nb::arg("src"), nb::arg("dst"), nb::kw_only(), nb::arg("dtype") = "native",
        nb::arg("preset") = "auto", nb::arg("force") = false, nb::arg("config") = nb::none(),
        nb::arg("ignore_config") = false, nb::arg("key") = nb::none(), nb::arg("token") = nb::none(),
        nb::arg("position") = nb::none(), nb::arg("segment") = nb::none(), nb::arg("norm_weight") = nb::none(),
        nb::arg("norm_bias") = nb::none(), nb::arg("norm_eps") = nb::none(), nb::arg("positions") = nb::none(),
        nb::arg("context") = nb::none(), nb::arg("allow_overflow") = false, nb::arg("check_crc") = true,
        nb::arg("pooling") = nb::none(), nb::arg("normalize") = nb::none(),
        R"(Converts a checkpoint to an .embt file, as `embedrt convert` does (no pickle code is executed).

Args:
  src: a Hugging Face model folder, a .pt/.pth/.bin file (torch zip or legacy), a .safetensors
    file, a *.index.json of shards, or a list of files.
  dst: the .embt file to write: atomically (nothing is left behind on an error).
  dtype: table dtype: "native" (the checkpoint's own: bf16 stays bf16), "f32", "f16", "bf16",
    "int8" or "int4" (rowwise; int4 files are format 2.0).
  preset: "auto" (config.json's model_type, else tensor names when they fit one computation) or a
    recipe name ("gpt2", "llama", "bert", ...).
  force: replace dst if it exists.
  config, ignore_config: an explicit config.json, or none at all.
  key: the dotted path of the state dict inside a checkpoint (e.g. "model").
  token, position, segment, norm_weight, norm_bias: exact tensor names of the tables.
  norm_eps: LayerNorm epsilon (default: the recipe's).
  positions, context: positions="sinusoidal" generates a position table of `context` rows.
  allow_overflow: store values past the table dtype's range as infinity instead of refusing.
  check_crc: check the CRC-32 of zip entries.
  pooling, normalize: the model's defaults for Model.pool(): a plain EmbeddingBag state dict
    needs pooling ("sum", "mean" or "max"); static models (model2vec) say them themselves.

Returns:
  A report: {"path", "recipe", "evidence", "rules", "table_dtype", "tables": [{"name", "role",
  "dtype", "shape", "exact", "max_abs_error", "mean_abs_error", "rms_error"}]}.

The GIL is released while the files are read and written.)");
  m.def("inspect", &inspect, nb::arg("path"),
        R"(Describes an .embt file (format, metadata, tables) or a checkpoint (files, the recipe convert
would use or why none fits, every tensor): the document `embedrt inspect --json` prints, as a dict.)");
  m.def("verify", &verify, nb::arg("path"),
        "Checks every checksum of an .embt file; raises BadFileError naming the first damaged table.");
}

}  // namespace embedrt::python
