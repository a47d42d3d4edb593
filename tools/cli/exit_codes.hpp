// The exit codes of every `embedrt` subcommand, and the one mapping from library errors to them.
// README.md ("Exit codes") documents the same table.
#pragma once

#include "embedrt/error.hpp"

namespace embedrt::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the system refused: an I/O error, an address in use
inline constexpr int kExitUsage = 2;     // the command line is wrong: unknown flag, value out of range, id past the model
inline constexpr int kExitBadInput = 3;  // an input file is missing, not its format, damaged or not supported
inline constexpr int kExitOutput = 4;    // the output cannot be written: it exists (no --force), the disk is full
// Killed by SIGINT or SIGTERM (after removing unfinished outputs): 130 or 143 in a shell.

constexpr int exit_code_for(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk: return kExitOk;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange: return kExitUsage;
    case ErrorCode::kNotFound:
    case ErrorCode::kBadMagic:
    case ErrorCode::kUnsupportedVersion:
    case ErrorCode::kMalformed:
    case ErrorCode::kChecksumMismatch:
    case ErrorCode::kUnsupported: return kExitBadInput;
    case ErrorCode::kAlreadyExists:
    case ErrorCode::kNoSpace: return kExitOutput;
    case ErrorCode::kIo: return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace embedrt::cli
