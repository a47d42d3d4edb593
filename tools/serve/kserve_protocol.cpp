#include "kserve_protocol.hpp"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "embedrt/half.hpp"
#include "embedrt/version.hpp"
#include "float_text.hpp"

namespace embedrt::serve {
namespace {

using nlohmann::json;

Error bad(const std::string& message) { return Error(ErrorCode::kInvalidArgument, message); }

// A request is an object holding "inputs", an array of tensor objects whose "data" may nest
// one level per dimension (KServe allows nested arrays); 16 leaves room and no more.
constexpr int kMaxJsonDepth = 16;

// Appends the integers of `data` (flat or nested arrays, as KServe allows) to `out`.
Status flatten(const json& data, std::vector<std::int64_t>& out, const std::string& where, int depth = 0) {
  if (depth > 8) return bad(where + ": data nests deeper than 8 levels");
  if (data.is_array()) {
    for (const json& item : data) {
      if (Status s = flatten(item, out, where, depth + 1); !s) return s;
    }
    return {};
  }
  if (data.is_number_integer()) {
    out.push_back(data.is_number_unsigned() && data.get<std::uint64_t>() > INT64_MAX ? INT64_MAX : data.get<std::int64_t>());
    return {};
  }
  return bad(where + ": data holds " + std::string(data.type_name()) + " values, expected integers");
}

struct Tensor {
  std::string name, datatype;
  std::vector<std::int64_t> shape, data;
};

// One input tensor, from JSON `data` or from the binary section at `binary_offset`.
Result<Tensor> read_tensor(const json& input, std::size_t index, std::string_view binary, std::size_t& binary_offset) {
  std::string where = "inputs[" + std::to_string(index) + "]";
  if (!input.is_object() || !input.contains("name") || !input["name"].is_string()) return bad(where + ": needs a \"name\" string");
  Tensor t;
  t.name = input["name"].get<std::string>();
  where += " '" + t.name + "'";
  if (!input.contains("datatype") || !input["datatype"].is_string()) return bad(where + ": needs a \"datatype\" string");
  t.datatype = input["datatype"].get<std::string>();
  if (t.datatype != "INT64" && t.datatype != "INT32") return bad(where + ": datatype " + t.datatype + " is not INT32 or INT64");
  if (!input.contains("shape") || !input["shape"].is_array()) return bad(where + ": needs a \"shape\" array");
  std::uint64_t count = 1;
  for (const json& d : input["shape"]) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return bad(where + ": shape holds a value that is not a non-negative integer");
    const auto size = static_cast<std::uint64_t>(d.get<std::int64_t>());
    if (__builtin_mul_overflow(count, size, &count) || count > (std::uint64_t{1} << 32)) return bad(where + ": shape is too large");
    t.shape.push_back(static_cast<std::int64_t>(size));
  }
  const json* parameters = input.contains("parameters") ? &input["parameters"] : nullptr;
  if (parameters != nullptr && parameters->is_object() && parameters->contains("binary_data_size")) {
    const json& size_json = (*parameters)["binary_data_size"];
    const std::uint64_t element = t.datatype == "INT64" ? 8 : 4;
    if (!size_json.is_number_unsigned() || size_json.get<std::uint64_t>() != count * element) {
      return bad(where + ": binary_data_size must be " + std::to_string(count * element) + " bytes for shape and datatype");
    }
    const std::uint64_t size = size_json.get<std::uint64_t>();
    if (size > binary.size() - binary_offset) return bad(where + ": binary data runs past the end of the body");
    t.data.resize(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      if (element == 8) {
        std::memcpy(&t.data[i], binary.data() + binary_offset + 8 * i, 8);
      } else {
        std::int32_t v;
        std::memcpy(&v, binary.data() + binary_offset + 4 * i, 4);
        t.data[i] = v;
      }
    }
    binary_offset += size;
  } else {
    if (!input.contains("data")) return bad(where + ": needs \"data\" (or parameters.binary_data_size)");
    if (Status s = flatten(input["data"], t.data, where); !s) return std::move(s).error();
    if (t.data.size() != count) {
      return bad(where + ": shape holds " + std::to_string(count) + " values but data has " + std::to_string(t.data.size()));
    }
    if (t.datatype == "INT32") {
      for (std::int64_t v : t.data) {
        if (v < INT32_MIN || v > INT32_MAX) return bad(where + ": value " + std::to_string(v) + " does not fit INT32");
      }
    }
  }
  return t;
}

// nlohmann's messages start with "[json.exception.parse_error.101] parse error at ...": the
// client needs the part after the library's internal tag.
std::string without_library_tag(const std::string& what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const std::size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

// A SAX pass that builds nothing: syntax, depth and the number of values, so the tree's memory
// can be reserved before it is built (and a hostile nesting is refused without building it).
class JsonScan final : public nlohmann::json_sax<json> {
 public:
  std::uint64_t values = 0;
  std::string error;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = without_library_tag(e.what());
    return false;
  }

 private:
  bool value() {
    ++values;
    return true;
  }
  bool open() {
    ++values;
    if (++depth_ > kMaxJsonDepth) {
      error = "JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels";
      return false;
    }
    return true;
  }
  bool close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
};

}  // namespace

Result<std::uint64_t> scan_json(std::string_view text) {
  JsonScan scan;
  const bool ok = json::sax_parse(text, &scan);
  if (!ok || !scan.error.empty()) {
    return bad("body is not valid JSON: " + (scan.error.empty() ? std::string("parse error") : scan.error));
  }
  return scan.values;
}

Result<InferRequest> parse_infer_request(std::string_view body, std::optional<std::uint64_t> header_length,
                                         std::uint64_t max_tokens) {
  std::string_view header_text = body, binary;
  if (header_length) {
    if (*header_length > body.size()) {
      return bad("Inference-Header-Content-Length " + std::to_string(*header_length) + " is longer than the body (" +
                 std::to_string(body.size()) + " bytes)");
    }
    header_text = body.substr(0, *header_length);
    binary = body.substr(*header_length);
  }
  json doc;
  try {
    // Depth is bounded while parsing, before a deep document can build its tree: a body of
    // nothing but '[' would otherwise cost ~80 bytes of tree per byte.
    const json::parser_callback_t bounded = [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) throw std::length_error("JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      return true;
    };
    doc = json::parse(header_text, bounded);
  } catch (const std::exception& e) {
    return bad("body is not valid JSON: " + without_library_tag(e.what()));
  }
  if (!doc.is_object() || !doc.contains("inputs") || !doc["inputs"].is_array()) return bad("body needs an \"inputs\" array");
  InferRequest r;
  if (doc.contains("id") && doc["id"].is_string()) r.id = doc["id"].get<std::string>();
  std::size_t binary_offset = 0;
  const Tensor* ids = nullptr;
  std::vector<Tensor> tensors;
  tensors.reserve(doc["inputs"].size());
  for (std::size_t i = 0; i < doc["inputs"].size(); ++i) {
    auto t = read_tensor(doc["inputs"][i], i, binary, binary_offset);
    if (!t) return std::move(t).error();
    tensors.push_back(std::move(*t));
  }
  if (binary_offset != binary.size()) {
    return bad(std::to_string(binary.size() - binary_offset) + " bytes of binary data are not claimed by any input");
  }
  for (const Tensor& t : tensors) {
    if (t.name == "input_ids") ids = &t;
  }
  if (ids == nullptr) return bad("inputs: no \"input_ids\" tensor");
  if (ids->shape.size() != 2) return bad("inputs 'input_ids': shape must be [batch, length]");
  r.batch = static_cast<std::uint64_t>(ids->shape[0]);
  r.length = static_cast<std::uint64_t>(ids->shape[1]);
  if (r.batch * r.length > max_tokens) {
    return bad("inputs 'input_ids': " + std::to_string(r.batch * r.length) + " tokens exceed --max-batch-tokens " +
               std::to_string(max_tokens));
  }
  r.ids = ids->data;
  for (const Tensor& t : tensors) {
    if (&t == ids) continue;
    if (t.name == "position_start") {
      if (t.shape.size() != 1 || static_cast<std::uint64_t>(t.shape[0]) != r.batch) {
        return bad("inputs 'position_start': shape must be [" + std::to_string(r.batch) + "], one start per sequence");
      }
      for (std::int64_t v : t.data) {
        if (v < 0) return bad("inputs 'position_start': negative start " + std::to_string(v));
        r.starts.push_back(static_cast<std::uint64_t>(v));
      }
    } else if (t.name == "token_type_ids") {
      if (t.shape != ids->shape) return bad("inputs 'token_type_ids': shape must equal input_ids' shape");
      r.segments = t.data;
    } else {
      return bad("inputs '" + t.name + "': unknown input (expected input_ids, position_start, token_type_ids)");
    }
  }
  // Binary output when any requested output asks for it (Triton's extension) or the request does.
  const auto wants_binary = [](const json& parameters) {
    return parameters.is_object() && parameters.contains("binary_data") && parameters["binary_data"].is_boolean() &&
           parameters["binary_data"].get<bool>();
  };
  if (doc.contains("parameters")) {
    const json& p = doc["parameters"];
    if (p.is_object() && p.contains("binary_data_output") && p["binary_data_output"].is_boolean()) {
      r.binary_output = p["binary_data_output"].get<bool>();
    }
  }
  if (doc.contains("outputs") && doc["outputs"].is_array()) {
    for (const json& o : doc["outputs"]) {
      if (o.is_object() && o.contains("name") && o["name"] != "embeddings") {
        return bad("outputs: unknown output " + o["name"].dump() + " (the model has \"embeddings\")");
      }
      if (o.is_object() && o.contains("parameters") && wants_binary(o["parameters"])) r.binary_output = true;
    }
  }
  return r;
}

namespace {

const char* wire_datatype(OutputDType dtype) {
  switch (dtype) {
    case OutputDType::kBF16: return "BF16";
    case OutputDType::kF16: return "FP16";
    case OutputDType::kF32: break;
  }
  return "FP32";
}

}  // namespace

Result<InferResponse> make_infer_response(const std::string& model, const InferRequest& request, std::uint64_t dim,
                                          OutputDType dtype, std::span<const std::byte> embeddings) {
  std::string head = R"({"model_name":)" + json(model).dump() + R"(,"model_version":"1")";
  if (!request.id.empty()) head += R"(,"id":)" + json(request.id).dump();
  head += R"(,"outputs":[{"name":"embeddings","datatype":")" + std::string(wire_datatype(dtype)) + R"(","shape":[)" +
          std::to_string(request.batch) + "," + std::to_string(request.length) + "," + std::to_string(dim) + "]";
  InferResponse response;
  if (request.binary_output) {
    head += R"(,"parameters":{"binary_data_size":)" + std::to_string(embeddings.size()) + "}}]}";
    response.header_length = head.size();
    response.body = std::move(head);
    response.body.append(reinterpret_cast<const char*>(embeddings.data()), embeddings.size());
    return response;
  }
  // JSON: each element as the float it decodes to (16-bit values are exact in float32).
  const std::size_t element = dtype == OutputDType::kF32 ? 4 : 2;
  const std::size_t count = embeddings.size() / element;
  std::string body = std::move(head);
  body.reserve(body.size() + count * 12 + 16);
  body += R"(,"data":[)";
  for (std::size_t i = 0; i < count; ++i) {
    if (i) body += ',';
    float value;
    if (element == 4) {
      std::memcpy(&value, embeddings.data() + 4 * i, 4);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, embeddings.data() + 2 * i, 2);
      value = dtype == OutputDType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
    if (!std::isfinite(value)) {
      // JSON has no NaN or Infinity; writing them would hand the client a body it cannot parse.
      return Error(ErrorCode::kUnsupported,
                   "embedding value " + std::to_string(i % dim) + " of token " + std::to_string(i / dim) + " is " +
                       (std::isnan(value) ? "NaN" : "infinite") +
                       ", which JSON cannot carry; ask for binary output (parameters.binary_data_output)");
    }
    text::append_float(body, value);
  }
  body += "]}]}";
  response.body = std::move(body);
  return response;
}

std::string model_metadata_json(const std::string& model, std::uint64_t dim, bool has_segments, OutputDType dtype) {
  json inputs = json::array({
      {{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", {-1, -1}}},
      {{"name", "position_start"}, {"datatype", "INT64"}, {"shape", {-1}}, {"optional", true}},
  });
  if (has_segments) inputs.push_back({{"name", "token_type_ids"}, {"datatype", "INT64"}, {"shape", {-1, -1}}, {"optional", true}});
  const json doc = {{"name", model}, {"versions", {"1"}}, {"platform", "embedrt"},
                    {"inputs", inputs},
                    {"outputs", json::array({{{"name", "embeddings"}, {"datatype", wire_datatype(dtype)},
                                              {"shape", {-1, -1, static_cast<std::int64_t>(dim)}}}})}};
  return doc.dump();
}

std::string server_metadata_json() {
  const json doc = {{"name", "embedrt"}, {"version", version()}, {"extensions", json::array({"binary_tensor_data"})}};
  return doc.dump();
}

std::string_view protocol_input(const Error& error) noexcept {
  const std::string& field = error.context().field;
  if (field == "segment_ids") return "token_type_ids";
  if (field == "start" || field == "start_positions" || field == "position_ids") return "position_start";
  return "input_ids";
}

std::string error_json(const std::string& message) { return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace embedrt::serve
