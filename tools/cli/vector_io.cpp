#include "vector_io.hpp"

#include <charconv>
#include <cstdio>

#include "embedrt/half.hpp"
#include "embedrt/isa.hpp"
#include "text_format.hpp"

namespace embedrt::cli {
namespace {

// Splits "a,b,c" and parses each item with `parse`, naming the option and the item on failure.
template <typename T>
Result<std::vector<T>> parse_list(const std::string& text, const char* option, const char* what) {
  std::vector<T> values;
  if (text.empty()) return values;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    T value{};
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
      return Error(ErrorCode::kInvalidArgument, std::string(option) + ": item " + std::to_string(values.size()) + " ('" +
                                                    item + "') is not " + what);
    }
    values.push_back(value);
    begin = end + 1;
  }
  return values;
}

std::string shape_text(std::span<const std::uint64_t> leading, std::span<const std::uint64_t> inner) {
  std::string text;
  for (auto dims : {leading, inner}) {
    for (std::uint64_t n : dims) text += (text.empty() ? "" : ", ") + std::to_string(n);
  }
  return "[" + text + "]";
}

}  // namespace

Result<std::vector<std::int64_t>> parse_ids(const std::string& text, const char* option) {
  return parse_list<std::int64_t>(text, option, "a 64-bit integer");
}

Result<std::vector<std::uint64_t>> parse_counts(const std::string& text, const char* option) {
  return parse_list<std::uint64_t>(text, option, "a non-negative 64-bit integer");
}

Result<std::vector<float>> parse_floats(const std::string& text, const char* option) {
  return parse_list<float>(text, option, "a number");
}

Result<std::size_t> output_index(const Model& model, const std::string& name) {
  if (name.empty()) return std::size_t{0};
  const OutputInfo* found = model.find_output(name);
  if (found == nullptr) {
    std::string names;
    for (const OutputInfo& o : model.outputs()) names += (names.empty() ? "" : ", ") + o.name;
    return Error(ErrorCode::kInvalidArgument, "--output '" + name + "': the model's outputs are " + names);
  }
  return static_cast<std::size_t>(found - model.outputs().data());
}

Result<Embedder> embedder_for(const Model& model, const std::string& isa) {
  EmbedderOptions options;
  if (!isa.empty()) {
    options.isa = parse_isa(isa);
    if (!options.isa) return Error(ErrorCode::kInvalidArgument, "--isa '" + isa + "': expected one of " + known_list());
  }
  return Embedder::create(model, options);
}

Result<std::vector<float>> compute_as_floats(OutputDType dtype, std::uint64_t count,
                                             const std::function<Status(OutputSpan)>& compute) {
  std::vector<float> out(count);
  Status s;
  if (dtype == OutputDType::kF32) {
    s = compute(OutputSpan(out));
  } else {
    const auto run = [&](auto element) {
      std::vector<decltype(element)> bits(count);
      s = compute(OutputSpan(bits));
      for (std::size_t i = 0; i < bits.size(); ++i) {
        out[i] = dtype == OutputDType::kBF16 ? bf16_to_f32(bits[i].bits) : f16_to_f32(bits[i].bits);
      }
    };
    dtype == OutputDType::kBF16 ? run(BFloat16{}) : run(Float16{});
  }
  if (!s) return std::move(s).error();
  return out;
}

void write_vectors(const std::vector<float>& values, std::span<const std::uint64_t> leading,
                   std::span<const std::uint64_t> inner, bool json) {
  const std::string shape = shape_text(leading, inner);
  std::string text;
  if (json) {
    text = "{\"shape\": " + shape + ", \"data\": [";
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i) text += ", ";
      text += format_float(values[i]);
    }
    text += "]}\n";
  } else {
    text = "shape " + shape + "\n";
    std::uint64_t vectors = 1, width = 1;
    for (std::uint64_t n : leading) vectors *= n;
    for (std::uint64_t n : inner) width *= n;
    for (std::uint64_t v = 0; v < vectors; ++v) {
      // The vector's index over the leading dims, e.g. [1, 3].
      std::string label;
      for (std::size_t d = leading.size(), rest = v; d-- > 0;) {
        label = std::to_string(rest % leading[d]) + (label.empty() ? "" : ", ") + label;
        rest /= leading[d];
      }
      text += "[" + label + "]";
      for (std::uint64_t j = 0; j < width; ++j) text += " " + format_float(values[v * width + j]);
      text += "\n";
    }
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace embedrt::cli
