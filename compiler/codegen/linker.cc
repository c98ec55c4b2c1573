#include "compiler/codegen/linker.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"

extern char** environ;

namespace tuneforge::codegen {
namespace {

// The linker, looked up in PATH. GNU ld or lld both work.
constexpr const char* kLinker = "ld";

// A mkdtemp directory that removes itself and its contents.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Create() {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string pattern = (base / "tuneforge-link-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("mkdtemp(", pattern, ") failed: ", std::strerror(errno)));
    }
    return TempDir(pattern);
  }
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("cannot read ", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Runs argv with stdout and stderr redirected to `log_path`; returns the exit status.
absl::StatusOr<int> RunAndWait(std::vector<std::string> argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start linker '", argv[0], "': ", std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid failed: ", std::strerror(errno)));
    }
  }
  return status;
}

}  // namespace

absl::StatusOr<std::string> LinkSharedObject(const std::string& object) {
  ASSIGN_OR_RETURN(TempDir dir, TempDir::Create());
  const std::string in = dir.File("kernel.o");
  const std::string out = dir.File("kernel.so");
  const std::string log = dir.File("ld.log");
  RETURN_IF_ERROR(WriteFile(in, object));

  // --build-id=none keeps the output a pure function of the object, so equal kernels
  // get equal artifact hashes.
  ASSIGN_OR_RETURN(int status,
                   RunAndWait({kLinker, "-shared", "--build-id=none", "-o", out, in}, log));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    absl::StatusOr<std::string> diagnostics = ReadFile(log);
    return absl::InternalError(
        absl::StrCat("linker '", kLinker, "' failed (wait status ", status,
                     "): ", diagnostics.ok() ? *diagnostics : std::string("(no output)")));
  }
  return ReadFile(out);
}

}  // namespace tuneforge::codegen
