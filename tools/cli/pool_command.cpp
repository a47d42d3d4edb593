// `embedrt pool`: one pooled vector per bag of ids (FORMAT.md 7.2), as EmbeddingBag and static
// sentence-embedding models compute them.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "embedrt/embedder.hpp"
#include "embedrt/isa.hpp"
#include "embedrt/model.hpp"
#include "embedrt/reference.hpp"
#include "text_format.hpp"
#include "vector_io.hpp"

namespace embedrt::cli {
namespace {

struct PoolArgs {
  std::string model;
  std::string ids;
  std::string offsets;  // bags + 1 boundaries; empty: --bags equal bags
  std::uint64_t bags = 1;
  std::string weights;
  std::string mode;  // empty: the model's
  bool normalize = false, no_normalize = false;
  bool json = false;
  std::string out_dtype = "model";
  std::string isa;
  std::string output;
  bool reference = false;
};

int run(const PoolArgs& args) {
  auto ids = parse_ids(args.ids, "--ids");
  if (!ids) return report(ids.error());
  auto offsets = parse_counts(args.offsets, "--offsets");
  if (!offsets) return report(offsets.error());
  auto weights = parse_floats(args.weights, "--weights");
  if (!weights) return report(weights.error());
  std::optional<PoolingMode> mode;
  if (!args.mode.empty()) {
    mode = parse_pooling_mode(args.mode);
    if (!mode || *mode == PoolingMode::kNone) {
      return report(Error(ErrorCode::kInvalidArgument, "--mode '" + args.mode + "': expected sum, mean or max"));
    }
  }
  if (args.normalize && args.no_normalize) {
    return report(Error(ErrorCode::kInvalidArgument, "--normalize and --no-normalize exclude each other"));
  }
  std::optional<bool> normalize;
  if (args.normalize || args.no_normalize) normalize = args.normalize;
  auto out_dtype = args.out_dtype == "model" ? std::optional<OutputDType>(OutputDType::kF32) : parse_output_dtype(args.out_dtype);
  if (!out_dtype) {
    return report(Error(ErrorCode::kInvalidArgument, "--out-dtype '" + args.out_dtype + "': expected model, f32, bf16 or f16"));
  }
  auto model = Model::open(args.model);
  if (!model) return report(model.error());
  auto output = output_index(*model, args.output);
  if (!output) return report(output.error());
  if (args.out_dtype == "model") out_dtype = natural_output_dtype(*model, *output);
  const std::uint64_t bags = offsets->empty() ? args.bags : offsets->size() - 1;
  const std::uint64_t dim = model->outputs()[*output].dim();
  if (offsets->size() == 1) {
    return report(Error(ErrorCode::kInvalidArgument, "--offsets needs bags + 1 values (0, the end of bag 0, ...)"));
  }
  Result<std::vector<float>> out = std::vector<float>();
  if (args.reference) {
    if (*out_dtype != OutputDType::kF32) {
      return report(Error(ErrorCode::kInvalidArgument, "--reference computes f32 only (add --out-dtype f32)"));
    }
    std::vector<float> values(bags * dim);
    if (Status s = reference_pool(*model, *output, *ids, *offsets, args.bags, *weights, mode.value_or(PoolingMode::kNone),
                                  normalize, values);
        !s) {
      return report(s.error());
    }
    out = std::move(values);
  } else {
    auto embedder = embedder_for(*model, args.isa);
    if (!embedder) return report(embedder.error());
    BagRequest request;
    request.ids = *ids;
    request.offsets = *offsets;
    request.bags = args.bags;
    request.weights = *weights;
    request.mode = mode;
    request.normalize = normalize;
    out = compute_as_floats(*out_dtype, bags * dim, [&](OutputSpan span) { return embedder->pool(request, span, *output); });
    if (!out) return report(out.error());
  }
  const std::uint64_t leading[] = {bags};
  write_vectors(*out, leading, model->outputs()[*output].token_shape, args.json);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

Runner add_pool_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("pool", "Pool bags of token ids into one vector each and print them");
  auto args = std::make_shared<PoolArgs>();
  cmd->add_option("MODEL", args->model, "the .embt model")->required();
  cmd->add_option("--ids", args->ids, "comma-separated token ids of all bags, back to back")->required();
  cmd->add_option("--offsets", args->offsets, "bag boundaries, bags + 1 values from 0 to the number of ids (e.g. 0,3,3,5: "
                                              "bags of 3, 0 and 2 ids)");
  cmd->add_option("--bags", args->bags, "without --offsets: the number of bags of equal size")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 32));
  cmd->add_option("--weights", args->weights, "comma-separated weights, one per id (sum or mean)");
  cmd->add_option("--mode", args->mode, "sum, mean or max (default: the model's pooling.mode)");
  cmd->add_flag("--normalize", args->normalize, "L2-normalize each pooled vector (default: the model's)");
  cmd->add_flag("--no-normalize", args->no_normalize, "do not normalize, whatever the model says");
  cmd->add_flag("--json", args->json, R"(print {"shape": [bags, D], "data": [...]})");
  cmd->add_option("--out-dtype", args->out_dtype, "output precision: model (the table's), f32, bf16 or f16");
  cmd->add_option("--isa", args->isa, "force a kernel: " + known_list());
  cmd->add_option("--output", args->output, "which output of the model (default: its primary one)");
  cmd->add_flag("--reference", args->reference, "use the scalar reference path instead of the kernels");
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
