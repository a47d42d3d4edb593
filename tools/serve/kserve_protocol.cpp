#include "kserve_protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "embedrt/half.hpp"
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

// The same for the numbers of an FP32 tensor (bag_weights).
Status flatten_floats(const json& data, std::vector<float>& out, const std::string& where, int depth = 0) {
  if (depth > 8) return bad(where + ": data nests deeper than 8 levels");
  if (data.is_array()) {
    for (const json& item : data) {
      if (Status s = flatten_floats(item, out, where, depth + 1); !s) return s;
    }
    return {};
  }
  if (data.is_number()) {
    out.push_back(data.get<float>());
    return {};
  }
  return bad(where + ": data holds " + std::string(data.type_name()) + " values, expected numbers");
}

struct Tensor {
  std::string name, datatype;
  std::vector<std::int64_t> shape, data;
  std::vector<float> floats;  // FP32 tensors
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
  if (t.datatype != "INT64" && t.datatype != "INT32" && t.datatype != "FP32") {
    return bad(where + ": datatype " + t.datatype + " is not INT32, INT64 or FP32");
  }
  const bool floats = t.datatype == "FP32";
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
    if (floats) {
      t.floats.resize(count);
      if (count) std::memcpy(t.floats.data(), binary.data() + binary_offset, 4 * count);
    } else {
      t.data.resize(count);
    }
    for (std::uint64_t i = 0; i < count && !floats; ++i) {
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
    if (Status s = floats ? flatten_floats(input["data"], t.floats, where) : flatten(input["data"], t.data, where); !s) {
      return std::move(s).error();
    }
    const std::size_t got = floats ? t.floats.size() : t.data.size();
    if (got != count) {
      return bad(where + ": shape holds " + std::to_string(count) + " values but data has " + std::to_string(got));
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

Result<InferRequest> parse_infer_request(std::string_view body, std::optional<std::uint64_t> header_length) {
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
  InferRequest request;
  InferInputs& r = request.inputs;
  if (doc.contains("id") && doc["id"].is_string()) r.id = doc["id"].get<std::string>();
  std::size_t binary_offset = 0;
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
  std::vector<InputTensor> named;
  named.reserve(tensors.size());
  for (Tensor& t : tensors) {
    const bool is_float = t.datatype == "FP32";
    named.push_back({std::move(t.name), std::move(t.shape), std::move(t.data), std::move(t.floats), is_float});
  }
  auto assembled = assemble_inputs(std::move(named));
  if (!assembled) return std::move(assembled).error();
  std::string id = std::move(r.id);
  r = std::move(*assembled);
  r.id = std::move(id);
  // Binary output when any requested output asks for it (Triton's extension) or the request does.
  const auto wants_binary = [](const json& parameters) {
    return parameters.is_object() && parameters.contains("binary_data") && parameters["binary_data"].is_boolean() &&
           parameters["binary_data"].get<bool>();
  };
  if (doc.contains("parameters")) {
    const json& p = doc["parameters"];
    if (p.is_object() && p.contains("binary_data_output") && p["binary_data_output"].is_boolean()) {
      request.binary_output = p["binary_data_output"].get<bool>();
    }
    // Pooling parameters (bags): the shared path checks their values.
    for (const char* name : {"pooling", "normalize", "padding_id"}) {
      if (!p.is_object() || !p.contains(name)) continue;
      const json& v = p[name];
      ParameterValue value = v.is_boolean() ? ParameterValue(v.get<bool>())
                             : v.is_number_integer() ? ParameterValue(v.get<std::int64_t>())
                             : v.is_string() ? ParameterValue(v.get<std::string>()) : ParameterValue(std::string("?"));
      if (Status s = apply_parameter(r, name, value); !s) return std::move(s).error();
    }
  }
  if (doc.contains("outputs") && doc["outputs"].is_array()) {
    for (std::size_t i = 0; i < doc["outputs"].size(); ++i) {
      const json& o = doc["outputs"][i];
      if (o.is_object() && o.contains("name")) {
        if (!o["name"].is_string()) return bad("outputs[" + std::to_string(i) + "]: \"name\" must be a string");
        r.outputs.push_back(o["name"].get<std::string>());
      }
      if (o.is_object() && o.contains("parameters") && wants_binary(o["parameters"])) request.binary_output = true;
    }
  }
  return request;
}

Result<InferResponse> make_infer_response(const std::string& model, const std::string& id,
                                          std::span<const OutputTensor> outputs, bool binary) {
  std::string body = R"({"model_name":)" + json(model).dump() + R"(,"model_version":"1")";
  if (!id.empty()) body += R"(,"id":)" + json(id).dump();
  body += R"(,"outputs":[)";
  std::size_t reserve = 0;
  for (const OutputTensor& out : outputs) reserve += binary ? out.data.size() : out.data.size() / 2 * 12;
  body.reserve(body.size() + reserve + 256 * outputs.size());
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const OutputTensor& out = outputs[k];
    if (k) body += ',';
    body += R"({"name":)" + json(out.name).dump() + R"(,"datatype":")" + wire_datatype(out.dtype) + R"(","shape":[)";
    for (std::size_t d = 0; d < out.shape.size(); ++d) body += (d ? "," : "") + std::to_string(out.shape[d]);
    body += "]";
    if (binary) {
      body += R"(,"parameters":{"binary_data_size":)" + std::to_string(out.data.size()) + "}}";
      continue;
    }
    // JSON: each element as the float it decodes to (16-bit values are exact in float32).
    const std::size_t element = out.dtype == OutputDType::kF32 ? 4 : 2;
    const std::size_t count = out.data.size() / element;
    const std::uint64_t row = out.shape.empty() ? 1 : std::max<std::uint64_t>(1, out.shape.back());
    body += R"(,"data":[)";
    for (std::size_t i = 0; i < count; ++i) {
      if (i) body += ',';
      float value;
      if (element == 4) {
        std::memcpy(&value, out.data.data() + 4 * i, 4);
      } else {
        std::uint16_t bits;
        std::memcpy(&bits, out.data.data() + 2 * i, 2);
        value = out.dtype == OutputDType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
      }
      if (!std::isfinite(value)) {
        // JSON has no NaN or Infinity; writing them would hand the client a body it cannot parse.
        return Error(ErrorCode::kUnsupported,
                     out.name + " value " + std::to_string(i % row) + " of token " + std::to_string(i / row) + " is " +
                         (std::isnan(value) ? "NaN" : "infinite") +
                         ", which JSON cannot carry; ask for binary output (parameters.binary_data_output)");
      }
      text::append_float(body, value);
    }
    body += "]}";
  }
  body += "]}";
  InferResponse response;
  if (binary) {
    response.header_length = body.size();
    for (const OutputTensor& out : outputs) body.append(reinterpret_cast<const char*>(out.data.data()), out.data.size());
  }
  response.body = std::move(body);
  return response;
}

std::string model_metadata_json(const ModelDescription& model) {
  const auto tensors = [](const std::vector<TensorDescription>& list) {
    json array = json::array();
    for (const TensorDescription& t : list) {
      json item = {{"name", t.name}, {"datatype", t.datatype}, {"shape", t.shape}};
      if (t.optional) item["optional"] = true;
      array.push_back(std::move(item));
    }
    return array;
  };
  const json doc = {{"name", model.name}, {"versions", {model.version}}, {"platform", model.platform},
                    {"inputs", tensors(model.inputs)}, {"outputs", tensors(model.outputs)}};
  return doc.dump();
}

std::string server_metadata_json(const ServerDescription& server) {
  const json doc = {{"name", server.name}, {"version", server.version}, {"extensions", server.extensions}};
  return doc.dump();
}

std::string error_json(const std::string& message) { return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace embedrt::serve
