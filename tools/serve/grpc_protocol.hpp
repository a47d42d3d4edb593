// KServe v2 over gRPC: ModelInferRequest -> InferInputs, outputs -> ModelInferResponse, and the
// metadata messages, on the classes protoc generates from kserve_grpc.proto. The gRPC twin of
// kserve_protocol.hpp (JSON); the transport is grpc_server.hpp's.
#pragma once

#include <cstdint>
#include <span>

#include "embedrt/error.hpp"
#include "inference.hpp"
#include "kserve_grpc.pb.h"

namespace embedrt::serve {

// The bytes decoding `request` will allocate (ids, token types and starts as int64), known
// before decoding from the shapes alone, so the budget can be asked first. Saturates.
std::uint64_t decoded_bytes(const inference::ModelInferRequest& request) noexcept;

// Inputs from raw_input_contents (little-endian, one entry per input, all inputs or none) or
// from each input's typed contents (int64_contents for INT64, int_contents for INT32). Errors
// are kInvalidArgument naming the input (`inputs[1] 'position_start': ...`), worded as REST's.
Result<InferInputs> decode_infer_request(const inference::ModelInferRequest& request);

// Names, datatypes and shapes of `outputs` into `response`; their bytes are already in its
// raw_output_contents (Inference::run's allocator put them there), in the same order.
void describe_outputs(std::span<const OutputTensor> outputs, inference::ModelInferResponse& response);

void to_proto(const ModelDescription& model, inference::ModelMetadataResponse& response);
void to_proto(const ServerDescription& server, inference::ServerMetadataResponse& response);

}  // namespace embedrt::serve
