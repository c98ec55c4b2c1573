#include "compiler/codegen/linker.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "compiler/support/files.h"
#include "compiler/support/status.h"

namespace tuneforge::codegen {
namespace {

// The linker, looked up in PATH. GNU ld or lld both work.
constexpr const char* kLinker = "ld";

// The first of `names` that is an executable in PATH; empty if none is.
std::string FindInPath(const std::vector<std::string>& names) {
  const char* path = std::getenv("PATH");
  for (const std::string& name : names) {
    std::stringstream dirs(path ? path : "/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> LinkSharedObject(const std::string& object, bool foreign) {
  std::string linker = kLinker;
  if (foreign) {
    linker = FindInPath({"ld.lld-19", "ld.lld"});
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
