// Test helper: runs a check in a forked child that is not root, for behaviour that
// root bypasses (file permissions, RLIMIT_NPROC). Header-only; tests only.
#pragma once

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <utility>

namespace tuneforge::testing {

struct ChildOutcome {
  int exit_code = -1;  // the body's code; 4 = could not drop root, -1 = did not exit
  std::string text;    // what the body reported
};

// Forks; in the child drops to nobody (65534) when running as root, runs `body`, which
// returns (exit code, text), and exits with it. The parent waits and returns both.
// The child must not rely on threads of the parent (only the forking thread exists).
inline ChildOutcome RunUnprivileged(const std::function<std::pair<int, std::string>()>& body) {
  ChildOutcome out;
  int fds[2];
  if (pipe(fds) != 0) return out;
  pid_t pid = fork();
  if (pid < 0) return out;
  if (pid == 0) {
    close(fds[0]);
    std::pair<int, std::string> result{4, "cannot drop root"};
    if (geteuid() != 0 || (setgroups(0, nullptr) == 0 && setgid(65534) == 0 && setuid(65534) == 0))
      result = body();
    if (write(fds[1], result.second.data(), result.second.size()) < 0) _exit(5);
    _exit(result.first);
  }
  close(fds[1]);
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.text.append(buf, n);
  close(fds[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  return out;
}

}  // namespace tuneforge::testing
