// The sandbox child: one MeasureRequest run in a confined process.
#include "measure_agent/sandbox.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "compiler/runtime/runtime.h"
#include "compiler/support/hash.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/runtime/timing.h"
#include "measure_agent/confine.h"

namespace tuneforge::agent {

namespace {

using tuneforge::v1::MeasureErrorKind;
using tuneforge::v1::MeasureRequest;
using tuneforge::v1::MeasureResult;

constexpr char kDirPrefix[] = "tuneforge-sandbox-";
constexpr char kKernelFile[] = "kernel.so";
constexpr char kRequestFile[] = "request.pb";
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

}  // namespace

// Checks what the child relies on (one OUTPUT buffer, an expected output of its size),
// so that the child only meets failures of the kernel itself.
runtime::ElementType ElementTypeOf(const tuneforge::v1::BufferSpec& buffer) {
  return static_cast<runtime::ElementType>(buffer.element_type());
}

runtime::FillSpec FillOf(const tuneforge::v1::BufferSpec& buffer) {
  const runtime::ElementType type = ElementTypeOf(buffer);
  if (buffer.fill_low() == 0 && buffer.fill_high() == 0) return runtime::DefaultFill(type);
  return runtime::FillSpec{type, buffer.fill_low(), buffer.fill_high()};
}

absl::Status ValidateMeasureRequest(const MeasureRequest& request) {
  if (request.entry_symbol().empty()) {
    return absl::InvalidArgumentError("request has no entry_symbol");
  }
  if (request.buffers_size() == 0) return absl::InvalidArgumentError("request has no buffers");
  int outputs = 0;
  int64_t output_elements = 0;
  int output_bytes = 4;
  for (const auto& b : request.buffers()) {
    if (b.num_elements() < 0 || b.num_elements() > kMaxBufferElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", b.name(), " has ", b.num_elements(), " elements"));
    }
    if (!runtime::IsKnownElementType(b.element_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", b.name(), " has an unknown element type ", b.element_type()));
    }
    if (b.role() == tuneforge::v1::INPUT) {
      const std::string bad_fill = runtime::CheckFill(FillOf(b));
      if (!bad_fill.empty()) return absl::InvalidArgumentError(absl::StrCat("buffer ", b.name(), ": ", bad_fill));
    }
    if (b.role() == tuneforge::v1::OUTPUT) {
      ++outputs;
      output_elements = b.num_elements();
      output_bytes = runtime::ElementBytes(ElementTypeOf(b));
    } else if (b.role() != tuneforge::v1::INPUT && b.role() != tuneforge::v1::INTERNAL) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", b.name(), " has no role"));
    }
  }
  if (outputs != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("request has ", outputs, " OUTPUT buffers; exactly 1 is supported"));
  }
  const uint64_t expected_bytes = static_cast<uint64_t>(output_elements) * static_cast<uint64_t>(output_bytes);
  if (request.expected_output().size() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("expected_output has ",
                                                   request.expected_output().size(),
                                                   " bytes, the OUTPUT buffer ", expected_bytes));
  }
  const size_t alternate_bytes = request.alternate_expected_output().size();
  if (alternate_bytes != 0 && alternate_bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("alternate_expected_output has ", alternate_bytes,
                                                   " bytes, the OUTPUT buffer ", expected_bytes));
  }
  if (alternate_bytes != 0 && request.alternate_seed() == request.seed()) {
    return absl::InvalidArgumentError("alternate_seed is the seed: the two input sets must differ");
  }
  return absl::OkStatus();
}

namespace {

int EffectiveTimeoutMs(const MeasureRequest& request, int default_timeout_ms) {
  int t = request.options().timeout_ms();
  return t > 0 ? t : default_timeout_ms;
}

// ----------------------------------------------------------------------------
// Shared by both sides: where the buffers are in the shared region, and the
// protocol on the control socket.

// The buffers live in one memfd that both processes map. A guard page precedes the
// first buffer and follows every buffer, whose end (rounded up to 64 bytes) is the
// end of its last page: the child maps the guard pages PROT_NONE, so a write past a
// buffer's end, or before the first, faults. Starts stay 64-byte aligned.
struct BufferLayout {
  std::vector<size_t> offsets;  // first byte of each buffer
  std::vector<size_t> guards;   // first byte of each guard page
  size_t page = 0;
  size_t total = 0;
};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

BufferLayout LayoutBuffers(const MeasureRequest& request) {
  BufferLayout layout;
  layout.page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t pos = 0;
  layout.guards.push_back(pos);
  pos += layout.page;
  for (const auto& b : request.buffers()) {
    size_t bytes = static_cast<size_t>(std::max<int64_t>(b.num_elements(), 1)) *
                   static_cast<size_t>(runtime::ElementBytes(ElementTypeOf(b)));
    size_t padded = RoundUp(bytes, kBufferAlignment);
    size_t span = RoundUp(padded, layout.page);
    layout.offsets.push_back(pos + span - padded);
    pos += span;
    layout.guards.push_back(pos);
    pos += layout.page;
  }
  layout.total = pos;
  return layout;
}

// The child's descriptors: 3 reports a failed exec, 4 is the buffers' memfd, 5 the
// control socket.
constexpr int kExecErrorFd = 3;
constexpr int kBuffersFd = 4;
constexpr int kControlFd = 5;

// Parent -> child. The child answers every command, and its start, with a Reply.
enum class Op : uint32_t { kRun = 1, kPrepack = 2, kUnpack = 3, kFlush = 4, kQuit = 5 };
struct Command {
  Op op;
  uint32_t unused;
  int64_t count;  // kRun: back-to-back runs of the entry point
};
// Child -> parent, followed by `message_bytes` of text (the error, or for the start
// reply the confinement that is in force).
struct ReplyHeader {
  int32_t ok;
  uint32_t message_bytes;
};
constexpr uint32_t kMaxReplyMessage = 4096;

bool SendAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
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
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // Moves the descriptor to a number above the ones the child's are dup2'ed onto
  // (close-on-exec), so that no dup2 in the child can clobber it even if the agent
  // runs with a standard stream closed.
  bool MoveAboveChildFds() {
    if (fd_ < 0 || fd_ > kControlFd) return fd_ >= 0;
    int moved = fcntl(fd_, F_DUPFD_CLOEXEC, kControlFd + 1);
    Reset();
    fd_ = moved;
    return fd_ >= 0;
  }

 private:
  int fd_;
};

// Starts `binary --sandbox-run dir` with stdout/stderr going to dir/child.log and
// `buffers_fd` and `control_fd` as its descriptors 4 and 5. Returns once the exec
// has succeeded, or an error saying why it did not.
absl::StatusOr<pid_t> SpawnChild(const std::string& binary, const std::string& dir,
                                 int buffers_fd, int control_fd,
                                 const std::vector<int>& pin_cpus) {
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed, since the agent is multi-threaded.
  std::string flag = kSandboxRunFlag;
  std::string dir_arg = dir;
  std::string binary_arg = binary;
  std::string pin_flag = kPinThreadsFlag;
  char* argv[] = {binary_arg.data(), flag.data(), dir_arg.data(),
                  pin_cpus.empty() ? nullptr : pin_flag.data(), nullptr};
  cpu_set_t pin_set;
  CPU_ZERO(&pin_set);
  for (int cpu : pin_cpus) CPU_SET(cpu, &pin_set);
  std::string log_path = dir + "/" + kChildLogFile;
  Fd log_fd(open(log_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  Fd null_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  Fd buffers(fcntl(buffers_fd, F_DUPFD_CLOEXEC, 0));
  Fd control(fcntl(control_fd, F_DUPFD_CLOEXEC, 0));
  // The child reports a failed exec through this pipe; a successful exec closes it
  // (O_CLOEXEC), which the parent reads as EOF.
  int pipe_fds[2] = {-1, -1};
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", ErrnoText(errno)));
  }
  Fd exec_error_read(pipe_fds[0]), exec_error_write(pipe_fds[1]);
  if (!log_fd.MoveAboveChildFds() || !null_fd.MoveAboveChildFds() ||
      !exec_error_write.MoveAboveChildFds() || !buffers.MoveAboveChildFds() ||
      !control.MoveAboveChildFds()) {
    return absl::InternalError(
        absl::StrCat("cannot open the sandbox's files in ", dir, ": ", ErrnoText(errno)));
  }
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
    // Pinned before exec: the kernel's every thread inherits the set.
    if (!pin_cpus.empty() && sched_setaffinity(0, sizeof(pin_set), &pin_set) != 0) _exit(126);
    dup2(null_fd.get(), STDIN_FILENO);
    dup2(log_fd.get(), STDOUT_FILENO);
    dup2(log_fd.get(), STDERR_FILENO);
    // dup2 clears close-on-exec on the copies, except the exec-error pipe's.
    dup2(exec_error_write.get(), kExecErrorFd);
    fcntl(kExecErrorFd, F_SETFD, FD_CLOEXEC);
    dup2(buffers.get(), kBuffersFd);
    dup2(control.get(), kControlFd);
    // Close whatever the agent's libraries opened without O_CLOEXEC (sockets).
#ifdef SYS_close_range
    if (syscall(SYS_close_range, kControlFd + 1u, ~0u, 0u) != 0)
#endif
    {
      for (int fd = kControlFd + 1; fd < 4096; ++fd) close(fd);
    }
    execv(argv[0], argv);
    int err = errno;
    ssize_t ignored = write(kExecErrorFd, &err, sizeof(err));
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


// The buffers' memfd, mapped in the parent (without guard pages: the parent writes
// only inside buffers).
class SharedRegion {
 public:
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t bytes) {
    Fd fd(static_cast<int>(syscall(SYS_memfd_create, "tuneforge-buffers", MFD_CLOEXEC)));
    if (fd.get() < 0) return absl::InternalError(absl::StrCat("memfd_create: ", ErrnoText(errno)));
    if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot size the buffers to ", bytes, " bytes: ", ErrnoText(errno)));
    }
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map ", bytes, " bytes of buffers: ", ErrnoText(errno)));
    }
    return std::unique_ptr<SharedRegion>(new SharedRegion(fd.Release(), base, bytes));
  }
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion() { munmap(base_, bytes_); }

  int fd() const { return fd_.get(); }
  void* At(size_t offset) const { return static_cast<char*>(base_) + offset; }

 private:
  SharedRegion(int fd, void* base, size_t bytes) : fd_(fd), base_(base), bytes_(bytes) {}
  Fd fd_;
  void* base_;
  size_t bytes_;
};

// One request's conversation with its child, and the verdict the parent reaches:
// the child runs the kernel when told to; whether it was right, and how long it
// took, the parent decides from the shared buffers and its own clock.
class ChildMeasurement {
 public:
  ChildMeasurement(const MeasureRequest& request, const BufferLayout& layout,
                   const SharedRegion& region, int control_fd, Clock::time_point deadline)
      : request_(request), layout_(layout), region_(region), control_fd_(control_fd),
        deadline_(deadline) {
    for (int i = 0; i < request.buffers_size(); ++i) {
      if (request.buffers(i).role() == tuneforge::v1::OUTPUT) output_index_ = i;
    }
    // The wire format is little-endian, the layout of every host we support; the
    // proto's bytes need not be aligned, so the check compares against a copy.
    for (int set = 0; set < 2; ++set) {
      const std::string& bytes = set == 0 ? request.expected_output() : request.alternate_expected_output();
      expected_[set].resize((bytes.size() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
      if (!bytes.empty()) std::memcpy(expected_[set].data(), bytes.data(), bytes.size());
    }
    output_type_ = ElementTypeOf(request.buffers(output_index_));
    seeds_ = {request.seed(), request.alternate_seed()};
  }

  // Whether the conversation ended because the child died or ran out of time: then
  // the verdict comes from how the process ended (ClassifyExit), not from here.
  bool child_gone() const { return gone_; }
  bool timed_out() const { return timed_out_; }
  MeasureErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }

  // Fills the inputs of input set 0 (FillBuffer, as the server did for the expected
  // output) and poisons the output with NaN: a kernel that writes nothing cannot pass.
  void PrepareBuffers() {
    FillInputs(0);
    PoisonOutput();
  }

  // Switches to the other input set, when the request has two: refills the inputs and
  // re-runs the prepack (weights are inputs too), outside any timed region, after
  // checking that the kernel left the inputs alone. A kernel that replays an output it
  // computed before then fails the next check.
  bool SwitchInputSet() {
    if (expected_[1].empty()) return true;
    if (!CheckInputsUnchanged()) return false;  // before the refill hides a write
    FillInputs(1 - set_);
    return request_.prepack_symbol().empty() || Call(Op::kPrepack);
  }

  void PoisonOutput() {
    runtime::PoisonBuffer(output_type_, Buffer(output_index_), request_.buffers(output_index_).num_elements());
  }

  // Waits for the child's start reply; `description` gets what it said.
  bool WaitReady(std::string* description) { return Receive(description); }

  // Sends a command and waits for the child's reply. False: see kind()/message(),
  // or child_gone()/timed_out().
  bool Call(Op op, int64_t count = 0) {
    Command command{op, 0, count};
    if (!SendAll(control_fd_, &command, sizeof(command))) {
      gone_ = true;
      return false;
    }
    std::string text;
    return Receive(&text);
  }

  // The output as the task lays it out (after the unpack entry, when there is one),
  // against the expected output.
  bool CheckOutput(const char* when) {
    if (!request_.unpack_symbol().empty() && !Call(Op::kUnpack)) return false;
    const void* out = Buffer(output_index_);
    const void* want = expected_[set_].data();
    const int64_t n = request_.buffers(output_index_).num_elements();
    int64_t bad = runtime::FirstMismatch(output_type_, out, want, n, request_.atol(), request_.rtol());
    if (bad < 0) return true;
    Fail(tuneforge::v1::WRONG_ANSWER,
         absl::StrCat(when, set_ == 1 ? "on the second input set: " : "",
                      request_.buffers(output_index_).name(), "[", bad, "] = ",
                      FormatFloat(runtime::ElementAt(output_type_, out, bad)), ", expected ",
                      FormatFloat(runtime::ElementAt(output_type_, want, bad)),
                      " (atol ", FormatFloat(request_.atol()), ", rtol ",
                      FormatFloat(request_.rtol()), ")"));
    return false;
  }

  // The inputs must be exactly what PrepareBuffers wrote: a kernel that writes into
  // an input computes something else than the task the next time it runs.
  bool CheckInputsUnchanged() {
    for (int i = 0; i < request_.buffers_size(); ++i) {
      const auto& spec = request_.buffers(i);
      if (spec.role() != tuneforge::v1::INPUT) continue;
      const runtime::ElementType type = ElementTypeOf(spec);
      const size_t element = static_cast<size_t>(runtime::ElementBytes(type));
      const size_t n = static_cast<size_t>(spec.num_elements());
      std::vector<char> original(n * element);
      runtime::FillBuffer(seeds_[set_], i, FillOf(spec), original.data(), spec.num_elements());
      const char* now = static_cast<const char*>(Buffer(i));
      if (std::memcmp(now, original.data(), original.size()) == 0) continue;
      size_t j = 0;
      while (j < n && std::memcmp(now + j * element, &original[j * element], element) == 0) ++j;
      const auto at = static_cast<int64_t>(j);
      Fail(tuneforge::v1::WRONG_ANSWER,
           absl::StrCat("the kernel wrote into its input ", spec.name(), ": ", spec.name(), "[", j,
                        "] = ", FormatFloat(runtime::ElementAt(type, now, at)), ", was ",
                        FormatFloat(runtime::ElementAt(type, original.data(), at))));
      return false;
    }
    return true;
  }

  void Fail(MeasureErrorKind kind, std::string message) {
    if (kind_ != tuneforge::v1::NONE) return;  // the first failure is the verdict
    kind_ = kind;
    message_ = std::move(message);
  }

 private:
  void* Buffer(int i) const { return region_.At(layout_.offsets[static_cast<size_t>(i)]); }

  void FillInputs(int set) {
    set_ = set;
    for (int i = 0; i < request_.buffers_size(); ++i) {
      const auto& spec = request_.buffers(i);
      if (spec.role() == tuneforge::v1::INPUT) {
        runtime::FillBuffer(seeds_[set_], i, FillOf(spec), Buffer(i), spec.num_elements());
      }
    }
  }


  // Reads one reply before the deadline.
  bool Receive(std::string* text) {
    ReplyHeader header{};
    if (!ReadExactly(&header, sizeof(header))) return false;
    if (header.message_bytes > kMaxReplyMessage) {
      Fail(tuneforge::v1::RUNTIME_ERROR, "the sandbox child sent a malformed reply");
      return false;
    }
    text->assign(header.message_bytes, '\0');
    if (header.message_bytes > 0 && !ReadExactly(text->data(), header.message_bytes)) return false;
    if (header.ok == 1) return true;
    Fail(tuneforge::v1::RUNTIME_ERROR, *text);
    return false;
  }

  bool ReadExactly(void* data, size_t size) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      struct pollfd pfd = {control_fd_, POLLIN, 0};
      int rc = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 60'000)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) continue;  // the deadline check above decides
      ssize_t n = rc < 0 ? -1 : recv(control_fd_, p, size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        gone_ = true;
        return false;
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }

  const MeasureRequest& request_;
  const BufferLayout& layout_;
  const SharedRegion& region_;
  const int control_fd_;
  const Clock::time_point deadline_;
  int output_index_ = 0;
  // The expected outputs of the two input sets (the second empty when the request
  // has one set), their seeds, and the set the buffers hold now.
  // The expected outputs' bytes (8-byte aligned copies), and their element type.
  std::array<std::vector<uint64_t>, 2> expected_;
  runtime::ElementType output_type_ = runtime::ElementType::kFloat32;
  std::array<uint64_t, 2> seeds_{};
  int set_ = 0;
  bool gone_ = false;
  bool timed_out_ = false;
  MeasureErrorKind kind_ = tuneforge::v1::NONE;
  std::string message_;
};

// The measurement protocol with the child running the kernel and the parent holding
// the clock. A sample is one kRun round trip, timed whole; `overhead_seconds()` is the
// round trip of an empty one, the fastest of those before and between the samples, for
// the caller to subtract (SubtractRoundTrip).
class ChildRunner : public runtime::SampleRunner {
 public:
  ChildRunner(ChildMeasurement* m, double overhead_seconds)
      : m_(m), overhead_seconds_(overhead_seconds) {}

  absl::Status Warmup(int runs) override { return Ok(runs <= 0 || m_->Call(Op::kRun, runs)); }
  absl::Status Flush() override { return Ok(m_->Call(Op::kFlush)); }
  absl::StatusOr<double> Sample(int64_t number) override {
    // An empty round trip first: on a busy machine the ones before the samples can all
    // have waited for a CPU, and the fastest of all of them is the closest to the cost.
    Clock::time_point start = Clock::now();
    if (!m_->Call(Op::kRun, 0)) return Stopped();
    overhead_seconds_ = std::min(overhead_seconds_, std::chrono::duration<double>(Clock::now() - start).count());
    start = Clock::now();
    if (!m_->Call(Op::kRun, number)) return Stopped();
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  double overhead_seconds() const { return overhead_seconds_; }
  // Every timed sample must compute the output afresh, from inputs that differ from
  // the previous sample's when the request has two input sets.
  absl::Status BeforeTimedSample() override {
    if (!m_->SwitchInputSet()) return Stopped();
    m_->PoisonOutput();
    return absl::OkStatus();
  }
  absl::Status AfterTimedSample() override {
    return Ok(m_->CheckOutput("after the timed runs: "));
  }

 private:
  // The verdict is in the ChildMeasurement; the status only stops the protocol.
  static absl::Status Stopped() { return absl::AbortedError("measurement stopped"); }
  static absl::Status Ok(bool ok) { return ok ? absl::OkStatus() : Stopped(); }
  ChildMeasurement* m_;
  double overhead_seconds_;
};

// The verdict when the child died or ran out of time: from how the process ended.
void ClassifyExit(int status, bool timed_out, int timeout_ms, const std::string& dir,
                  MeasureResult* result) {
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
    } else if (sig == SIGSYS) {
      SetError(result, tuneforge::v1::RUNTIME_ERROR,
               WithLog("kernel process killed by SIGSYS: it made a system call the sandbox "
                       "forbids (sockets, new processes, exec, signals to other processes, "
                       "namespaces)",
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
  SetError(result, tuneforge::v1::RUNTIME_ERROR,
           WithLog(absl::StrCat("kernel process exited with code ", code,
                                " in the middle of the measurement"),
                   dir));
}

// Runs the conversation: start, prepack, one checked run, the timing protocol with
// a check after every timed sample, the inputs check.
void Converse(ChildMeasurement& m, const MeasureRequest& request, Clock::time_point start,
              int timeout_ms, std::vector<double>* costs) {
  std::string confinement;
  if (!m.WaitReady(&confinement)) return;
  TF_LOG(Debug) << "request " << request.request_id() << ": sandbox child ready (" << confinement
                << ")";
  if (confinement.find("no Landlock") != std::string::npos) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      TF_LOG(Warning) << "kernels run without Landlock (" << confinement
                      << "): they can write files wherever this user can";
    });
  }
  // Prepacked buffers (constant weights in the kernel's layout) are filled once, here,
  // outside the timed region: what an inference runtime does once per model.
  if (!request.prepack_symbol().empty() && !m.Call(Op::kPrepack)) return;
  if (!m.Call(Op::kRun, 1) || !m.CheckOutput("")) return;

  // What a round trip costs without the kernel: subtracted from every sample. The
  // smallest of a few, so that a figure is never made faster than it was.
  double overhead = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    Clock::time_point t0 = Clock::now();
    if (!m.Call(Op::kRun, 0)) return;
    overhead = std::min(overhead, std::chrono::duration<double>(Clock::now() - t0).count());
  }

  runtime::TimingOptions timing_options;
  timing_options.warmup = request.options().warmup();
  timing_options.number = request.options().number();
  timing_options.repeat = request.options().repeat();
  timing_options.min_repeat_ms = request.options().min_repeat_ms();
  timing_options.flush_cache = request.options().flush_cache();
  timing_options.max_repeat = request.options().max_repeat();
  timing_options.max_spread = request.options().max_spread();
  // Leave a fifth of the timeout for process start-up, the checks and reporting.
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  timing_options.budget_seconds = std::max(1e-3, 0.8 * timeout_ms / 1e3 - elapsed);
  ChildRunner runner(&m, overhead);
  absl::StatusOr<runtime::Timing> timing = runtime::RunTimingProtocol(runner, timing_options);
  if (!timing.ok()) return;  // the verdict is in `m`
  if (!m.CheckInputsUnchanged()) return;
  *costs = SubtractRoundTrip(timing->costs, timing->number, runner.overhead_seconds());
}

// Measures one prepared directory's kernel in a child and fills `result`.
// `child_cpu_seconds` gets the CPU time of the child (all its threads).
void MeasureInChild(const std::string& binary, const std::string& dir,
                    const MeasureRequest& request, int timeout_ms,
                    const std::vector<int>& pin_cpus, MeasureResult* result,
                    double* child_cpu_seconds) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(timeout_ms);
  const BufferLayout layout = LayoutBuffers(request);
  absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(layout.total);
  if (!region.ok()) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("cannot allocate the buffers: ", region.status().message()));
    return;
  }
  int pair[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("socketpair: ", ErrnoText(errno)));
    return;
  }
  Fd control(pair[0]), child_end(pair[1]);
  ChildMeasurement m(request, layout, **region, control.get(), deadline);
  m.PrepareBuffers();

  absl::StatusOr<pid_t> pid =
      SpawnChild(binary, dir, (*region)->fd(), child_end.get(), pin_cpus);
  child_end.Reset();  // EOF on `control` now means the child is gone
  if (!pid.ok()) {
    SetError(result, tuneforge::v1::RUNTIME_ERROR,
             absl::StrCat("cannot start sandbox process: ", pid.status().message()));
    return;
  }
  std::vector<double> costs;
  Converse(m, request, start, timeout_ms, &costs);

  // However it went, the child goes: told to quit when the conversation is intact,
  // then the whole group is killed (whatever the kernel may have left behind).
  bool timed_out = m.timed_out();
  if (m.child_gone() && !timed_out) {
    // The socket closed: the process is ending, or a kernel closed it and spins on,
    // which the deadline still bounds. Its exit status is the verdict.
    timed_out = !WaitForExit(*pid, deadline);
  } else if (!timed_out) {
    // The verdict is reached; the child gets a moment to quit before the kill.
    Command quit{Op::kQuit, 0, 0};
    SendAll(control.get(), &quit, sizeof(quit));
    WaitForExit(*pid, std::min(deadline, Clock::now() + std::chrono::seconds(2)));
  }
  kill(-*pid, SIGKILL);
  kill(*pid, SIGKILL);  // in case it had not reached setpgid yet
  int status = 0;
  struct rusage usage {};
  while (wait4(*pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  *child_cpu_seconds = usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
                       usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;

  if (m.child_gone() || timed_out) {
    ClassifyExit(status, timed_out, timeout_ms, dir, result);
    return;
  }
  if (m.kind() != tuneforge::v1::NONE) {
    SetError(result, m.kind(),
             m.kind() == tuneforge::v1::RUNTIME_ERROR ? WithLog(m.message(), dir) : m.message());
    return;
  }
  result->set_error(tuneforge::v1::NONE);
  result->clear_error_message();
  for (double c : costs) result->add_costs(c);
}

// ----------------------------------------------------------------------------
// Child side.

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
absl::Status SetChildLimits(const MeasureRequest& request, size_t region_bytes) {
  RETURN_IF_ERROR(LowerLimit(RLIMIT_CORE, "RLIMIT_CORE", 0, 0));

  long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  // CPU time counts every thread, so a parallel kernel burns `cpus` CPU seconds per
  // wall second; the limit must not fire before the wall-clock timeout does.
  double timeout_s = request.options().timeout_ms() / 1e3;
  rlim_t cpu_s = static_cast<rlim_t>(std::ceil(timeout_s * static_cast<double>(cpus))) + 2;
  RETURN_IF_ERROR(LowerLimit(RLIMIT_CPU, "RLIMIT_CPU", cpu_s, cpu_s + 2));

  // Address space, not resident memory: the process maps the agent's shared libraries,
  // a stack and a malloc arena per runtime thread, and the cache-flush buffer besides
  // the kernel's buffers.
  const rlim_t kGiB = rlim_t{1} << 30;
  rlim_t as = kGiB + static_cast<rlim_t>(region_bytes) +
              static_cast<rlim_t>(runtime::kFlushBytes) +
              static_cast<rlim_t>(cpus) * (rlim_t{80} << 20);
  RETURN_IF_ERROR(LowerLimit(RLIMIT_AS, "RLIMIT_AS", as, as));
  return absl::OkStatus();
}

std::string DlopenHint(const std::string& error) {
  if (error.find("failed to map segment") != std::string::npos) {
    return " (is the sandbox directory on a noexec mount? choose another with --temp-dir)";
  }
  return "";
}

bool Reply(bool ok, std::string_view message) {
  if (message.size() > kMaxReplyMessage) message = message.substr(0, kMaxReplyMessage);
  ReplyHeader header{ok ? 1 : 0, static_cast<uint32_t>(message.size())};
  return SendAll(kControlFd, &header, sizeof(header)) &&
         SendAll(kControlFd, message.data(), message.size());
}

// Everything the child does before the kernel's first run. Returns the confinement
// in force, or why the kernel cannot be run.
struct LoadedKernel {
  runtime::KernelEntry entry = nullptr;
  runtime::KernelEntry prepack = nullptr;
  runtime::KernelEntry unpack = nullptr;
  std::vector<void*> args;
};

absl::StatusOr<std::string> PrepareChild(const std::string& dir, const MeasureRequest& request,
                                         LoadedKernel* kernel) {
  const BufferLayout layout = LayoutBuffers(request);
  if (absl::Status limits = SetChildLimits(request, layout.total); !limits.ok()) {
    return absl::InternalError(absl::StrCat("cannot set resource limits: ", limits.message()));
  }
  // Confined before anything of the kernel's runs, its initializers included.
  absl::StatusOr<Confinement> confinement = ConfineThisProcess(dir);
  if (!confinement.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot confine the kernel: ", confinement.status().message()));
  }

  struct stat st;
  if (fstat(kBuffersFd, &st) != 0 || static_cast<size_t>(st.st_size) != layout.total) {
    return absl::InternalError("the shared buffers do not match the request");
  }
  void* base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, kBuffersFd, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map the buffers (", layout.total, " bytes): ", ErrnoText(errno)));
  }
  for (size_t guard : layout.guards) {
    if (mprotect(static_cast<char*>(base) + guard, layout.page, PROT_NONE) != 0) {
      return absl::InternalError(absl::StrCat("guard page: ", ErrnoText(errno)));
    }
  }
  for (size_t offset : layout.offsets) kernel->args.push_back(static_cast<char*>(base) + offset);

  // Kernels leave tf_parallel_for undefined and resolve it against this process
  // (tuneforge_runtime's link options export it from every executable). Say so
  // plainly rather than let every kernel fail with a dlopen error.
  if (dlsym(RTLD_DEFAULT, "tf_parallel_for") == nullptr) {
    return absl::InternalError(
        "the sandbox binary does not export tf_parallel_for (link it with "
        "tuneforge_runtime); kernels cannot be loaded");
  }
  std::string path = dir + "/" + kKernelFile;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::string error = dlerror();
    return absl::InternalError(absl::StrCat("dlopen failed: ", error, DlopenHint(error)));
  }
  auto find = [&](const std::string& name, runtime::KernelEntry* out) -> absl::Status {
    dlerror();
    void* symbol = dlsym(handle, name.c_str());
    if (symbol == nullptr) {
      const char* error = dlerror();
      return absl::InternalError(absl::StrCat("dlsym(", name, ") failed: ",
                                              error != nullptr ? error : "symbol is null"));
    }
    *out = reinterpret_cast<runtime::KernelEntry>(symbol);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(find(request.entry_symbol(), &kernel->entry));
  if (!request.prepack_symbol().empty()) RETURN_IF_ERROR(find(request.prepack_symbol(), &kernel->prepack));
  if (!request.unpack_symbol().empty()) RETURN_IF_ERROR(find(request.unpack_symbol(), &kernel->unpack));
  return confinement->Describe();
}

// Serves the parent's commands until told to quit (or the parent is gone).
void ServeCommands(const LoadedKernel& kernel, runtime::CacheFlusher& flusher) {
  void** args = const_cast<void**>(kernel.args.data());
  for (;;) {
    Command command{};
    char* p = reinterpret_cast<char*>(&command);
    size_t left = sizeof(command);
    while (left > 0) {
      ssize_t n = recv(kControlFd, p, left, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the parent is gone
      p += n;
      left -= static_cast<size_t>(n);
    }
    int32_t rc = 0;
    switch (command.op) {
      case Op::kRun: {
        (void)tf_take_thread_shortfall(nullptr);
        for (int64_t i = 0; i < command.count && rc == 0; ++i) rc = kernel.entry(args);
        if (rc != 0) {
          Reply(false, absl::StrCat("kernel entry returned ", rc));
          continue;
        }
        // Timed on fewer threads than the kernel (and its target) asked for: not a
        // figure for that target, so not a figure at all.
        int32_t got = 0;
        if (int32_t asked = tf_take_thread_shortfall(&got)) {
          Reply(false, absl::StrCat("a parallel loop asked for ", asked, " threads and ran on ",
                                    got, " (the system refused to create threads); not measured"));
          continue;
        }
        Reply(true, "");
        break;
      }
      case Op::kPrepack:
        rc = kernel.prepack != nullptr ? kernel.prepack(args) : 0;
        Reply(rc == 0, rc == 0 ? "" : absl::StrCat("prepack entry returned ", rc));
        break;
      case Op::kUnpack:
        rc = kernel.unpack != nullptr ? kernel.unpack(args) : 0;
        Reply(rc == 0, rc == 0 ? "" : absl::StrCat("unpack entry returned ", rc));
        break;
      case Op::kFlush:
        flusher.Flush();
        Reply(true, "");
        break;
      case Op::kQuit:
        return;
      default:
        Reply(false, "unknown command");
        return;
    }
  }
}

}  // namespace

std::vector<double> SubtractRoundTrip(const std::vector<double>& costs, int64_t number, double overhead_seconds) {
  std::vector<double> out;
  out.reserve(costs.size());
  const double per_run = std::max(0.0, overhead_seconds) / static_cast<double>(std::max<int64_t>(1, number));
  for (double c : costs) out.push_back(std::max(c - per_run, 0.5 * c));
  return out;
}

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
  watched_cpus_ = options_.pin_cpus.empty() ? AllowedCpus() : options_.pin_cpus;
  watched_cpus_text_ = FormatCpuList(watched_cpus_);
  load_ = std::make_unique<PersistentLoad>(options_.quiet.persistent_after);
}

namespace {

// One measurement on this machine with the quiet check around it.
struct Watched {
  QuietCheck before;
  double others_busy = 0;  // share of the CPUs' time other work took during it
};

// Runs MeasureInChild between two readings of the watched CPUs: their busy ticks,
// less the child's and the agent's own CPU time, are what other work took.
Watched MeasureWatched(const std::string& binary, const std::string& dir,
                       const MeasureRequest& request, int timeout_ms,
                       const std::vector<int>& pin_cpus, const std::vector<int>& cpus,
                       const QuietOptions& quiet, MeasureResult* result) {
  Watched w;
  w.before = WaitForQuiet(cpus, quiet);
  static const double kTicksPerSecond = static_cast<double>(sysconf(_SC_CLK_TCK));
  const CpuTicks ticks0 = ReadCpuTicks(cpus);
  const double own0 = OwnCpuSeconds();
  const Clock::time_point start = Clock::now();
  double child_cpu = 0;
  MeasureInChild(binary, dir, request, timeout_ms, pin_cpus, result, &child_cpu);
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const CpuTicks ticks1 = ReadCpuTicks(cpus);
  const double busy = (ticks1.busy - ticks0.busy) / kTicksPerSecond;
  const double others = busy - child_cpu - (OwnCpuSeconds() - own0);
  if (wall > 0 && !cpus.empty()) {
    w.others_busy = std::clamp(others / (wall * static_cast<double>(cpus.size())), 0.0, 1.0);
  }
  return w;
}

double Round3(double v) { return std::round(v * 1000) / 1000; }

// Measurements that other work disturbed are repeated at most this many times.
constexpr int kMaxRemeasures = 2;

}  // namespace

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
  absl::Status valid = ValidateMeasureRequest(request);
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
  if (!options_.device.runner.empty()) {
    MeasureOnDevice(request, options_.device, dir->path(), timeout_ms, &result);
    return finish();
  }
  // The child gets neither the artifact, which it maps from kernel.so, nor the
  // expected output, which a kernel could otherwise copy instead of computing.
  MeasureRequest for_child = request;
  for_child.clear_artifact();
  for_child.clear_expected_output();
  for_child.clear_alternate_expected_output();
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

  // Other work took the CPUs during the measurement: its figure is not this kernel's.
  // Again, after waiting for quiet, up to kMaxRemeasures times, each only while at most
  // a quarter of the request's timeout has gone (the server's lease is the timeout plus
  // a grace) and within what is left of it; the last figure stands, marked disturbed
  // when other work still took the CPUs. While the load is persistent, one reading of
  // the CPUs and one measurement.
  const bool checked = options_.quiet.max_busy > 0;
  const bool persistent = checked && load_->active();
  QuietOptions quiet = options_.quiet;
  if (persistent) quiet.max_wait_ms = 0;
  const std::string child_log = dir->path() + "/" + kChildLogFile;
  const Clock::time_point first_start = Clock::now();
  Watched watched;
  int attempts = 0, waited_ms = 0;
  bool found_quiet = false;  // some reading before an attempt was within the bound
  for (;;) {
    const int elapsed_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - first_start).count());
    if (attempts > 0) {
      TF_LOG(Debug) << "request " << request.request_id() << ": other work took "
                    << watched.others_busy << " of the CPUs; measuring again";
      std::filesystem::remove(child_log);
      result.clear_costs();
    }
    watched = MeasureWatched(options_.agent_binary, dir->path(), request, timeout_ms - elapsed_ms,
                             options_.pin_cpus, watched_cpus_, quiet, &result);
    ++attempts;
    waited_ms += watched.before.waited_ms;
    found_quiet = found_quiet || watched.before.quiet;
    const int total_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - first_start).count());
    if (!checked || persistent || result.error() != tuneforge::v1::NONE ||
        watched.others_busy <= options_.quiet.max_busy || attempts > kMaxRemeasures ||
        total_ms * 4 > timeout_ms) {
      break;
    }
  }
  const bool disturbed = checked && watched.others_busy > options_.quiet.max_busy;
  if (checked && result.error() == tuneforge::v1::NONE) {
    const int change = load_->Record(found_quiet || !disturbed);
    if (change > 0) {
      TF_LOG(Warning) << "CPUs " << watched_cpus_text_ << ": other work kept them above "
                      << options_.quiet.max_busy * 100 << "% busy for "
                      << options_.quiet.persistent_after
                      << " measurements in a row; measuring without waiting for quiet until "
                         "they are quiet again (records say persistent_load)";
    } else if (change < 0) {
      TF_LOG(Info) << "CPUs " << watched_cpus_text_ << " quiet again; waiting for quiet as usual";
    }
  }
  nlohmann::json env = nlohmann::json::parse(options_.environment_json, nullptr, false);
  if (env.is_object()) {
    env["measurement"] = {
        {"cpus", watched_cpus_text_},
        {"pinned", !options_.pin_cpus.empty()},
        {"busy_before", Round3(watched.before.busy)},
        {"quiet_wait_ms", waited_ms},
        {"others_busy", Round3(watched.others_busy)},
        {"remeasured", attempts > 1},
        {"attempts", attempts},
        {"disturbed", disturbed},
        {"persistent_load", persistent},
    };
    result.set_environment_json(env.dump());
  }
  TF_LOG(Debug) << "request " << request.request_id() << ": "
                << tuneforge::v1::MeasureErrorKind_Name(result.error()) << " "
                << result.error_message();
  return finish();
}

int RunSandboxChild(const std::string& dir, bool pin_threads) {
  // Before the first parallel loop creates the pool's workers. Asked for and not done,
  // the measurement fails and says why: a record says "pinned" only when it was.
  const bool pinned = !pin_threads || runtime::PinThreads(AllowedCpus());
  absl::StatusOr<std::string> bytes = ReadFile(dir + "/" + kRequestFile);
  MeasureRequest request;
  if (!bytes.ok() || !request.ParseFromString(*bytes)) {
    std::string why = bytes.ok() ? "parse error" : std::string(bytes.status().message());
    Reply(false, absl::StrCat("sandbox: cannot read the request in ", dir, ": ", why));
    return 0;
  }
  runtime::CacheFlusher flusher(request.options().flush_cache());
  if (!flusher.ok()) {
    Reply(false, absl::StrCat("cannot allocate the ", runtime::kFlushBytes >> 20,
                              " MiB cache-flush buffer"));
    return 0;
  }
  if (!pinned) {
    Reply(false, absl::StrCat("sandbox: cannot pin the kernel's threads to CPUs ",
                              absl::StrJoin(AllowedCpus(), ","), " (the affinity call was refused)"));
    return 0;
  }
  LoadedKernel kernel;
  absl::StatusOr<std::string> ready = PrepareChild(dir, request, &kernel);
  if (!ready.ok()) {
    Reply(false, std::string(ready.status().message()));
    return 0;
  }
  if (!Reply(true, *ready)) return 0;
  ServeCommands(kernel, flusher);
  return 0;
}

}  // namespace tuneforge::agent
