// Turns a relocatable object into a shared object with the system linker. No LLVM:
// the linker runs as a subprocess, so a linker crash cannot take the builder down.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tuneforge::codegen {

// Links `object` (ELF relocatable bytes) with `ld -shared` inside a private temporary
// directory, which is removed before returning, and returns the shared object's
// bytes. Undefined symbols stay undefined (resolved when the object is loaded). A
// failure returns Internal with the linker's diagnostics. Thread-safe.
// `foreign`: the object is for another architecture than the host's; LLVM's linker
// (ld.lld-19, else ld.lld: one binary for every architecture) links it instead of the
// system's ld, which knows only the host's. FailedPrecondition when it is missing.
absl::StatusOr<std::string> LinkSharedObject(const std::string& object, bool foreign = false);

}  // namespace tuneforge::codegen
