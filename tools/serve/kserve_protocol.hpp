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

namespace embedrt::serve {

struct InferRequest {
  std::string id;                     // echoed back when given
  std::vector<std::int64_t> ids;      // input_ids, row-major [batch, length]
  std::uint64_t batch = 0, length = 0;
  std::vector<std::uint64_t> starts;  // position_start, one per sequence (empty: 0)
  std::vector<std::int64_t> segments; // token_type_ids, like ids (empty: none)
  bool binary_output = false;
};

// Checks `text` as JSON without building it (syntax, a nesting limit) and counts its values, so
// that the memory of parsing it can be reserved first. Errors are kInvalidArgument.
Result<std::uint64_t> scan_json(std::string_view text);

// `header_length`: the Inference-Header-Content-Length header when present (binary mode).
// Errors are kInvalidArgument with a message naming the input and the problem.
Result<InferRequest> parse_infer_request(std::string_view body, std::optional<std::uint64_t> header_length,
                                         std::uint64_t max_tokens);

// JSON body of a response (floats written to round-trip float32 exactly), or, in binary mode,
// the JSON header whose length goes in Inference-Header-Content-Length followed by the raw floats.
struct InferResponse {
  std::string body;
  std::optional<std::uint64_t> header_length;
};
// `embeddings` holds the output in `dtype` (FP32, BF16 or FP16 on the wire). A JSON response
// refuses NaN and Infinity values (kUnsupported): JSON cannot spell them, binary output can.
Result<InferResponse> make_infer_response(const std::string& model, const InferRequest& request, std::uint64_t dim,
                                          OutputDType dtype, std::span<const std::byte> embeddings);

std::string model_metadata_json(const std::string& model, std::uint64_t dim, bool has_segments, OutputDType dtype);
// GET /v2: the server's name, version and protocol extensions.
std::string server_metadata_json();
std::string error_json(const std::string& message);

// The KServe input an Embedder error is about, from its structured context (Error::context().field):
// ids -> input_ids, segment_ids -> token_type_ids, start/start_positions -> position_start.
std::string_view protocol_input(const Error& error) noexcept;

}  // namespace embedrt::serve
