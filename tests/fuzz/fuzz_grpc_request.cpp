// ModelInferRequest bytes as a gRPC client sends them: parsed by libprotobuf, then decoded by
// embedrt's decoder. Asserts what the rest of the server relies on: a decoded request's ids fill
// its shape, token types match it, starts are one per sequence, and decoding never allocates more
// than decoded_bytes() said it would (the budget is asked for that much first).
#include <cstddef>
#include <cstdint>

#include "grpc_protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const std::uint64_t budgeted = embedrt::serve::decoded_bytes(request);
  auto inputs = embedrt::serve::decode_infer_request(request);
  if (!inputs) {
    if (inputs.error().message().empty()) __builtin_trap();
    return 0;
  }
  if (inputs->ids.size() != inputs->batch * inputs->length) __builtin_trap();
  if (!inputs->segments.empty() && inputs->segments.size() != inputs->ids.size()) __builtin_trap();
  if (!inputs->starts.empty() && inputs->starts.size() != inputs->batch) __builtin_trap();
  const std::uint64_t decoded = 8 * (inputs->ids.size() + inputs->segments.size() + inputs->starts.size());
  if (decoded > budgeted) __builtin_trap();
  return 0;
}
