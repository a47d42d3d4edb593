#include "inference.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>

#include "embedrt/version.hpp"

namespace embedrt::serve {
namespace {

InferError refuse(Refusal kind, std::string message) { return InferError{kind, std::move(message)}; }

}  // namespace

Result<InferInputs> assemble_inputs(std::vector<InputTensor> tensors) {
  const auto bad = [](const std::string& message) { return Error(ErrorCode::kInvalidArgument, message); };
  InferInputs r;
  InputTensor* ids = nullptr;
  InputTensor* offsets = nullptr;
  std::set<std::string_view> names;
  for (InputTensor& t : tensors) {
    // A second tensor of a name would be read on top of the first (two position_start tensors
    // gave two starts per sequence): refused, as a duplicate output is.
    if (!names.insert(t.name).second) return bad("inputs '" + t.name + "': given twice");
    if (t.name == "input_ids") ids = &t;
    if (t.name == "bag_offsets") offsets = &t;
  }
  if (ids == nullptr) return bad("inputs: no \"input_ids\" tensor");
  for (InputTensor& t : tensors) {
    if (t.is_float && t.name != "bag_weights") {
      return bad("inputs '" + t.name + "': datatype FP32 is not INT32 or INT64");
    }
    if (!t.is_float && t.name == "bag_weights") return bad("inputs 'bag_weights': datatype must be FP32");
  }
  if (offsets != nullptr) {
    // Bags: the ids are one run (any shape, row-major), cut at the offsets.
    std::uint64_t n = 1;
    for (std::int64_t d : ids->shape) n *= static_cast<std::uint64_t>(d);
    r.batch = 1;
    r.length = n;
    if (offsets->shape.size() != 1 || offsets->shape[0] < 1) {
      return bad("inputs 'bag_offsets': shape must be [bags + 1], the boundaries of each bag in input_ids");
    }
    for (std::int64_t v : offsets->data) {
      if (v < 0) return bad("inputs 'bag_offsets': negative offset " + std::to_string(v));
      r.bag_offsets.push_back(static_cast<std::uint64_t>(v));
    }
  } else {
    if (ids->shape.size() != 2) return bad("inputs 'input_ids': shape must be [batch, length] (or give bag_offsets)");
    r.batch = static_cast<std::uint64_t>(ids->shape[0]);
    r.length = static_cast<std::uint64_t>(ids->shape[1]);
  }
  for (InputTensor& t : tensors) {
    if (&t == ids || &t == offsets) continue;
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
      r.segments = std::move(t.data);
    } else if (t.name == "bag_weights") {
      if (t.shape != ids->shape) return bad("inputs 'bag_weights': shape must equal input_ids' shape (a weight per id)");
      r.bag_weights = std::move(t.floats);
    } else {
      return bad("inputs '" + t.name +
                 "': unknown input (expected input_ids, position_start, token_type_ids, bag_offsets, bag_weights)");
    }
  }
  r.ids = std::move(ids->data);
  return r;
}

Status apply_parameter(InferInputs& inputs, const std::string& name, const ParameterValue& value) {
  const auto bad = [&name](const std::string& expected) {
    return Error(ErrorCode::kInvalidArgument, "parameters '" + name + "': expected " + expected);
  };
  if (name == "pooling") {
    const auto* text = std::get_if<std::string>(&value);
    const auto mode = text ? parse_pooling_mode(*text) : std::nullopt;
    if (!mode || *mode == PoolingMode::kNone) return bad("\"sum\", \"mean\" or \"max\"");
    inputs.pooling = *mode;
  } else if (name == "normalize") {
    const auto* flag = std::get_if<bool>(&value);
    if (flag == nullptr) return bad("true or false");
    inputs.normalize = *flag;
  } else if (name == "padding_id") {
    const auto* id = std::get_if<std::int64_t>(&value);
    if (id == nullptr) return bad("an integer token id");
    inputs.padding_id = *id;
  }
  return {};
}

int http_status(Refusal kind) noexcept {
  switch (kind) {
    case Refusal::kInvalidArgument: return 400;
    case Refusal::kNotFound: return 404;
    case Refusal::kBusy:
    case Refusal::kUnavailable: return 503;
    case Refusal::kTooLarge: return 413;
    case Refusal::kInternal: break;
  }
  return 500;
}

const char* wire_datatype(OutputDType dtype) noexcept {
  switch (dtype) {
    case OutputDType::kBF16: return "BF16";
    case OutputDType::kF16: return "FP16";
    case OutputDType::kF32: break;
  }
  return "FP32";
}

std::string_view protocol_input(const Error& error) noexcept {
  const std::string& field = error.context().field;
  if (field == "segment_ids") return "token_type_ids";
  if (field == "offsets") return "bag_offsets";
  if (field == "weights") return "bag_weights";
  if (field == "mode") return "parameters 'pooling'";
  if (field == "output") return "outputs";
  if (field == "start" || field == "start_positions" || field == "position_ids") return "position_start";
  return "input_ids";
}

ModelDescription describe_model(const ServedModel& served) {
  const Model& m = served.embedder.model();
  ModelDescription d;
  d.name = served.name;
  d.inputs.push_back({"input_ids", "INT64", {-1, -1}, false});
  d.inputs.push_back({"position_start", "INT64", {-1}, true});
  if (m.segment() != nullptr) d.inputs.push_back({"token_type_ids", "INT64", {-1, -1}, true});
  // Bags, when some output can pool (a token table alone: no positions, segments or LayerNorm).
  const auto poolable = [](const OutputInfo& o) { return !o.position && !o.segment && !o.norm_weight; };
  if (std::any_of(m.outputs().begin(), m.outputs().end(), poolable)) {
    d.inputs.push_back({"bag_offsets", "INT64", {-1}, true});
    d.inputs.push_back({"bag_weights", "FP32", {-1}, true});
  }
  for (std::size_t k = 0; k < m.outputs().size(); ++k) {
    const OutputInfo& o = m.outputs()[k];
    // A pooled output gives one vector per bag, a per-token one one per token.
    std::vector<std::int64_t> shape = {-1};
    if (o.rules->pooling == PoolingMode::kNone) shape.push_back(-1);
    for (std::uint64_t n : o.token_shape) shape.push_back(static_cast<std::int64_t>(n));
    d.outputs.push_back({o.name, wire_datatype(natural_output_dtype(m, k)), std::move(shape), false});
  }
  return d;
}

ServerDescription describe_server() { return {"embedrt", std::string(version()), {"binary_tensor_data"}}; }

Inference::Lookup Inference::find(std::string_view name, std::optional<std::string_view> version) const {
  auto model = slot_.get();
  if (!model || name != model->name) {
    return {nullptr, refuse(Refusal::kNotFound, "model '" + std::string(name) + "' is not served here" +
                                                    (model ? " (serving '" + model->name + "')" : std::string()))};
  }
  if (version && *version != "1") {
    return {nullptr, refuse(Refusal::kNotFound, "model '" + std::string(name) + "' has no version '" +
                                                    std::string(*version) + "' (it has version 1)")};
  }
  return {std::move(model), std::nullopt};
}

std::optional<InferError> Inference::check_ready(const ServedModel& model) const {
  if (!model.damaged.load()) return std::nullopt;
  return refuse(Refusal::kUnavailable, "the model file " + model.path +
                                           " was rewritten in place; the model is not ready until the file is valid "
                                           "again and reloaded");
}

std::optional<InferError> Inference::check_tokens(std::uint64_t batch, std::uint64_t length) const {
  std::uint64_t tokens = 0;
  if (__builtin_mul_overflow(batch, length, &tokens)) {
    return refuse(Refusal::kInvalidArgument, "inputs 'input_ids': shape [" + std::to_string(batch) + ", " +
                                                 std::to_string(length) + "] holds more tokens than 2^64");
  }
  if (tokens > max_batch_tokens_) {
    return refuse(Refusal::kInvalidArgument, "inputs 'input_ids': " + std::to_string(tokens) +
                                                 " tokens exceed --max-batch-tokens " + std::to_string(max_batch_tokens_));
  }
  return std::nullopt;
}

InferError Inference::busy(std::uint64_t wanted) const {
  return refuse(Refusal::kBusy, "the server is at its in-flight memory budget (" + std::to_string(budget_.in_use()) +
                                    " of " + std::to_string(budget_.limit()) +
                                    " bytes, --max-inflight-bytes); this request needs " + std::to_string(wanted) +
                                    " more; retry later");
}

namespace {

// The bags of a pooled request: the ids and boundaries given, or each row of input_ids [B, L]
// (without its padding_id tokens, when that parameter is given), with their weights.
struct Bags {
  std::vector<std::int64_t> ids;
  std::vector<std::uint64_t> offsets;
  std::vector<float> weights;
};

Bags bags_of(const InferInputs& in) {
  Bags b;
  if (!in.bag_offsets.empty()) {
    b.ids = in.ids;
    b.offsets = in.bag_offsets;
    b.weights = in.bag_weights;
    return b;
  }
  b.offsets.push_back(0);
  for (std::uint64_t row = 0; row < in.batch; ++row) {
    for (std::uint64_t t = 0; t < in.length; ++t) {
      const std::uint64_t i = row * in.length + t;
      if (in.padding_id && in.ids[i] == *in.padding_id) continue;
      b.ids.push_back(in.ids[i]);
      if (!in.bag_weights.empty()) b.weights.push_back(in.bag_weights[i]);
    }
    b.offsets.push_back(b.ids.size());
  }
  return b;
}

// What one output of the request will be.
struct PlannedOutput {
  std::size_t index;
  bool pooled;
  OutputDType dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t count = 0;  // values
};

}  // namespace

InferOutcome Inference::run(const ServedModel& model, const InferInputs& inputs, ResponseEncoding encoding,
                            const OutputAllocator& allocate) const {
  InferOutcome outcome;
  const auto fail = [&outcome](InferError error) {
    outcome.error = std::move(error);
    return std::move(outcome);
  };
  if (auto not_ready = check_ready(model)) return fail(std::move(*not_ready));
  if (auto too_many = check_tokens(inputs.batch, inputs.length)) return fail(std::move(*too_many));
  if (inputs.ids.size() != inputs.batch * inputs.length) {
    return fail(refuse(Refusal::kInvalidArgument, "inputs 'input_ids': shape holds " +
                                                      std::to_string(inputs.batch * inputs.length) +
                                                      " values but data has " + std::to_string(inputs.ids.size())));
  }
  if (!inputs.bag_weights.empty() && inputs.bag_weights.size() != inputs.ids.size()) {
    return fail(refuse(Refusal::kInvalidArgument, "inputs 'bag_weights': " + std::to_string(inputs.bag_weights.size()) +
                                                      " weights for " + std::to_string(inputs.ids.size()) + " ids"));
  }
  const Model& m = model.embedder.model();
  const auto outputs = m.outputs();

  // The outputs asked for, each once (all of them by default), and whether each is pooled.
  std::vector<std::size_t> wanted;
  for (const std::string& name : inputs.outputs) {
    const OutputInfo* o = m.find_output(name);
    if (o == nullptr) {
      std::string names;
      for (const OutputInfo& each : outputs) names += std::string(names.empty() ? "" : ", ") + "\"" + each.name + "\"";
      return fail(refuse(Refusal::kInvalidArgument, "outputs: unknown output \"" + name + "\" (the model has " + names + ")"));
    }
    const auto index = static_cast<std::size_t>(o - outputs.data());
    if (std::find(wanted.begin(), wanted.end(), index) != wanted.end()) {
      return fail(refuse(Refusal::kInvalidArgument, "outputs: \"" + name + "\" is asked for twice"));
    }
    wanted.push_back(index);
  }
  if (wanted.empty()) {
    for (std::size_t k = 0; k < outputs.size(); ++k) wanted.push_back(k);
  }
  const bool bag_request = !inputs.bag_offsets.empty() || inputs.pooling.has_value();
  std::vector<PlannedOutput> plan;
  std::uint64_t output_bytes = 0, values = 0;
  std::optional<Bags> bags;
  for (std::size_t index : wanted) {
    const OutputInfo& o = outputs[index];
    PlannedOutput p{index, bag_request || o.rules->pooling != PoolingMode::kNone, natural_output_dtype(m, index), {}};
    if (p.pooled) {
      if (!bags) bags = bags_of(inputs);
      p.shape = {bags->offsets.size() - 1};
    } else {
      if (inputs.padding_id) {
        return fail(refuse(Refusal::kInvalidArgument, "parameters 'padding_id': output \"" + o.name +
                                                          "\" gives a vector per token, not per bag"));
      }
      p.shape = {inputs.batch, inputs.length};
    }
    p.shape.insert(p.shape.end(), o.token_shape.begin(), o.token_shape.end());
    // ids <= --max-batch-tokens (2^32 at most) and dim < 2^32: these products cannot overflow.
    p.count = (p.pooled ? p.shape[0] : inputs.ids.size()) * o.dim();
    output_bytes += p.count * output_element_bytes(p.dtype);
    values += p.count;
    plan.push_back(std::move(p));
  }
  // The encoded response: JSON spells each value in at most 16 bytes ("-1.17549435e-38,"); raw
  // bytes are copied once more (into the REST body, or by gRPC's serialization).
  const std::uint64_t encoded_bytes = (encoding == ResponseEncoding::kRaw ? output_bytes : 16 * values) + 4096;
  if (output_bytes + encoded_bytes > budget_.limit()) {
    return fail(refuse(Refusal::kInvalidArgument,
                       "the response to " + std::to_string(inputs.ids.size()) + " tokens needs " +
                           std::to_string(output_bytes + encoded_bytes) + " bytes, more than --max-inflight-bytes " +
                           std::to_string(budget_.limit()) + "; send fewer tokens" +
                           (encoding == ResponseEncoding::kRaw ? "" : " or ask for binary output")));
  }
  outcome.lease = budget_.try_reserve(output_bytes + encoded_bytes);
  if (!outcome.lease) return fail(busy(output_bytes + encoded_bytes));

  // Each output's memory, then the per-token outputs in one embed call and each pooled one.
  std::vector<std::span<std::byte>> memory;
  for (std::size_t k = 0; k < plan.size(); ++k) {
    const std::uint64_t bytes = plan[k].count * output_element_bytes(plan[k].dtype);
    if (allocate) {
      memory.push_back(allocate(k, bytes));
    } else {
      memory.push_back(outcome.storage.emplace_back(bytes));
    }
  }
  const auto library_error = [&](const Status& s) {
    if (s.error().code() == ErrorCode::kIo) {
      // The mapping lost pages (the file was truncated under it): never answer from it again.
      model.damaged.store(true);
      return refuse(Refusal::kUnavailable, s.error().message());
    }
    return refuse(Refusal::kInvalidArgument, std::string(protocol_input(s.error())) + ": " + s.error().message());
  };
  std::vector<OutputTarget> per_token;
  for (std::size_t k = 0; k < plan.size(); ++k) {
    auto span = OutputSpan::from_bytes(memory[k], plan[k].dtype);
    if (!span) return fail(refuse(Refusal::kInternal, span.error().message()));
    if (!plan[k].pooled) {
      per_token.push_back({plan[k].index, *span});
      continue;
    }
    BagRequest r;
    r.ids = bags->ids;
    r.offsets = bags->offsets;
    r.weights = bags->weights;
    r.mode = inputs.pooling;
    r.normalize = inputs.normalize;
    if (Status s = model.embedder.pool(r, *span, plan[k].index); !s) return fail(library_error(s));
  }
  if (!per_token.empty()) {
    EmbedRequest r;
    r.ids = inputs.ids;
    r.sequences = inputs.batch;
    r.start_positions = inputs.starts;
    r.segment_ids = inputs.segments;
    if (Status s = model.embedder.embed(r, per_token); !s) return fail(library_error(s));
  }
  // A file rewritten in place without shrinking raises no fault: the mapping just shows the new
  // bytes, possibly half of them. Any write moves the file's modification time, so a file still
  // as it was when mapped, checked after the rows were read, means the rows were the model's.
  // (A private copy holds the bytes of one version whatever happens to the file: nothing to check.)
  if (const auto now = model.holds_private_copy() ? std::nullopt : FileStamp::of(model.path);
      now && now->same_file(model.identity()) && *now != model.identity()) {
    model.damaged.store(true);
    return fail(refuse(Refusal::kUnavailable, "the model file " + model.path +
                                                  " changed in place while this request read it; the model is not "
                                                  "ready until the file is valid again and reloaded"));
  }
  for (std::size_t k = 0; k < plan.size(); ++k) {
    outcome.outputs.push_back({outputs[plan[k].index].name, plan[k].dtype, plan[k].shape, memory[k]});
  }
  outcome.tokens = inputs.ids.size();
  return outcome;
}

}  // namespace embedrt::serve
