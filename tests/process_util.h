// Helpers for end-to-end tests: run a command to completion and capture its
// output, or keep a background process (server, agent) alive for a test.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tuneforge::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes a secret (tokens file, token) that only its owner may read, as the server,
// CLI and agent require (mode 0600); returns the path.
inline std::string WriteSecret(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write);
  return path;
}

// A child process with stdout/stderr redirected to files.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::string& out_path,
          const std::string& err_path)
      : out_path_(out_path), err_path_(err_path) {
    pid_ = fork();
    if (pid_ == 0) {
      int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());  // PATH lookup for cc, systemd-analyze, ...
      _exit(127);
    }
  }
  ~Process() { Kill(SIGKILL); }

  // Sends `sig` and reaps the process; returns its wait status.
  int Kill(int sig) {
    if (pid_ <= 0) return status_;
    kill(pid_, sig);
    waitpid(pid_, &status_, 0);
    pid_ = -1;
    return status_;
  }
  // Waits up to `timeout`; returns the exit code, or -1 when still running.
  int Wait(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  bool Running() { return pid_ > 0 && waitpid(pid_, &status_, WNOHANG) == 0; }
  std::string Stdout() const { return ReadFile(out_path_); }
  std::string Stderr() const { return ReadFile(err_path_); }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  std::string out_path_, err_path_;
};

inline CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                         std::chrono::seconds timeout = std::chrono::seconds(600)) {
  static int counter = 0;
  std::string base = scratch_dir + "/cmd" + std::to_string(counter++);
  Process p(argv, base + ".out", base + ".err");
  CommandResult r;
  r.exit_code = p.Wait(timeout);
  if (r.exit_code == -1) r.exit_code = (p.Kill(SIGKILL), -2);
  r.out = ReadFile(base + ".out");
  r.err = ReadFile(base + ".err");
  return r;
}

}  // namespace tuneforge::testing
