// libFuzzer target: the safetensors header parser and its coverage rules.
#include <cstddef>
#include <cstdint>

#include "safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto tensors = embedrt::import::load_safetensors(bytes, "fuzz.safetensors");
  if (tensors) {
    for (const auto& t : *tensors) {
      if (!t.storage.empty()) {
        volatile std::byte b = t.storage.back();
        (void)b;
      }
    }
  }
  return 0;
}
