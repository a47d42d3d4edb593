#include "embedrt/error.hpp"

namespace embedrt {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kNoSpace: return "no-space";
    case ErrorCode::kAlreadyExists: return "already-exists";
    case ErrorCode::kNotFound: return "not-found";
    case ErrorCode::kBadMagic: return "bad-magic";
    case ErrorCode::kUnsupportedVersion: return "unsupported-version";
    case ErrorCode::kMalformed: return "malformed";
    case ErrorCode::kChecksumMismatch: return "checksum-mismatch";
    case ErrorCode::kInvalidArgument: return "invalid-argument";
    case ErrorCode::kOutOfRange: return "out-of-range";
    case ErrorCode::kUnsupported: return "unsupported";
  }
  return "unknown";
}

}  // namespace embedrt
