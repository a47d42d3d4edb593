// libFuzzer target: the zip reader on arbitrary bytes (CRC checked, as by default).
#include <cstddef>
#include <cstdint>

#include "zip_archive.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto archive = embedrt::import::ZipArchive::open(bytes, "fuzz.zip");
  if (archive) {
    for (const auto& e : archive->entries()) {
      volatile std::byte sink{};
      for (std::byte b : e.data) sink = sink ^ b;  // every span must be readable
    }
  }
  return 0;
}
