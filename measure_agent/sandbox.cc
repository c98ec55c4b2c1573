#include "measure_agent/sandbox.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/hash.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/runtime/timing.h"

namespace tuneforge::agent {

namespace {

using tuneforge::v1::MeasureErrorKind;
using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;

constexpr char kDirPrefix[] = "tuneforge-sandbox-";
constexpr char kKernelFile[] = "kernel.so";
constexpr char kRequestFile[] = "request.pb";
constexpr char kResultFile[] = "result.pb";
constexpr char kChildLogFile[] = "child.log";
constexpr size_t kBufferAlignment = 64;
constexpr size_t kLogTailChars = 600;
// 1 TiB of float32 per buffer: anything larger is a corrupt request, and the byte
// counts derived from it must not overflow.
constexpr int64_t kMaxBufferElements = int64_t{1} << 38;

using Clock = std::chrono::steady_clock;

int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ErrnoText(int err) { return std::strerror(err); }

// Short name of a signal, as users know them from shells and core dumps.
std::string SignalName(int sig) {
  static constexpr struct {
    int number;
    const char* name;
  } kNames[] = {{SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGABRT, "SIGABRT"},
                {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},   {SIGKILL, "SIGKILL"},
                {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGXCPU, "SIGXCPU"},
                {SIGXFSZ, "SIGXFSZ"}, {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
                {SIGPIPE, "SIGPIPE"}};
  for (const auto& entry : kNames) {
    if (entry.number == sig) return entry.name;
  }
  return absl::StrCat("signal ", sig);
}

std::string FormatFloat(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

absl::Status WriteFile(const std::string& path, std::string_view data, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", ErrnoText(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("write ", path, ": ", ErrnoText(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    return absl::InternalError(absl::StrCat("close ", path, ": ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("open ", path, ": ", ErrnoText(errno)));
  std::string data;
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return absl::InternalError(absl::StrCat("read ", path, ": ", ErrnoText(err)));
    }
    if (n == 0) break;
    data.append(chunk, static_cast<size_t>(n));
  }
  close(fd);
  return data;
}

// The last lines the child printed (an abort message, a sanitizer report), flattened
// to one line for an error message. Empty if it printed nothing.
std::string ChildLogTail(const std::string& dir) {
  absl::StatusOr<std::string> log = ReadFile(dir + "/" + kChildLogFile);
  if (!log.ok()) return "";
  std::string text = std::move(*log);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.size() > kLogTailChars) text = "..." + text.substr(text.size() - kLogTailChars);
  return absl::StrReplaceAll(text, {{"\n", " | "}});
}

// Removes the per-request directory however Run leaves.
class ScopedTempDir {
 public:
  static absl::StatusOr<ScopedTempDir> Create(const std::string& root) {
    // The agent's pid in the name lets RemoveStaleSandboxDirs find the directories
    // of an agent that was killed before it could clean up.
    std::string templ = absl::StrCat(root, "/", kDirPrefix, getpid(), "-XXXXXX");
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a sandbox directory under ", root, ": ", ErrnoText(errno)));
    }
    return ScopedTempDir(buf.data());
  }
  ScopedTempDir(ScopedTempDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  ScopedTempDir& operator=(ScopedTempDir&&) = delete;
  ~ScopedTempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) {
      TF_LOG(Warning) << "cannot remove sandbox directory " << path_ << ": " << ec.message();
    }
  }
  const std::string& path() const { return path_; }

 private:
  explicit ScopedTempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

std::string DefaultTempRoot() {
  const char* tmpdir = std::getenv("TMPDIR");
  return (tmpdir != nullptr && tmpdir[0] != '\0') ? tmpdir : "/tmp";
}

// Checks what the child relies on (one OUTPUT buffer, an expected output of its size),
// so that the child only meets failures of the kernel itself.
absl::Status ValidateRequest(const MeasureRequest& request) {
  if (request.entry_symbol().empty()) {
    return absl::InvalidArgumentError("request has no entry_symbol");
  }
  if (request.buffers_size() == 0) return absl::InvalidArgumentError("request has no buffers");
  int outputs = 0;
  int64_t output_elements = 0;
  for (const auto& b : request.buffers()) {
    if (b.num_elements() < 0 || b.num_elements() > kMaxBufferElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", b.name(), " has ", b.num_elements(), " elements"));
    }
    if (b.role() == tuneforge::v1::OUTPUT) {
      ++outputs;
      output_elements = b.num_elements();
    } else if (b.role() != tuneforge::v1::INPUT) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", b.name(), " has no role"));
    }
  }
  if (outputs != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("request has ", outputs, " OUTPUT buffers; exactly 1 is supported"));
  }
  const uint64_t expected_bytes = static_cast<uint64_t>(output_elements) * sizeof(float);
  if (request.expected_output().size() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("expected_output has ",
                                                   request.expected_output().size(),
                                                   " bytes, the OUTPUT buffer ", expected_bytes));
  }
  return absl::OkStatus();
}

int EffectiveTimeoutMs(const MeasureRequest& request, int default_timeout_ms) {
  int t = request.options().timeout_ms();
  return t > 0 ? t : default_timeout_ms;
}

// ----------------------------------------------------------------------------
// Parent side: process management.

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // Moves the descriptor to a number >= 3 (close-on-exec), so that the child's dup2
  // onto 0, 1 and 2 cannot clobber it even if the agent runs with a standard stream
  // closed.
  bool MoveAboveStandardStreams() {
    if (fd_ < 0 || fd_ > 2) return fd_ >= 0;
    int moved = fcntl(fd_, F_DUPFD_CLOEXEC, 3);
    Reset();
    fd_ = moved;
    return fd_ >= 0;
  }

 private:
  int fd_;
};

// Starts `binary --sandbox-run dir` with stdout/stderr going to dir/child.log.
// Returns once the exec has succeeded, or an error saying why it did not.
absl::StatusOr<pid_t> SpawnChild(const std::string& binary, const std::string& dir) {
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed, since the agent is multi-threaded.
  std::string flag = kSandboxRunFlag;
  std::string dir_arg = dir;
  std::string binary_arg = binary;
  char* argv[] = {binary_arg.data(), flag.data(), dir_arg.data(), nullptr};
  std::string log_path = dir + "/" + kChildLogFile;
  Fd log_fd(open(log_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  Fd null_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  // The child reports a failed exec through this pipe; a successful exec closes it
  // (O_CLOEXEC), which the parent reads as EOF.
  int pipe_fds[2] = {-1, -1};
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  Fd exec_error_read(pipe_fds[0]), exec_error_write(pipe_fds[1]);
  if (!log_fd.MoveAboveStandardStreams() || !null_fd.MoveAboveStandardStreams() ||
      !exec_error_write.MoveAboveStandardStreams()) {
    return absl::InternalError(
        absl::StrCat("cannot open the sandbox's files in ", dir, ": ", ErrnoText(errno)));
  }
  // The exec-error pipe becomes fd 3 in the child; everything above is closed.
  constexpr int kChildErrorFd = 3;
  const pid_t parent = getpid();
  sigset_t no_signals;
  sigemptyset(&no_signals);

  pid_t pid = fork();
  if (pid == 0) {
    // Own process group: a Ctrl-C meant for the agent does not kill the kernel, and a
    // timeout kills everything the kernel may have started.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the agent died before prctl took effect
    // The agent blocks SIGTERM/SIGINT for its signal thread; the child must not.
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    dup2(null_fd.get(), STDIN_FILENO);
    dup2(log_fd.get(), STDOUT_FILENO);
    dup2(log_fd.get(), STDERR_FILENO);
    if (exec_error_write.get() != kChildErrorFd) {
      dup2(exec_error_write.get(), kChildErrorFd);
      fcntl(kChildErrorFd, F_SETFD, FD_CLOEXEC);
    }
    // Close whatever the agent's libraries opened without O_CLOEXEC (sockets).
#ifdef SYS_close_range
    if (syscall(SYS_close_range, kChildErrorFd + 1u, ~0u, 0u) != 0)
#endif
    {
      for (int fd = kChildErrorFd + 1; fd < 4096; ++fd) close(fd);
    }
    execv(argv[0], argv);
    int err = errno;
    ssize_t ignored = write(kChildErrorFd, &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", ErrnoText(errno)));
  exec_error_write.Reset();
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_error_read.get(), &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return absl::InternalError(absl::StrCat("cannot exec ", binary, ": ", ErrnoText(exec_errno)));
  }
  return pid;
}

// Waits until `pid` has exited (without reaping it, so that its process group still
// exists) or `deadline` passes. Returns false on timeout.
bool WaitForExit(pid_t pid, Clock::time_point deadline) {
  auto exited = [pid] {
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    int rc = waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT);
    // rc < 0 means the child is gone or not ours: nothing left to wait for.
    return rc < 0 || info.si_pid == pid;
  };
#ifdef SYS_pidfd_open
  // A pidfd becomes readable when the process exits: no polling while the kernel is
  // being timed, so the agent adds no wake-ups to the measurement.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    bool done = false;
    for (;;) {
      if (exited()) {
        done = true;
        break;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      struct pollfd p = {pidfd, POLLIN, 0};
      int timeout = static_cast<int>(std::min<int64_t>(left.count() + 1, 60'000));
      int rc = poll(&p, 1, timeout);
      if (rc < 0 && errno != EINTR) break;  // fall through to the polling loop below
    }
    close(pidfd);
    if (done) return true;
    if (Clock::now() >= deadline) return false;
  }
#endif
  // Fallback for kernels without pidfd_open (Linux < 5.3).
  for (;;) {
    if (exited()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void SetError(MeasureResult* result, MeasureErrorKind kind, std::string message) {
  result->clear_costs();
  result->set_error(kind);
  result->set_error_message(std::move(message));
}

std::string WithLog(std::string message, const std::string& dir) {
  std::string tail = ChildLogTail(dir);
  if (!tail.empty()) absl::StrAppend(&message, "; child output: ", tail);
  return message;
}

// Runs the child for one prepared directory and fills `result` from its outcome.
void RunChild(const std::string& binary, const std::string& dir, int timeout_ms,
              MeasureResult* result) {
  Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  absl::StatusOr<pid_t> pid = SpawnChild(binary, dir);
  if (!pid.ok()) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("cannot start sandbox process: ", pid.status().message()));
    return;
  }
  const bool timed_out = !WaitForExit(*pid, deadline);
  // Kill the whole group: on timeout the kernel, and in any case whatever the kernel
  // may have forked. The child is not reaped yet, so its group id is still ours.
  kill(-*pid, SIGKILL);
  if (timed_out) kill(*pid, SIGKILL);  // in case it had not reached setpgid yet
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }

  if (timed_out) {
    SetError(
        result, tuneforge::v1::RUN_TIMEOUT,
        absl::StrCat("kernel did not finish within the timeout of ", timeout_ms, " ms; killed"));
    return;
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    if (sig == SIGXCPU) {
      SetError(result, tuneforge::v1::RUN_TIMEOUT,
               WithLog(absl::StrCat("kernel exceeded its CPU time limit (", SignalName(sig),
                                    ") within the timeout of ", timeout_ms, " ms"),
                       dir));
    } else {
      SetError(result, tuneforge::v1::RUNTIME_ERROR,
               WithLog(absl::StrCat("kernel process killed by ", SignalName(sig), " (",
                                    strsignal(sig), ")"),
                       dir));
    }
    return;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // The child writes result.pb atomically (rename), so a present file is complete. A
  // result is trusted even after a non-zero exit: the kernel may have called exit().
  MeasureResult child;
  absl::StatusOr<std::string> bytes = ReadFile(dir + "/" + kResultFile);
  if (bytes.ok() && child.ParseFromString(*bytes)) {
    // Only the measurement comes from the child; identity fields are the parent's.
    *result->mutable_costs() = child.costs();
    result->set_error(child.error());
    result->set_error_message(child.error_message());
    if (code != 0 && child.error() == tuneforge::v1::NONE) {
      SetError(
          result, tuneforge::v1::RUNTIME_ERROR,
          WithLog(absl::StrCat("kernel process exited with code ", code, " after measuring"), dir));
    }
    return;
  }
  SetError(
      result, tuneforge::v1::RUNTIME_ERROR,
      WithLog(absl::StrCat("kernel process exited with code ", code, " without a result"), dir));
}

// ----------------------------------------------------------------------------
// Child side.

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float, FreeDeleter>;

absl::StatusOr<AlignedFloats> AllocateAligned(int64_t num_elements) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(num_elements, 1)) * sizeof(float);
  bytes = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  void* p = std::aligned_alloc(kBufferAlignment, bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  return AlignedFloats(static_cast<float*>(p));
}

int64_t TotalBufferBytes(const MeasureRequest& request) {
  int64_t total = 0;
  for (const auto& b : request.buffers()) total += b.num_elements() * int64_t{sizeof(float)};
  return total;
}

absl::Status LowerLimit(int resource, const char* name, rlim_t soft, rlim_t hard) {
  struct rlimit current;
  if (getrlimit(resource, &current) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit ", name, ": ", ErrnoText(errno)));
  }
  // Never raise a limit the operator set lower.
  struct rlimit wanted;
  wanted.rlim_max = std::min(current.rlim_max, hard);
  wanted.rlim_cur = std::min(wanted.rlim_max, std::min(current.rlim_cur, soft));
  if (setrlimit(resource, &wanted) != 0) {
    return absl::InternalError(absl::StrCat("setrlimit ", name, ": ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

// Backstops that hold even if the parent is gone: the parent's wall-clock timeout is
// what normally stops a kernel.
absl::Status SetChildLimits(const MeasureRequest& request) {
  RETURN_IF_ERROR(LowerLimit(RLIMIT_CORE, "RLIMIT_CORE", 0, 0));

  long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  // CPU time counts every thread, so a parallel kernel burns `cpus` CPU seconds per
  // wall second; the limit must not fire before the wall-clock timeout does.
  double timeout_s = request.options().timeout_ms() / 1e3;
  rlim_t cpu_s = static_cast<rlim_t>(std::ceil(timeout_s * static_cast<double>(cpus))) + 2;
  RETURN_IF_ERROR(LowerLimit(RLIMIT_CPU, "RLIMIT_CPU", cpu_s, cpu_s + 2));

  // Address space, not resident memory: the process maps the agent's shared libraries,
  // a stack and a malloc arena per runtime thread, and the cache-flush buffer besides
  // the kernel's buffers (and the copy of the expected output).
  const rlim_t kGiB = rlim_t{1} << 30;
  rlim_t as = kGiB + 2 * static_cast<rlim_t>(TotalBufferBytes(request)) +
              static_cast<rlim_t>(runtime::kFlushBytes) + static_cast<rlim_t>(cpus) * (rlim_t{80} << 20);
  RETURN_IF_ERROR(LowerLimit(RLIMIT_AS, "RLIMIT_AS", as, as));
  return absl::OkStatus();
}

std::string DlopenHint(const std::string& error) {
  if (error.find("failed to map segment") != std::string::npos) {
    return " (is the sandbox directory on a noexec mount? choose another with --temp-dir)";
  }
  return "";
}

// Loads, checks and times the kernel; every failure is recorded in `result`.
void MeasureInChild(const std::string& dir, const MeasureRequest& request,
                    Clock::time_point child_start, MeasureResult* result) {
  result->set_request_id(request.request_id());
  absl::Status limits = SetChildLimits(request);
  if (!limits.ok()) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("cannot set resource limits: ", limits.message()));
    return;
  }
  // Kernels leave tf_parallel_for undefined and resolve it against this process
  // (tuneforge_runtime's link options export it from every executable). Say so
  // plainly rather than let every kernel fail with a dlopen error.
  if (dlsym(RTLD_DEFAULT, "tf_parallel_for") == nullptr) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             "the sandbox binary does not export tf_parallel_for (link it with "
             "tuneforge_runtime); kernels cannot be loaded");
    return;
  }

  std::string path = dir + "/" + kKernelFile;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::string error = dlerror();
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("dlopen failed: ", error, DlopenHint(error)));
    return;
  }
  dlerror();
  void* symbol = dlsym(handle, request.entry_symbol().c_str());
  if (symbol == nullptr) {
    const char* error = dlerror();
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("dlsym(", request.entry_symbol(),
                          ") failed: ", error != nullptr ? error : "symbol is null"));
    return;
  }
  auto entry = reinterpret_cast<runtime::KernelEntry>(symbol);

  // Inputs get FillBuffer(seed, i) for their index i in the request, exactly as the
  // server did when it computed expected_output. The output starts as NaN, so a
  // kernel that writes nothing cannot pass the check.
  std::vector<AlignedFloats> storage;
  std::vector<void*> args;
  const float* output = nullptr;
  int64_t output_elements = 0;
  std::string output_name;
  for (int i = 0; i < request.buffers_size(); ++i) {
    const auto& spec = request.buffers(i);
    absl::StatusOr<AlignedFloats> buffer = AllocateAligned(spec.num_elements());
    if (!buffer.ok()) {
      SetError(result, tuneforge::v1::RUNTIME_ERROR,
               absl::StrCat("buffer ", spec.name(), ": ", buffer.status().message()));
      return;
    }
    float* data = buffer->get();
    if (spec.role() == tuneforge::v1::OUTPUT) {
      std::fill(data, data + spec.num_elements(), std::numeric_limits<float>::quiet_NaN());
      output = data;
      output_elements = spec.num_elements();
      output_name = spec.name();
    } else {
      runtime::FillBuffer(request.seed(), i, data, spec.num_elements());
    }
    args.push_back(data);
    storage.push_back(std::move(*buffer));
  }
  TF_CHECK(output != nullptr, "ValidateRequest guarantees one OUTPUT buffer");
  absl::StatusOr<AlignedFloats> expected = AllocateAligned(output_elements);
  if (!expected.ok()) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("expected output: ", expected.status().message()));
    return;
  }
  // The wire format is float32 little-endian, the layout of every host we support.
  std::memcpy(expected->get(), request.expected_output().data(), request.expected_output().size());

  // The output layout transform (blocked -> the task's layout) runs before each
  // check, untimed.
  runtime::KernelEntry unpack = nullptr;
  if (!request.unpack_symbol().empty()) {
    unpack = reinterpret_cast<runtime::KernelEntry>(dlsym(handle, request.unpack_symbol().c_str()));
    if (unpack == nullptr) {
      SetError(result, tuneforge::v1::RUNTIME_ERROR,
               absl::StrCat("dlsym(", request.unpack_symbol(), ") failed"));
      return;
    }
  }
  auto check_output = [&](const char* when) {
    if (unpack != nullptr && unpack(args.data()) != 0) {
      SetError(result, tuneforge::v1::RUNTIME_ERROR, absl::StrCat(when, "unpack entry failed"));
      return false;
    }
    int64_t bad = runtime::FirstMismatch(output, expected->get(), output_elements, request.atol(),
                                         request.rtol());
    if (bad < 0) return true;
    SetError(
        result, tuneforge::v1::WRONG_ANSWER,
        absl::StrCat(when, output_name, "[", bad, "] = ", FormatFloat(output[bad]), ", expected ",
                     FormatFloat(expected->get()[bad]), " (atol ", FormatFloat(request.atol()),
                     ", rtol ", FormatFloat(request.rtol()), ")"));
    return false;
  };

  // Prepacked buffers (constant weights in the kernel's layout) are filled once, here,
  // outside the timed region: what an inference runtime does once per model.
  if (!request.prepack_symbol().empty()) {
    void* prepack = dlsym(handle, request.prepack_symbol().c_str());
    if (prepack == nullptr) {
      SetError(result, tuneforge::v1::RUNTIME_ERROR,
               absl::StrCat("dlsym(", request.prepack_symbol(), ") failed"));
      return;
    }
    int32_t prepack_rc = reinterpret_cast<runtime::KernelEntry>(prepack)(args.data());
    if (prepack_rc != 0) {
      SetError(result, tuneforge::v1::RUNTIME_ERROR,
               absl::StrCat("prepack entry returned ", prepack_rc));
      return;
    }
  }
  int32_t rc = entry(args.data());
  if (rc != 0) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR, absl::StrCat("kernel entry returned ", rc));
    return;
  }
  if (!check_output("")) return;

  runtime::TimingOptions timing_options;
  timing_options.warmup = request.options().warmup();
  timing_options.number = request.options().number();
  timing_options.repeat = request.options().repeat();
  timing_options.min_repeat_ms = request.options().min_repeat_ms();
  timing_options.flush_cache = request.options().flush_cache();
  // Leave a fifth of the timeout for process start-up, the checks and reporting.
  double elapsed = std::chrono::duration<double>(Clock::now() - child_start).count();
  timing_options.budget_seconds =
      std::max(1e-3, 0.8 * request.options().timeout_ms() / 1e3 - elapsed);
  absl::StatusOr<runtime::Timing> timing = runtime::TimeKernel(entry, args.data(), timing_options);
  if (!timing.ok()) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR, std::string(timing.status().message()));
    return;
  }
  // A kernel with a data race, or one that accumulates into its output, can pass the
  // first run and go wrong on later ones.
  if (!check_output("after the timed runs: ")) return;

  result->set_error(tuneforge::v1::NONE);
  result->clear_error_message();
  for (double c : timing->costs) result->add_costs(c);
}

}  // namespace

int RemoveStaleSandboxDirs(const std::string& temp_root) {
  const std::string root = temp_root.empty() ? DefaultTempRoot() : temp_root;
  const std::string prefix = kDirPrefix;
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // Parse "<pid>-XXXXXX"; directories of other formats are not ours.
    size_t dash = name.find('-', prefix.size());
    int pid = 0;
    if (dash == std::string::npos ||
        !absl::SimpleAtoi(name.substr(prefix.size(), dash - prefix.size()), &pid) || pid <= 0) {
      continue;
    }
    // Alive (or not ours to signal, EPERM): keep. Only a vanished pid means stale.
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code remove_ec;
    std::filesystem::remove_all(entry.path(), remove_ec);
    if (!remove_ec) ++removed;
  }
  return removed;
}

Sandbox::Sandbox(SandboxOptions options) : options_(std::move(options)) {
  if (options_.temp_root.empty()) options_.temp_root = DefaultTempRoot();
  TF_CHECK(options_.default_timeout_ms > 0);
}

MeasureResult Sandbox::Run(const MeasureRequest& request) const {
  MeasureResult result;
  result.set_request_id(request.request_id());
  result.set_agent_id(options_.agent_id);
  result.set_environment_json(options_.environment_json);
  result.set_start_unix_us(NowUnixUs());

  auto finish = [&result] {
    result.set_end_unix_us(NowUnixUs());
    return std::move(result);
  };

  // Never load bytes that are not the artifact the server built.
  std::string actual_hash = HashHex(request.artifact());
  if (actual_hash != request.artifact_hash()) {
    SetError(&result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("artifact hash mismatch: request says '", request.artifact_hash(),
                          "', artifact bytes hash to '", actual_hash, "'; not loaded"));
    return finish();
  }
  absl::Status valid = ValidateRequest(request);
  if (!valid.ok()) {
    SetError(&result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("invalid MeasureRequest: ", valid.message()));
    return finish();
  }

  absl::StatusOr<ScopedTempDir> dir = ScopedTempDir::Create(options_.temp_root);
  if (!dir.ok()) {
    SetError(&result, tuneforge::v1::RUNTIME_ERROR, std::string(dir.status().message()));
    return finish();
  }
  const int timeout_ms = EffectiveTimeoutMs(request, options_.default_timeout_ms);
  // The child gets everything but the artifact, which it maps from kernel.so.
  MeasureRequest for_child = request;
  for_child.clear_artifact();
  for_child.mutable_options()->set_timeout_ms(timeout_ms);
  std::string serialized;
  TF_CHECK(for_child.SerializeToString(&serialized));
  absl::Status written = WriteFile(dir->path() + "/" + kKernelFile, request.artifact(), 0700);
  if (written.ok()) written = WriteFile(dir->path() + "/" + kRequestFile, serialized, 0600);
  if (!written.ok()) {
    SetError(&result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("cannot prepare sandbox: ", written.message()));
    return finish();
  }

  RunChild(options_.agent_binary, dir->path(), timeout_ms, &result);
  TF_LOG(Debug) << "request " << request.request_id() << ": "
                << tuneforge::v1::MeasureErrorKind_Name(result.error()) << " "
                << result.error_message();
  return finish();
}

int RunSandboxChild(const std::string& dir) {
  Clock::time_point start = Clock::now();
  absl::StatusOr<std::string> bytes = ReadFile(dir + "/" + kRequestFile);
  MeasureRequest request;
  if (!bytes.ok() || !request.ParseFromString(*bytes)) {
    std::fprintf(stderr, "sandbox: cannot read the request in %s: %s\n", dir.c_str(),
                 bytes.ok() ? "parse error" : std::string(bytes.status().message()).c_str());
    return 3;
  }
  MeasureResult result;
  MeasureInChild(dir, request, start, &result);

  std::string out;
  TF_CHECK(result.SerializeToString(&out));
  // Write then rename, so the parent never reads half a result.
  std::string tmp = dir + "/" + kResultFile + ".tmp";
  absl::Status written = WriteFile(tmp, out, 0600);
  if (!written.ok() || rename(tmp.c_str(), (dir + "/" + kResultFile).c_str()) != 0) {
    std::fprintf(stderr, "sandbox: cannot write the result: %s\n",
                 written.ok() ? ErrnoText(errno).c_str() : std::string(written.message()).c_str());
    return 4;
  }
  return 0;
}

}  // namespace tuneforge::agent
