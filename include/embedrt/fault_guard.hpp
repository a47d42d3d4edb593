// A file truncated under its mapping, turned from a crash into an error.
//
// When another process truncates a file this process has mapped (`cp new.embt served.embt`
// truncates, then writes), the next read of a page past the new end raises SIGBUS, which kills
// the process. install_fault_guard() installs a SIGBUS handler that, for an address inside a
// mapping embedrt made (every MappedFile: tables and checkpoints), maps a zero page over the lost
// page, counts it, and lets the read go on. The call that read it then reports the damage as an
// error (Embedder::embed, TableFile::verify: "truncated or rewritten in place while mapped")
// instead of returning the zeros. Faults at any other address go to the handler installed before
// (or, with none, kill the process as they always did).
//
// Opt-in and process-wide, because a library must not take a signal from its host program
// unasked; the embedrt CLI and server install it at startup. Idempotent and thread-safe.
//
// A file rewritten in place without shrinking raises no fault: the mapping simply shows the new
// bytes. Replace files by rename (what embedrt's writer does) and reopen them; the server also
// watches the file (README, "Reliability").
#pragma once

#include "embedrt/error.hpp"

namespace embedrt {

Status install_fault_guard() noexcept;
bool fault_guard_installed() noexcept;

}  // namespace embedrt
