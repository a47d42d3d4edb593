// "strerror(errno)" in a form safe for threads.
#pragma once

#include <string>

namespace embedrt::detail {

std::string errno_message(int error_number);

}  // namespace embedrt::detail
