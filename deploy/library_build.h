// What both kinds of deployed library (deploy.h: kernels per task; model_library.h:
// a whole model) share: the name check and the build of the library files.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "compiler/support/files.h"

namespace tuneforge::deploy {

// A library name must be a C identifier (letters, digits, _; not starting with a digit).
bool IsCIdentifier(const std::string& s);

// Text from outside (the db's target keys and task texts, an ONNX model's tensor and node
// names) written into generated C/C++ source goes through one of these, never verbatim:
// a quoted C string literal with every byte outside printable ASCII, '"', '\\' and '?'
// (trigraphs) escaped in octal ...
std::string CStringLiteral(const std::string& text);
// ... or text for a `//` comment: printable ASCII only, with '\\' (a line continuation
// at the end of the line), '?' (trigraphs) and the '*' of "/*" (-Wcomment) replaced by
// '_', so nothing can end the comment or warn.
std::string CommentText(const std::string& text);

// The ELF section a deployed library keeps its provenance JSON in (NUL-terminated),
// so that `deploy inspect` reads it from the file without loading the library.
inline constexpr char kProvenanceSection[] = ".tuneforge_provenance";

// C++ source defining `extern "C" const char* <function>(void)`, returning `json` from
// a byte array placed in kProvenanceSection (bytes, not a literal: nothing to escape).
std::string ProvenanceDefinition(const std::string& function, const std::string& json);

// In `work`, which holds the generated glue.cc (and the header it includes): writes the
// runtime's sources (the thread pool the kernels were measured with), compiles glue.cc
// and the thread pool with the system c++, and links them with `objects` (the kernels)
// into work/lib<name>.so and work/lib<name>.a. `triple`: the kernels' target; for
// another architecture than the host's, its cross toolchain (<arch>-linux-gnu-g++,
// -ar; scripts/install-deps installs aarch64's and riscv64's) does the compiling,
// linking and archiving. FailedPrecondition when it is missing.
absl::Status BuildLibraryFiles(const TempDir& work, const std::string& name, std::vector<std::string> objects,
                               const std::string& triple = "");

}  // namespace tuneforge::deploy
