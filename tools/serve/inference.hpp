// The request -> library path every transport of `embedrt serve` shares (KServe v2 over REST in
// service.cpp, over gRPC in grpc_server.cpp). A transport decodes its wire format into
// InferInputs, calls Inference::run, and encodes the outputs it gets back, or maps the refusal's
// kind to its own status (the table below). Everything between — which model answers, readiness,
// request limits, the in-flight memory budget, the embedding itself, the check that the file did
// not change under the rows — is here once, so a feature added to requests (several named
// outputs, pooled bags) is added to both protocols at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "embedrt/embedder.hpp"
#include "inflight_budget.hpp"
#include "model_slot.hpp"

namespace embedrt::serve {

// Why a request was refused, and so what each protocol answers:
//
// | kind             | REST                 | gRPC               | e.g.                                      |
// |------------------|----------------------|--------------------|-------------------------------------------|
// | kInvalidArgument | 400                  | INVALID_ARGUMENT   | id out of range, wrong shape, more tokens than --max-batch-tokens, a response larger than the whole budget |
// | kNotFound        | 404                  | NOT_FOUND          | unknown model or version                  |
// | kBusy            | 503 + Retry-After: 1 | UNAVAILABLE        | the in-flight budget is full right now    |
// | kUnavailable     | 503                  | UNAVAILABLE        | the model file is damaged or being rewritten |
// | kTooLarge        | 413                  | RESOURCE_EXHAUSTED | the request itself (body, decoded inputs) could never fit the budget |
// | kInternal        | 500                  | INTERNAL           | a response that cannot be encoded (NaN in JSON) |
//
// Busy is UNAVAILABLE, not RESOURCE_EXHAUSTED: gRPC documents UNAVAILABLE as the transient code
// to retry with backoff, and retry policies list it. A request too large to ever fit is
// RESOURCE_EXHAUSTED because that is what gRPC itself answers for a message over the receive
// limit: a client sees one code for "too big, retrying will not help" whichever layer noticed.
// A request that asks for too much *work* (tokens, response bytes) is an invalid argument in both
// protocols, like any other limit on what a request may contain.
enum class Refusal { kInvalidArgument, kNotFound, kBusy, kUnavailable, kTooLarge, kInternal };

struct InferError {
  Refusal kind;
  std::string message;  // names the input or limit at fault
};

// REST status for a refusal (Retry-After is the caller's, for kBusy).
int http_status(Refusal kind) noexcept;

// An inference request as decoded from any protocol.
struct InferInputs {
  std::string id;                      // echoed back when given
  std::vector<std::int64_t> ids;       // input_ids, row-major [batch, length] (or [N] with bag_offsets)
  std::uint64_t batch = 0, length = 0;
  std::vector<std::uint64_t> starts;   // position_start, one per sequence (empty: 0)
  std::vector<std::int64_t> segments;  // token_type_ids, like ids (empty: none)
  std::vector<std::string> outputs;    // requested outputs by name; empty: every output

  // Bags (FORMAT.md 7.2): an output is pooled when the request gives bag_offsets or a pooling
  // parameter, or when the output's own pooling.mode says so (then each row of input_ids is a
  // bag, without its padding_id tokens when that parameter is given).
  std::vector<std::uint64_t> bag_offsets;  // bags + 1 boundaries into input_ids (empty: none given)
  std::vector<float> bag_weights;          // one per id (empty: none)
  std::optional<PoolingMode> pooling;      // parameter "pooling": sum, mean or max
  std::optional<bool> normalize;           // parameter "normalize"
  std::optional<std::int64_t> padding_id;  // parameter "padding_id": tokens left out of row bags
};

// One decoded input tensor, any protocol: integers widened to int64 (INT32, INT64), or floats
// (FP32), as its datatype said.
struct InputTensor {
  std::string name;
  std::vector<std::int64_t> shape, data;
  std::vector<float> floats;
  bool is_float = false;
};

// Which tensor is which: input_ids [B, L] (or [N] with bag_offsets), optional position_start
// [B], token_type_ids [B, L], bag_offsets [bags + 1] and bag_weights (FP32, one per id);
// anything else is refused. Errors are kInvalidArgument and name the input.
Result<InferInputs> assemble_inputs(std::vector<InputTensor> tensors);

// The request-level parameters of a pooled request, by name and value as either protocol carries
// them (REST JSON "parameters", gRPC InferParameter): pooling (string), normalize (bool),
// padding_id (integer). Others are ignored (e.g. binary_data_output, handled by the transport).
using ParameterValue = std::variant<bool, std::int64_t, std::string>;
Status apply_parameter(InferInputs& inputs, const std::string& name, const ParameterValue& value);

// How the response will carry the outputs: as JSON text (16 bytes a value, reserved from the
// budget) or as raw little-endian bytes (REST binary extension, gRPC raw_output_contents).
enum class ResponseEncoding { kJsonText, kRaw };

// One output tensor of a response. `data` points into memory the allocator handed out.
struct OutputTensor {
  std::string name;
  OutputDType dtype;
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> data;
};

// Hands out `bytes` of memory for output `index` (e.g. a gRPC response's own raw_output_contents
// string, so nothing is copied afterwards). Null: the outcome owns the memory.
using OutputAllocator = std::function<std::span<std::byte>(std::size_t index, std::uint64_t bytes)>;

struct InferOutcome {
  std::optional<InferError> error;  // set: refused, nothing else is meaningful
  std::vector<OutputTensor> outputs;
  std::uint64_t tokens = 0;
  BudgetLease lease;                 // the outputs' and their encoding's memory: hold until sent
  std::vector<std::vector<std::byte>> storage;  // outputs' memory when no allocator was given

  explicit operator bool() const noexcept { return !error; }
};

// What a model takes and gives, for the metadata endpoints of both protocols.
struct TensorDescription {
  std::string name;
  std::string datatype;        // KServe datatype: INT64, FP32, BF16, FP16
  std::vector<std::int64_t> shape;  // -1 for a variable dimension
  bool optional = false;
};
struct ModelDescription {
  std::string name;
  std::string version = "1";
  std::string platform = "embedrt";
  std::vector<TensorDescription> inputs, outputs;
};
ModelDescription describe_model(const ServedModel& model);

// The server's name, version and protocol extensions (GET /v2, ServerMetadata).
struct ServerDescription {
  std::string name, version;
  std::vector<std::string> extensions;
};
ServerDescription describe_server();

// KServe's name of an output dtype: FP32, BF16, FP16.
const char* wire_datatype(OutputDType dtype) noexcept;

// The KServe input an Embedder error is about, from its structured context (Error::context().field):
// ids -> input_ids, segment_ids -> token_type_ids, start/start_positions -> position_start.
std::string_view protocol_input(const Error& error) noexcept;

class Inference {
 public:
  Inference(const ModelSlot& slot, InflightBudget& budget, std::uint64_t max_batch_tokens)
      : slot_(slot), budget_(budget), max_batch_tokens_(max_batch_tokens) {}

  // The served model when `name` (and `version`, when given) names it; else kNotFound, or
  // kUnavailable before the first load.
  struct Lookup {
    std::shared_ptr<const ServedModel> model;
    std::optional<InferError> error;
  };
  Lookup find(std::string_view name, std::optional<std::string_view> version) const;

  // kUnavailable when the model's file was rewritten in place (or its mapping faulted).
  std::optional<InferError> check_ready(const ServedModel& model) const;

  // A shape's token count checked against --max-batch-tokens before anything is decoded.
  std::optional<InferError> check_tokens(std::uint64_t batch, std::uint64_t length) const;

  // Runs `inputs` on `model`: limits, outputs by name, the budget for the outputs and their
  // encoding, the embedding, and the check that the file did not change while its rows were read.
  InferOutcome run(const ServedModel& model, const InferInputs& inputs, ResponseEncoding encoding,
                   const OutputAllocator& allocate = nullptr) const;

  // A kBusy refusal for `wanted` more bytes of the budget, worded as REST and gRPC both send it.
  InferError busy(std::uint64_t wanted) const;

  InflightBudget& budget() const noexcept { return budget_; }
  std::uint64_t max_batch_tokens() const noexcept { return max_batch_tokens_; }

 private:
  const ModelSlot& slot_;
  InflightBudget& budget_;
  std::uint64_t max_batch_tokens_;
};

}  // namespace embedrt::serve
