#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "embedrt/embedder.hpp"
#include "embedrt/isa.hpp"
#include "embedrt/model.hpp"
#include "embedrt/reference.hpp"
#include "embedrt/half.hpp"
#include "text_format.hpp"
#include "vector_io.hpp"

namespace embedrt::cli {
namespace {

struct EmbedArgs {
  std::string model;
  std::string ids;
  std::string segments;
  std::uint64_t batch = 1;
  std::uint64_t start = 0;
  bool json = false;
  std::string out_dtype = "model";
  std::string isa;
  std::string output;  // empty: the primary output
  bool reference = false;
  OpenOptions open;
};

int run(const EmbedArgs& args) {
  auto ids = parse_ids(args.ids, "--ids");
  if (!ids) return report(ids.error());
  auto segments = parse_ids(args.segments, "--segments");
  if (!segments) return report(segments.error());
  if (args.batch == 0) return report(Error(ErrorCode::kInvalidArgument, "--batch must be at least 1"));
  if (ids->size() % args.batch != 0) {
    return report(Error(ErrorCode::kInvalidArgument,
                        "--ids has " + std::to_string(ids->size()) +
                            " ids, which do not split into --batch " + std::to_string(args.batch) +
                            " sequences of equal length"));
  }
  auto out_dtype = args.out_dtype == "model" ? std::optional<OutputDType>(OutputDType::kF32) : parse_output_dtype(args.out_dtype);
  if (!out_dtype) {
    return report(Error(ErrorCode::kInvalidArgument, "--out-dtype '" + args.out_dtype + "': expected model, f32, bf16 or f16"));
  }
  auto model = Model::open(args.model, args.open);
  if (!model) return report(model.error());
  auto output = output_index(*model, args.output);
  if (!output) return report(output.error());
  if (args.out_dtype == "model") out_dtype = natural_output_dtype(*model, *output);
  const OutputInfo& info = model->outputs()[*output];
  const std::uint64_t count = ids->size() * info.dim();
  Result<std::vector<float>> out = std::vector<float>();
  if (args.reference) {
    if (*out_dtype != OutputDType::kF32) {
      return report(Error(ErrorCode::kInvalidArgument, "--reference computes f32 only (add --out-dtype f32)"));
    }
    std::vector<float> values(count);
    if (Status s = reference_embed(*model, *ids, args.batch, args.start, values, *segments, *output); !s) {
      return report(s.error());
    }
    out = std::move(values);
  } else {
    auto embedder = embedder_for(*model, args.isa);
    if (!embedder) return report(embedder.error());
    EmbedRequest request;
    request.ids = *ids;
    request.sequences = args.batch;
    request.start = args.start;
    request.segment_ids = *segments;
    out = compute_as_floats(*out_dtype, count, [&](OutputSpan span) {
      const OutputTarget target{*output, span};
      return embedder->embed(request, std::span(&target, 1));
    });
    if (!out) return report(out.error());
  }
  const std::uint64_t leading[] = {args.batch, ids->size() / args.batch};
  write_vectors(*out, leading, info.token_shape, args.json);
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

}  // namespace

Runner add_embed_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("embed", "Embed token ids with a model and print the vectors");
  auto args = std::make_shared<EmbedArgs>();
  cmd->add_option("MODEL", args->model, "the .embt model")->required();
  cmd->add_option("--ids", args->ids, "comma-separated token ids, e.g. 3,1,4,1")->required();
  cmd->add_option("--batch", args->batch, "number of sequences the ids split into (equal lengths)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  cmd->add_option("--start", args->start, "position of the first token of each sequence")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 62));
  cmd->add_option("--segments", args->segments, "comma-separated token type ids, one per id (default all 0)");
  cmd->add_flag("--json", args->json, R"(print {"shape": [B, L, D], "data": [...]})");
  cmd->add_option("--out-dtype", args->out_dtype, "output precision: model (the model's own: bf16 for a bf16 table, ...), f32, bf16 or f16 (printed as decoded floats)");
  cmd->add_option("--isa", args->isa, "force a kernel: " + known_list() + " (default: best, or EMBEDRT_ISA)");
  cmd->add_option("--output", args->output, "which output of the model (default: its primary one; `embedrt inspect` lists them)");
  cmd->add_flag("--reference", args->reference, "use the scalar reference path (the test oracle) instead of the kernels");
  add_open_options(cmd, args->open, false);
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
