#include "grpc_protocol.hpp"

#include <cstring>
#include <string>

namespace embedrt::serve {
namespace {

Error bad(const std::string& message) { return Error(ErrorCode::kInvalidArgument, message); }

constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 32;

// A shape's element count, or nullopt past 2^32 elements or for a negative dimension (a shape
// from the wire is untrusted: the product is checked before anything is sized by it).
std::optional<std::uint64_t> element_count(const google::protobuf::RepeatedField<std::int64_t>& shape) {
  std::uint64_t count = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count) || count > kMaxElements) return std::nullopt;
  }
  return count;
}

// The typed contents field a tensor filled, by name, for messages about a mismatch.
const char* filled_contents(const inference::InferTensorContents& c) {
  if (c.bool_contents_size()) return "bool_contents";
  if (c.int_contents_size()) return "int_contents";
  if (c.int64_contents_size()) return "int64_contents";
  if (c.uint_contents_size()) return "uint_contents";
  if (c.uint64_contents_size()) return "uint64_contents";
  if (c.fp32_contents_size()) return "fp32_contents";
  if (c.fp64_contents_size()) return "fp64_contents";
  if (c.bytes_contents_size()) return "bytes_contents";
  return nullptr;
}

Result<InputTensor> read_tensor(const inference::ModelInferRequest& request, int index) {
  const auto& input = request.inputs(index);
  const std::string where = "inputs[" + std::to_string(index) + "] '" + input.name() + "'";
  const std::string& datatype = input.datatype();
  if (datatype != "INT64" && datatype != "INT32" && datatype != "FP32") {
    return bad(where + ": datatype " + datatype + " is not INT32, INT64 or FP32");
  }
  const bool floats = datatype == "FP32";
  const auto count = element_count(input.shape());
  if (!count) return bad(where + ": shape holds a negative value or more than 2^32 elements");
  InputTensor t;
  t.name = input.name();
  t.shape.assign(input.shape().begin(), input.shape().end());
  const std::size_t element = datatype == "INT64" ? 8 : 4;
  if (request.raw_input_contents_size() > 0) {
    if (filled_contents(input.contents()) != nullptr) {
      return bad(where + ": has contents although the request carries raw_input_contents (use one or the other)");
    }
    const std::string& raw = request.raw_input_contents(index);
    if (raw.size() != *count * element) {
      return bad(where + ": raw_input_contents[" + std::to_string(index) + "] holds " + std::to_string(raw.size()) +
                 " bytes; shape and datatype need " + std::to_string(*count * element));
    }
    if (floats) {
      t.is_float = true;
      t.floats.resize(*count);
      if (*count) std::memcpy(t.floats.data(), raw.data(), 4 * *count);
      return t;
    }
    t.data.resize(*count);
    for (std::uint64_t i = 0; i < *count; ++i) {
      if (element == 8) {
        std::memcpy(&t.data[i], raw.data() + 8 * i, 8);  // little-endian on the wire and here (x86-64)
      } else {
        std::int32_t v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        t.data[i] = v;
      }
    }
    return t;
  }
  const auto& c = input.contents();
  const char* expected = floats ? "fp32_contents" : element == 8 ? "int64_contents" : "int_contents";
  const char* filled = filled_contents(c);
  if (filled != nullptr && std::strcmp(filled, expected) != 0) {
    return bad(where + ": data of datatype " + datatype + " belongs in contents." + expected + ", not " + filled);
  }
  const std::uint64_t got = floats         ? static_cast<std::uint64_t>(c.fp32_contents_size())
                           : element == 8 ? static_cast<std::uint64_t>(c.int64_contents_size())
                                          : static_cast<std::uint64_t>(c.int_contents_size());
  if (got != *count) {
    return bad(where + ": shape holds " + std::to_string(*count) + " values but contents." + expected + " has " +
               std::to_string(got));
  }
  if (floats) {
    t.is_float = true;
    t.floats.assign(c.fp32_contents().begin(), c.fp32_contents().end());
  } else if (element == 8) {
    t.data.assign(c.int64_contents().begin(), c.int64_contents().end());
  } else {
    t.data.assign(c.int_contents().begin(), c.int_contents().end());
  }
  return t;
}

}  // namespace

std::uint64_t decoded_bytes(const inference::ModelInferRequest& request) noexcept {
  std::uint64_t total = 0;
  for (const auto& input : request.inputs()) {
    const auto count = element_count(input.shape());
    // A refused shape allocates nothing: decoding stops at it.
    if (count && __builtin_add_overflow(total, 8 * *count, &total)) return UINT64_MAX;
  }
  return total;
}

Result<InferInputs> decode_infer_request(const inference::ModelInferRequest& request) {
  if (request.raw_input_contents_size() > 0 && request.raw_input_contents_size() != request.inputs_size()) {
    return bad("raw_input_contents has " + std::to_string(request.raw_input_contents_size()) + " entries for " +
               std::to_string(request.inputs_size()) + " inputs (one per input, in order)");
  }
  std::vector<InputTensor> tensors;
  tensors.reserve(static_cast<std::size_t>(request.inputs_size()));
  for (int i = 0; i < request.inputs_size(); ++i) {
    auto t = read_tensor(request, i);
    if (!t) return std::move(t).error();
    tensors.push_back(std::move(*t));
  }
  auto inputs = assemble_inputs(std::move(tensors));
  if (!inputs) return std::move(inputs).error();
  inputs->id = request.id();
  for (const auto& output : request.outputs()) inputs->outputs.push_back(output.name());
  // Pooling parameters (bags): the shared path checks their values.
  for (const auto& [name, p] : request.parameters()) {
    ParameterValue value = std::string("?");
    if (p.has_bool_param()) value = p.bool_param();
    if (p.has_int64_param()) value = p.int64_param();
    if (p.has_string_param()) value = p.string_param();
    if (Status s = apply_parameter(*inputs, name, value); !s) return std::move(s).error();
  }
  return inputs;
}

void describe_outputs(std::span<const OutputTensor> outputs, inference::ModelInferResponse& response) {
  for (const OutputTensor& out : outputs) {
    auto* tensor = response.add_outputs();
    tensor->set_name(out.name);
    tensor->set_datatype(wire_datatype(out.dtype));
    for (const std::uint64_t d : out.shape) tensor->add_shape(static_cast<std::int64_t>(d));
  }
}

void to_proto(const ModelDescription& model, inference::ModelMetadataResponse& response) {
  response.set_name(model.name);
  response.add_versions(model.version);
  response.set_platform(model.platform);
  const auto add = [](const TensorDescription& t, inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(t.name);
    out->set_datatype(t.datatype);
    for (const std::int64_t d : t.shape) out->add_shape(d);
  };
  for (const TensorDescription& t : model.inputs) add(t, response.add_inputs());
  for (const TensorDescription& t : model.outputs) add(t, response.add_outputs());
}

void to_proto(const ServerDescription& server, inference::ServerMetadataResponse& response) {
  response.set_name(server.name);
  response.set_version(server.version);
  for (const std::string& e : server.extensions) response.add_extensions(e);
}

}  // namespace embedrt::serve
