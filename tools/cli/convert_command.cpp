// `embedrt convert`: PyTorch / safetensors checkpoints to .embt, without Python and without
// executing pickle code.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "embedrt/import.hpp"
#include "progress_bar.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

// What a planned table is for: its role, or the output it is the token table of.
std::string label(const import::ModelPlan& plan, const import::ChosenTable& c) {
  if (c.use == import::ChosenTable::Use::kPoolingWeights) return "weights";
  if (c.use == import::ChosenTable::Use::kIdMap) return "id map";
  return c.output == 0 ? std::string(role_name(c.role)) : plan.metadata.outputs[c.output - 1].name;
}

struct ConvertArgs {
  std::vector<std::string> inputs;
  std::string output;
  std::string preset = "auto";
  import::TableOverrides overrides;
  double norm_eps = -1;
  std::string key;
  std::string dtype = "native";
  std::string config;
  bool ignore_config = false;
  bool force = false;
  bool progress = false, no_progress = false;
  bool no_crc_check = false;
  int quiet = 0, verbose = 0;
  std::string positions;
  std::uint64_t context = 0;
  bool allow_overflow = false;
  std::string pooling;              // empty: the recipe's
  bool normalize = false, no_normalize = false;
};

int run(const ConvertArgs& args) {
  std::optional<DType> dtype;
  if (args.dtype != "native") {
    dtype = parse_dtype(args.dtype);
    if (!dtype || !is_value_dtype(*dtype)) {
      return report(Error(ErrorCode::kInvalidArgument, "--dtype '" + args.dtype + "': expected native, f32, f16, bf16, int8 or int4"));
    }
  }
  if (!args.config.empty() && args.ignore_config) {
    return report(Error(ErrorCode::kInvalidArgument, "--config and --ignore-config exclude each other"));
  }
  if (!args.force && ::access(args.output.c_str(), F_OK) == 0) {
    return report(Error(ErrorCode::kAlreadyExists, "'" + args.output + "' exists; use --force to replace it"));
  }
  auto checkpoint = import::open_checkpoint(args.inputs, {.check_crc = !args.no_crc_check, .key = args.key,
                                                         .config_path = args.config, .ignore_config = args.ignore_config});
  if (!checkpoint) return report(checkpoint.error());
  if (args.verbose > 0) {
    for (std::size_t i = 0; i < checkpoint->files.size(); ++i) {
      std::printf("read %s (%s)\n", checkpoint->files[i].c_str(), checkpoint->formats[i].c_str());
    }
    std::printf("%zu tensors\n", checkpoint->tensors.size());
  }
  import::TableOverrides overrides = args.overrides;
  if (args.norm_eps >= 0) overrides.norm_epsilon = args.norm_eps;
  import::PlanOptions plan_options{.preset = args.preset, .overrides = overrides};
  if (!args.pooling.empty()) {
    plan_options.pooling = parse_pooling_mode(args.pooling);
    if (!plan_options.pooling || *plan_options.pooling == PoolingMode::kNone) {
      return report(Error(ErrorCode::kInvalidArgument, "--pooling '" + args.pooling + "': expected sum, mean or max"));
    }
  }
  if (args.normalize && args.no_normalize) {
    return report(Error(ErrorCode::kInvalidArgument, "--normalize and --no-normalize exclude each other"));
  }
  if (args.normalize || args.no_normalize) plan_options.normalize = args.normalize;
  auto plan = import::plan_model(*checkpoint, plan_options);
  if (!plan) return report(plan.error());
  if (args.positions == "sinusoidal") {
    if (Status s = import::add_sinusoidal_positions(*plan, args.context); !s) return report(s.error());
  } else if (!args.positions.empty()) {
    return report(Error(ErrorCode::kInvalidArgument, "--positions '" + args.positions + "': only 'sinusoidal' is generated"));
  }
  const import::ConvertOptions convert_options{.dtype = dtype, .overwrite = args.force, .allow_overflow = args.allow_overflow};
  if (args.quiet == 0) {
    std::printf("recipe: %s (%s)\n", plan->family.c_str(), printable(plan->explanation).c_str());
    if (const auto rules = plan->metadata.extra.find("recipe.rules"); rules != plan->metadata.extra.end()) {
      std::printf("  computes %s\n", printable(std::get<std::string>(rules->second)).c_str());
    }
    if (plan->sinusoidal_context) {
      std::printf("  %-12s generated sinusoidal [%llu, %lld]\n", "position",
                  static_cast<unsigned long long>(plan->sinusoidal_context),
                  static_cast<long long>(plan->tables[0].tensor->shape.back()));
    }
    for (const import::ChosenTable& c : plan->tables) {
      std::printf("  %-12s %s %s %s%s\n", label(*plan, c).c_str(), printable(c.tensor->name).c_str(),
                  std::string(import::source_dtype_name(c.tensor->dtype)).c_str(), import::shape_string(c.tensor->shape).c_str(),
                  c.projection ? (" @ " + printable(c.projection->name) + "^T (folded)").c_str() : "");
    }
    std::printf("  tables as %s%s\n", std::string(dtype_name(import::table_dtype(*plan, convert_options))).c_str(),
                dtype ? "" : " (the checkpoint's dtype; --dtype changes it)");
    std::fflush(stdout);
  }
  const bool show_progress = args.progress || (!args.no_progress && args.quiet == 0 && ::isatty(STDERR_FILENO));
  ProgressBar bar(show_progress, "converting");
  auto reports = import::convert_model(*plan, args.output, convert_options,
                                       [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); });
  bar.finish();
  if (!reports) return report(reports.error());
  if (args.quiet == 0) {
    for (std::size_t i = 0; i < reports->size(); ++i) {
      const import::TableReport& r = (*reports)[i];
      const std::string what = i < plan->tables.size() ? label(*plan, plan->tables[i]) : std::string(role_name(r.role));
      std::printf("wrote %-12s [%llu, %llu] %s", what.c_str(),
                  static_cast<unsigned long long>(r.rows), static_cast<unsigned long long>(r.dim),
                  std::string(dtype_name(r.dtype)).c_str());
      if (r.exact) {
        std::printf(" (exact)\n");
      } else {
        std::printf(" (max abs error %.3g, mean abs error %.3g, rms error %.3g)\n", r.max_abs_error, r.mean_abs_error,
                    r.rms_error);
      }
    }
    std::printf("%s\n", args.output.c_str());
  }
  return kExitOk;
}

}  // namespace

Runner add_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Convert PyTorch or safetensors weights to an .embt file");
  auto args = std::make_shared<ConvertArgs>();
  cmd->add_option("INPUT", args->inputs, ".pt/.pth/.bin (torch zip or legacy), .safetensors, *.index.json, or a model folder")
      ->required();
  cmd->add_option("-o,--output", args->output, "the .embt file to write")->required();
  std::string presets = "auto";
  for (const std::string& name : import::recipe_names()) presets += ", " + name;
  cmd->add_option("--preset", args->preset, "model family recipe: " + presets +
                                               " (auto: config.json's model_type, else tensor names when unambiguous)");
  cmd->add_option("--config", args->config, "the model's config.json (default: the one in the folder or beside INPUT)");
  cmd->add_flag("--ignore-config", args->ignore_config, "plan from tensor names and flags alone");
  cmd->add_option("--token", args->overrides.token, "tensor name of the token table");
  cmd->add_option("--position", args->overrides.position, "tensor name of the position table");
  cmd->add_option("--segment", args->overrides.segment, "tensor name of the token-type (segment) table");
  cmd->add_option("--norm-weight", args->overrides.norm_weight, "tensor name of the LayerNorm weight");
  cmd->add_option("--norm-bias", args->overrides.norm_bias, "tensor name of the LayerNorm bias");
  cmd->add_option("--norm-eps", args->norm_eps, "LayerNorm epsilon (default: the preset's)")
      ->check(CLI::Range(1e-30, 1.0));
  cmd->add_option("--key", args->key, "dotted path of the state dict inside a checkpoint (e.g. model)");
  cmd->add_option("--dtype", args->dtype, "table dtype: native (the checkpoint's: bf16 stays bf16; f64 becomes f32), f32, f16, bf16, int8 or int4 (rowwise: a scale and bias per row; int4 files are format 2.0)");
  cmd->add_option("--positions", args->positions, "generate a position table: sinusoidal (original Transformer)");
  cmd->add_option("--context", args->context, "rows of the generated position table")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 24));
  cmd->add_option("--pooling", args->pooling, "default pooling of bag requests: sum, mean or max (an EmbeddingBag "
                  "state dict needs it; static models say mean themselves)");
  cmd->add_flag("--normalize", args->normalize, "bag requests L2-normalize pooled vectors by default");
  cmd->add_flag("--no-normalize", args->no_normalize, "... or do not (default: what the model's config says)");
  cmd->add_flag("--force", args->force, "replace OUT if it exists");
  cmd->add_flag("--allow-overflow", args->allow_overflow,
                "store values beyond the table dtype's range as infinity (default: refuse, naming the value)");
  cmd->add_flag("--progress", args->progress, "show a progress bar even when stderr is not a terminal");
  cmd->add_flag("--no-progress", args->no_progress, "never show a progress bar");
  cmd->add_flag("--no-crc-check", args->no_crc_check, "skip CRC-32 checks of zip entries");
  cmd->add_flag("-q,--quiet", args->quiet, "print nothing but errors");
  cmd->add_flag("-v,--verbose", args->verbose, "print the files read");
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
