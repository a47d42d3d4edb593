// The subset of the Open Inference Protocol (KServe v2) an embedding model needs: JSON requests
// and responses, and the binary tensor extension (a JSON header of Inference-Header-Content-Length
// bytes followed by raw little-endian tensors) for clients that care about speed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/error.hpp"
#include "inference.hpp"

namespace embedrt::serve {

// A REST request: the protocol-neutral inputs (inference.hpp) and how the response travels.
struct InferRequest {
  InferInputs inputs;
  bool binary_output = false;  // a requested output or the request asked for binary_data
};

// Checks `text` as JSON without building it (syntax, a nesting limit) and counts its values, so
// that the memory of parsing it can be reserved first. Errors are kInvalidArgument.
Result<std::uint64_t> scan_json(std::string_view text);

// `header_length`: the Inference-Header-Content-Length header when present (binary mode).
// Errors are kInvalidArgument with a message naming the input and the problem. Limits that need
// the model or the server's options (--max-batch-tokens, output names) are Inference::run's.
Result<InferRequest> parse_infer_request(std::string_view body, std::optional<std::uint64_t> header_length);

// JSON body of a response (floats written to round-trip float32 exactly), or, in binary mode,
// the JSON header whose length goes in Inference-Header-Content-Length followed by the raw floats.
struct InferResponse {
  std::string body;
  std::optional<std::uint64_t> header_length;
};
// Each output's data is in its dtype (FP32, BF16 or FP16 on the wire). A JSON response refuses
// NaN and Infinity values (kUnsupported): JSON cannot spell them, binary output can.
Result<InferResponse> make_infer_response(const std::string& model, const std::string& id,
                                          std::span<const OutputTensor> outputs, bool binary);

std::string model_metadata_json(const ModelDescription& model);
// GET /v2: the server's name, version and protocol extensions.
std::string server_metadata_json(const ServerDescription& server);
std::string error_json(const std::string& message);

}  // namespace embedrt::serve
