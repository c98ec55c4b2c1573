// Helpers for end-to-end tests: run a command to completion and capture its
// output, or keep a background process (server, agent) alive for a test.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tuneforge::testing {

// How much longer than on an idle machine a test waits for a process: every timeout
// of Process::Wait and RunCommand is multiplied by it. TUNEFORGE_TEST_TIME_SCALE
// (a number >= 1) when set, else 1 + the 1-minute load average per CPU at the first
// call, at most 4: on a machine busy with other work (another build, stress-ng) the
// same test takes longer, and a timeout is a failure only when something hangs.
inline double TimeScale() {
  static const double scale = [] {
    if (const char* env = std::getenv("TUNEFORGE_TEST_TIME_SCALE")) {
      const double v = std::atof(env);
      if (v >= 1) return v;
    }
    double load = 0;
    std::ifstream("/proc/loadavg") >> load;
    const double cpus = std::max(1u, std::thread::hardware_concurrency());
    return std::clamp(1 + load / cpus, 1.0, 4.0);
  }();
  return scale;
}
template <typename Duration>
std::chrono::milliseconds Scaled(Duration d) {
  return std::chrono::milliseconds(static_cast<int64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(d).count() * TimeScale()));
}

// Calls `done` every `poll` until it returns true or Scaled(`timeout`) has passed;
// returns its last answer. Every test that waits for another process to get somewhere
// waits through this, so a loaded machine stretches the wait instead of failing it.
template <typename Predicate, typename Duration>
bool WaitFor(Predicate done, Duration timeout, std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  const auto end = std::chrono::steady_clock::now() + Scaled(timeout);
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(poll);
  }
}

// Whether a test's agent waits for quiet CPUs before each measurement (the agent's
// default, --quiet-busy-pct 10, waiting up to 1 s and measuring again when disturbed).
// A test chooses: on a loaded machine the wait is what makes a test slow, so only the
// tests about measurement quality turn it on.
enum class QuietCheck { kOff, kOn };

// The command line of a tuneforge-agent in `bin_dir` serving `device_key` of the server
// at `address`, with the quiet check as chosen and `extra` flags.
inline std::vector<std::string> AgentArgv(const std::string& bin_dir, const std::string& address,
                                          const std::string& device_key, QuietCheck quiet,
                                          const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {bin_dir + "/tuneforge-agent", "--server", address, "--device-key",
                                   device_key};
  if (quiet == QuietCheck::kOff) {
    argv.push_back("--quiet-busy-pct");
    argv.push_back("0");
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

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
  // Waits up to `timeout` (times TimeScale()); returns the exit code, or -1 when still
  // running.
  int Wait(std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + Scaled(timeout);
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

// A tuneforge-server child: `bin_dir`'s tuneforge-server with --listen `listen` (a free
// loopback port unless a test restarts a server on its old port) --db `db` and `extra`
// flags, its output in `out_base`.out/.err; returns once it says it listens. Every
// test that runs a server process on the command line starts it here.
struct ServerProcess {
  std::unique_ptr<Process> process;
  std::string address;   // "127.0.0.1:PORT"; empty when it did not start in time
  int metrics_port = 0;  // with --metrics-listen in `extra`
};
inline ServerProcess StartServerProcess(const std::string& bin_dir, const std::string& db,
                                        const std::string& out_base,
                                        const std::vector<std::string>& extra = {},
                                        const std::string& listen = "127.0.0.1:0") {
  std::vector<std::string> argv = {bin_dir + "/tuneforge-server", "--listen", listen, "--db", db};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const bool metrics = std::find(extra.begin(), extra.end(), "--metrics-listen") != extra.end();
  ServerProcess server;
  server.process = std::make_unique<Process>(argv, out_base + ".out", out_base + ".err");
  WaitFor(
      [&] {
        if (!server.process->Running()) return true;
        const std::string out = server.process->Stdout();
        const size_t p = out.find("listening on port "), m = out.find("metrics on port ");
        const size_t last = metrics ? m : p;
        if (p == std::string::npos || last == std::string::npos || out.find('\n', last) == std::string::npos)
          return false;
        server.address = "127.0.0.1:" + std::to_string(std::stoi(out.substr(p + 18)));
        if (metrics) server.metrics_port = std::stoi(out.substr(m + 16));
        return true;
      },
      std::chrono::seconds(20));
  return server;
}

}  // namespace tuneforge::testing
