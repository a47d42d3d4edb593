// libFuzzer target: the .embt reader, through a real mapping (a memfd), then verify() and the
// model checks, then one reference embed when the file is valid.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "embedrt/embedrt.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("fuzz.embt", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  auto file = embedrt::TableFile::open("/proc/self/fd/" + std::to_string(fd));
  if (file) {
    (void)file->verify();
    auto model = embedrt::Model::from_file(*file);
    if (model && model->dim() <= 4096) {
      std::vector<float> out(2 * model->dim());
      const std::int64_t ids[] = {0, static_cast<std::int64_t>(model->vocab_size() - 1)};
      (void)embedrt::reference_embed(*model, ids, 1, 0, out);
    }
  }
  ::close(fd);
  return 0;
}
