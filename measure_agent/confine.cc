// seccomp and rlimit confinement of the sandbox child before it loads a kernel.
#include "measure_agent/confine.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tuneforge::agent {

namespace {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "the sandbox's seccomp filter knows x86-64 and AArch64 only"
#endif

// Rights the headers of older systems do not name yet (Landlock ABI 2 and 3).
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

std::string ErrnoText(int err) { return std::strerror(err); }

// A seccomp-BPF program, built instruction by instruction.
class FilterBuilder {
 public:
  void LoadArch() { Load(offsetof(struct seccomp_data, arch)); }
  void LoadNr() { Load(offsetof(struct seccomp_data, nr)); }
  // The low 32 bits of argument `i` (little-endian: the first word).
  void LoadArgLow(int i) { Load(offsetof(struct seccomp_data, args) + 8 * i); }
  void Return(uint32_t action) { code_.push_back(BPF_STMT(BPF_RET | BPF_K, action)); }

  // if (nr == value) return action;
  void ReturnIfNr(long nr, uint32_t action) {
    code_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    Return(action);
  }
  // if (nr == value) return test(arg0) ? ALLOW : KILL; A (= nr) is kept otherwise.
  // `test` is BPF_JSET (arg0 & operand) or BPF_JEQ (arg0 == operand).
  void AllowIfArgElseKill(long nr, uint16_t test, uint32_t operand) {
    code_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4));
    LoadArgLow(0);
    code_.push_back(BPF_JUMP(BPF_JMP | test | BPF_K, operand, 0, 1));
    Return(SECCOMP_RET_ALLOW);
    Return(SECCOMP_RET_KILL_PROCESS);
  }
  // if (A != value) return action; (for the architecture check)
  void ReturnUnlessEquals(uint32_t value, uint32_t action) {
    code_.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 1, 0));
    Return(action);
  }
  std::vector<sock_filter>& code() { return code_; }

 private:
  void Load(size_t offset) {
    code_.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(offset)));
  }
  std::vector<sock_filter> code_;
};

absl::Status InstallSeccomp() {
  const uint32_t self = static_cast<uint32_t>(getpid());
  constexpr uint32_t kKill = SECCOMP_RET_KILL_PROCESS;
  FilterBuilder f;
  f.LoadArch();
  f.ReturnUnlessEquals(kAuditArch, kKill);
  f.LoadNr();
#if defined(__x86_64__)
  // x32 system calls have their own numbers; the kernels we run never use them.
  f.code().push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
  f.Return(kKill);
#endif
  const long killed[] = {
    SYS_socket, SYS_socketpair, SYS_execve, SYS_execveat, SYS_ptrace,
    SYS_process_vm_readv, SYS_process_vm_writev, SYS_tkill, SYS_unshare, SYS_setns,
    SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot,
#ifdef SYS_fork
    SYS_fork,
#endif
#ifdef SYS_vfork
    SYS_vfork,
#endif
#ifdef SYS_pidfd_open
    SYS_pidfd_open,
#endif
#ifdef SYS_pidfd_send_signal
    SYS_pidfd_send_signal,
#endif
  };
  for (long nr : killed) f.ReturnIfNr(nr, kKill);
#ifdef SYS_clone3
  f.ReturnIfNr(SYS_clone3, SECCOMP_RET_ERRNO | ENOSYS);
#endif
  f.AllowIfArgElseKill(SYS_clone, BPF_JSET, CLONE_THREAD);
  f.AllowIfArgElseKill(SYS_kill, BPF_JEQ, self);
  f.AllowIfArgElseKill(SYS_tgkill, BPF_JEQ, self);
  f.Return(SECCOMP_RET_ALLOW);

  sock_fprog program{};
  program.len = static_cast<unsigned short>(f.code().size());
  program.filter = f.code().data();
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program) != 0) {
    return absl::InternalError(absl::StrCat("seccomp filter: ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

// Landlock: every write-like right is handled, and granted beneath `dir` only.
// Returns the ABI used, or 0 with `note` saying why Landlock is not used.
int InstallLandlock(const std::string& dir, std::string* note) {
#if defined(SYS_landlock_create_ruleset) && defined(SYS_landlock_add_rule) && \
    defined(SYS_landlock_restrict_self)
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) {
    *note = absl::StrCat("Landlock is not available in this kernel (", ErrnoText(errno), ")");
    return 0;
  }
  uint64_t handled = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                     LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                     LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                     LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                     LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) handled |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = handled;
  int ruleset = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0));
  if (ruleset < 0) {
    *note = absl::StrCat("Landlock ruleset: ", ErrnoText(errno));
    return 0;
  }
  int dir_fd = open(dir.c_str(), O_PATH | O_CLOEXEC);
  bool ok = dir_fd >= 0;
  if (ok) {
    landlock_path_beneath_attr beneath{};
    beneath.allowed_access = handled;
    beneath.parent_fd = dir_fd;
    ok = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) == 0 &&
         syscall(SYS_landlock_restrict_self, ruleset, 0) == 0;
  }
  int err = errno;
  if (dir_fd >= 0) close(dir_fd);
  close(ruleset);
  if (!ok) {
    *note = absl::StrCat("Landlock rule for ", dir, ": ", ErrnoText(err));
    return 0;
  }
  return static_cast<int>(abi);
#else
  (void)dir;
  *note = "Landlock system calls are not known to this build";
  return 0;
#endif
}

}  // namespace

std::string Confinement::Describe() const {
  return absl::StrCat("seccomp ", seccomp ? "on" : "off", "; ",
                      landlock_abi > 0 ? absl::StrCat("Landlock ABI ", landlock_abi)
                                       : absl::StrCat("no Landlock: ", landlock_note));
}

absl::StatusOr<Confinement> ConfineThisProcess(const std::string& writable_dir) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrCat("PR_SET_NO_NEW_PRIVS: ", ErrnoText(errno)));
  }
  Confinement result;
  // Landlock first: its system calls are not in the filter's list, but nothing is
  // gained by letting the filter see them.
  result.landlock_abi = InstallLandlock(writable_dir, &result.landlock_note);
  absl::Status seccomp = InstallSeccomp();
  if (!seccomp.ok()) return seccomp;
  result.seccomp = true;
  return result;
}

}  // namespace tuneforge::agent
