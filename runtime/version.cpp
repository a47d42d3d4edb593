#include "embedrt/version.hpp"

namespace embedrt {
const char* version() noexcept { return EMBEDRT_VERSION_STRING; }
}  // namespace embedrt
