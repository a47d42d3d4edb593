#include "inference.hpp"

#include <string>

#include "embedrt/version.hpp"

namespace embedrt::serve {
namespace {

InferError refuse(Refusal kind, std::string message) { return InferError{kind, std::move(message)}; }

// The one output every model has today (API-PLAN: models will list several; each then gets its
// name, dtype and per-token shape from the model).
constexpr const char* kEmbeddings = "embeddings";

}  // namespace

Result<InferInputs> assemble_inputs(std::vector<InputTensor> tensors) {
  const auto bad = [](const std::string& message) { return Error(ErrorCode::kInvalidArgument, message); };
  InferInputs r;
  InputTensor* ids = nullptr;
  for (InputTensor& t : tensors) {
    if (t.name == "input_ids") ids = &t;
  }
  if (ids == nullptr) return bad("inputs: no \"input_ids\" tensor");
  if (ids->shape.size() != 2) return bad("inputs 'input_ids': shape must be [batch, length]");
  r.batch = static_cast<std::uint64_t>(ids->shape[0]);
  r.length = static_cast<std::uint64_t>(ids->shape[1]);
  for (InputTensor& t : tensors) {
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
      r.segments = std::move(t.data);
    } else {
      return bad("inputs '" + t.name + "': unknown input (expected input_ids, position_start, token_type_ids)");
    }
  }
  r.ids = std::move(ids->data);
  return r;
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
  d.outputs.push_back({kEmbeddings, wire_datatype(natural_output_dtype(m)), {-1, -1, static_cast<std::int64_t>(m.dim())}, false});
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
  for (const std::string& name : inputs.outputs) {
    if (name != kEmbeddings) {
      return fail(refuse(Refusal::kInvalidArgument,
                         "outputs: unknown output \"" + name + "\" (the model has \"" + kEmbeddings + "\")"));
    }
  }

  const Model& m = model.embedder.model();
  const std::uint64_t dim = m.dim();
  // The model's own output dtype (bf16 for a bf16 table, as transformers computes it).
  const OutputDType dtype = natural_output_dtype(m);
  const std::uint64_t element = dtype == OutputDType::kF32 ? 4 : 2;
  // ids <= --max-batch-tokens (2^32 at most) and dim < 2^32: these products cannot overflow.
  const std::uint64_t count = inputs.ids.size() * dim;
  const std::uint64_t output_bytes = count * element;
  // The encoded response: JSON spells each value in at most 16 bytes ("-1.17549435e-38,"); raw
  // bytes are copied once more (into the REST body, or by gRPC's serialization).
  const std::uint64_t encoded_bytes = (encoding == ResponseEncoding::kRaw ? output_bytes : 16 * count) + 4096;
  if (output_bytes + encoded_bytes > budget_.limit()) {
    return fail(refuse(Refusal::kInvalidArgument,
                       "the response to " + std::to_string(inputs.ids.size()) + " tokens needs " +
                           std::to_string(output_bytes + encoded_bytes) + " bytes, more than --max-inflight-bytes " +
                           std::to_string(budget_.limit()) + "; send fewer tokens" +
                           (encoding == ResponseEncoding::kRaw ? "" : " or ask for binary output")));
  }
  outcome.lease = budget_.try_reserve(output_bytes + encoded_bytes);
  if (!outcome.lease) return fail(busy(output_bytes + encoded_bytes));

  std::span<std::byte> out;
  if (allocate) {
    out = allocate(0, output_bytes);
  } else {
    outcome.storage.emplace_back(output_bytes);
    out = outcome.storage.back();
  }
  auto out_span = OutputSpan::from_bytes(out, dtype);
  if (!out_span) return fail(refuse(Refusal::kInternal, out_span.error().message()));
  EmbedRequest r;
  r.ids = inputs.ids;
  r.sequences = inputs.batch;
  r.start_positions = inputs.starts;
  r.segment_ids = inputs.segments;
  if (Status s = model.embedder.embed(r, *out_span); !s) {
    if (s.error().code() == ErrorCode::kIo) {
      // The mapping lost pages (the file was truncated under it): never answer from it again.
      model.damaged.store(true);
      return fail(refuse(Refusal::kUnavailable, s.error().message()));
    }
    return fail(refuse(Refusal::kInvalidArgument, std::string(protocol_input(s.error())) + ": " + s.error().message()));
  }
  // A file rewritten in place without shrinking raises no fault: the mapping just shows the new
  // bytes, possibly half of them. Any write moves the file's modification time, so a file still
  // as it was when mapped, checked after the rows were read, means the rows were the model's.
  if (const auto now = FileIdentity::of(model.path); now && now->same_file(model.identity) && *now != model.identity) {
    model.damaged.store(true);
    return fail(refuse(Refusal::kUnavailable, "the model file " + model.path +
                                                  " changed in place while this request read it; the model is not "
                                                  "ready until the file is valid again and reloaded"));
  }
  outcome.outputs.push_back({kEmbeddings, dtype, {inputs.batch, inputs.length, dim}, out});
  outcome.tokens = inputs.ids.size();
  return outcome;
}

}  // namespace embedrt::serve
