#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "embedrt/embedder.hpp"
#include "embedrt/model.hpp"
#include "embedrt/reference.hpp"
#include "embedrt/half.hpp"
#include "text_format.hpp"

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
  bool reference = false;
  OpenOptions open;
};

// "3,1,4,1" -> {3, 1, 4, 1}. Negative values parse, so the embed call can name them.
Result<std::vector<std::int64_t>> parse_ids(const std::string& text, const char* option) {
  std::vector<std::int64_t> ids;
  if (text.empty()) return ids;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    std::int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string(option) + ": item " + std::to_string(ids.size()) + " ('" + item +
                       "') is not a 64-bit integer");
    }
    ids.push_back(value);
    begin = end + 1;
  }
  return ids;
}

void write_json(const std::vector<float>& out, std::uint64_t batch, std::uint64_t length,
                std::uint64_t dim) {
  std::string text = "{\"shape\": [" + std::to_string(batch) + ", " + std::to_string(length) +
                     ", " + std::to_string(dim) + "], \"data\": [";
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i) text += ", ";
    text += format_float(out[i]);
  }
  text += "]}\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
}

void write_text(const std::vector<float>& out, std::uint64_t batch, std::uint64_t length,
                std::uint64_t dim) {
  std::string text = "shape [" + std::to_string(batch) + ", " + std::to_string(length) + ", " +
                     std::to_string(dim) + "]\n";
  for (std::uint64_t token = 0; token < batch * length; ++token) {
    text += "[" + std::to_string(token / length) + ", " + std::to_string(token % length) + "]";
    for (std::uint64_t j = 0; j < dim; ++j) text += " " + format_float(out[token * dim + j]);
    text += "\n";
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
}

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
  if (args.out_dtype == "model") out_dtype = natural_output_dtype(*model);
  const std::uint64_t dim = model->dim();
  const std::uint64_t length = ids->size() / args.batch;
  std::vector<float> out(ids->size() * dim);
  if (args.reference) {
    if (*out_dtype != OutputDType::kF32) {
      return report(Error(ErrorCode::kInvalidArgument, "--reference computes f32 only (add --out-dtype f32)"));
    }
    if (Status s = reference_embed(*model, *ids, args.batch, args.start, out, *segments); !s) return report(s.error());
  } else {
    EmbedderOptions options;
    if (!args.isa.empty()) {
      options.isa = parse_isa(args.isa);
      if (!options.isa) return report(Error(ErrorCode::kInvalidArgument, "--isa '" + args.isa + "': expected scalar, sse4.2, avx2 or avx512"));
    }
    auto embedder = Embedder::create(std::move(*model), options);
    if (!embedder) return report(embedder.error());
    EmbedRequest request;
    request.ids = *ids;
    request.sequences = args.batch;
    request.start = args.start;
    request.segment_ids = *segments;
    Status s;
    if (*out_dtype == OutputDType::kF32) {
      s = embedder->embed(request, OutputSpan(out));
    } else {
      // 16-bit output, printed as the floats it decodes to.
      const bool bf16 = *out_dtype == OutputDType::kBF16;
      const auto run = [&](auto element) {
        std::vector<decltype(element)> bits(out.size());
        s = embedder->embed(request, OutputSpan(bits));
        for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16 ? bf16_to_f32(bits[i].bits) : f16_to_f32(bits[i].bits);
      };
      bf16 ? run(BFloat16{}) : run(Float16{});
    }
    if (!s) return report(s.error());
  }
  if (args.json) {
    write_json(out, args.batch, length, dim);
  } else {
    write_text(out, args.batch, length, dim);
  }
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
  cmd->add_option("--isa", args->isa, "force a kernel: scalar, sse4.2, avx2 or avx512 (default: best, or EMBEDRT_ISA)");
  cmd->add_flag("--reference", args->reference, "use the scalar reference path (the test oracle) instead of the kernels");
  add_open_options(cmd, args->open, false);
  return [args]() { return run(*args); };
}

}  // namespace embedrt::cli
