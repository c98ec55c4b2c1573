// Object file -> shared object: the system linker invoked for host and cross targets.
#include "compiler/codegen/linker.h"

#include "compiler/support/files.h"
#include "compiler/support/status.h"

namespace tuneforge::codegen {
namespace {

// The linker, looked up in PATH. GNU ld or lld both work.
constexpr const char* kLinker = "ld";

}  // namespace

absl::StatusOr<std::string> LinkSharedObject(const std::string& object, bool foreign) {
  std::string linker = kLinker;
  if (foreign) {
    linker = FindProgram({"ld.lld-19", "ld.lld"});
    if (linker.empty()) {
      return absl::FailedPreconditionError(
          "linking for another architecture needs LLVM's linker (ld.lld-19 or ld.lld in PATH; "
          "scripts/install-deps installs lld-19)");
    }
  }
  ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("tuneforge-link"));
  const std::string in = dir.File("kernel.o");
  const std::string out = dir.File("kernel.so");
  RETURN_IF_ERROR(WriteFile(in, object));
  // --build-id=none keeps the output a pure function of the object, so equal kernels
  // get equal artifact hashes.
  RETURN_IF_ERROR(RunChecked({linker, "-shared", "--build-id=none", "-o", out, in},
                             dir.File("ld.log")));
  return ReadFile(out);
}

}  // namespace tuneforge::codegen
