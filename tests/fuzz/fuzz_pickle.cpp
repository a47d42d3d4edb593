// libFuzzer target: the inert unpickler with the torch allow-list, as for a checkpoint's
// data.pkl. Every storage key resolves to one 4 KiB buffer, so tensor views are validated too.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "torch_checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::byte> storage(4096, std::byte{1});
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto tensors = embedrt::import::load_state_dict_pickle(
      bytes, "fuzz.pkl", [](const std::string& key) -> std::optional<std::span<const std::byte>> {
        if (key == "missing") return std::nullopt;
        return std::span<const std::byte>(storage);
      });
  if (tensors) {
    for (const auto& t : *tensors) {
      // A validated view's furthest element must be inside its storage: touch it.
      std::uint64_t last = static_cast<std::uint64_t>(t.storage_offset);
      bool empty = false;
      for (std::size_t i = 0; i < t.shape.size(); ++i) {
        if (t.shape[i] == 0) empty = true;
        else last += static_cast<std::uint64_t>(t.shape[i] - 1) * static_cast<std::uint64_t>(t.strides[i]);
      }
      if (!empty) {
        volatile std::byte b = t.storage[last * embedrt::import::source_dtype_size(t.dtype)];
        (void)b;
      }
    }
  }
  return 0;
}
