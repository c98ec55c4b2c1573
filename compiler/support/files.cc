// Files and temporary directories: whole-file read/write, TempDir.
#include "compiler/support/files.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace tuneforge {

absl::StatusOr<TempDir> TempDir::Create(const std::string& prefix) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / (prefix + "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp(", pattern, ") failed: ", std::strerror(errno)));
  }
  return TempDir(pattern);
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

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

absl::Status CheckSecretFileMode(const std::string& path, const std::string& what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::OkStatus();
  if ((st.st_mode & 077) == 0) return absl::OkStatus();
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return absl::PermissionDeniedError(absl::StrCat(
      what, " ", path, " is readable or writable by group or others (mode ", mode,
      "): a secret must be the owner's alone; chmod 600 ", path));
}

absl::Status WriteSecretFile(const std::string& path, const std::string& bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", path));
  bool ok = fchmod(fd, 0600) == 0;
  size_t done = 0;
  while (ok && done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = close(fd) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  absl::Status mode = CheckSecretFileMode(path, "secret file");
  if (!mode.ok()) return mode;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read secret file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  size_t begin = s.find_first_not_of(" \t\r\n"), end = s.find_last_not_of(" \t\r\n");
  if (begin == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return s.substr(begin, end - begin + 1);
}

absl::StatusOr<int> RunAndWait(std::vector<std::string> argv, const std::string& log_path,
                               const std::string* input) {
  int in_pipe[2] = {-1, -1};
  if (input) {
    // Written before the program starts, while this process holds the read end (no
    // SIGPIPE whatever the program does): the pipe's buffer holds it all.
    if (input->size() > 4096) return absl::InvalidArgumentError("RunAndWait input over 4 KiB");
    if (pipe2(in_pipe, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe failed: ", std::strerror(errno)));
    }
    const bool written = write(in_pipe[1], input->data(), input->size()) == static_cast<ssize_t>(input->size());
    close(in_pipe[1]);
    if (!written) {
      close(in_pipe[0]);
      return absl::InternalError("cannot write a program's input");
    }
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (input) posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (input) close(in_pipe[0]);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start '", argv[0], "': ", std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(absl::StrCat("waitpid failed: ", std::strerror(errno)));
    }
  }
  return status;
}

std::string FindProgram(const std::vector<std::string>& names) {
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

absl::Status RunChecked(std::vector<std::string> argv, const std::string& log_path) {
  std::string program = argv[0];
  absl::StatusOr<int> status = RunAndWait(std::move(argv), log_path);
  if (!status.ok()) return status.status();
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    absl::StatusOr<std::string> output = ReadFile(log_path);
    return absl::InternalError(absl::StrCat("'", program, "' failed (wait status ", *status,
                                            "): ", output.ok() ? *output : "(no output)"));
  }
  return absl::OkStatus();
}

}  // namespace tuneforge
