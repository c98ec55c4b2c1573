// Confinement of the sandbox child (measure_agent/sandbox.h), applied to the calling
// process before it loads a kernel and irreversible after that. Needs no root: it
// uses no_new_privs, a seccomp filter and, where the running kernel has it, Landlock.
//
// What the kernel can no longer do (docs/security.md has the threat model):
//   - create sockets (no network, not even a Unix socket to a local daemon):
//     socket, socketpair;
//   - start programs or processes: execve, execveat, fork, vfork, and clone without
//     CLONE_THREAD (threads stay allowed: the runtime's thread pool needs them;
//     clone3, whose flags a filter cannot read, fails with ENOSYS so that the C
//     library falls back to clone);
//   - signal or inspect other processes: kill and tgkill to any process but itself,
//     tkill, ptrace, process_vm_readv/writev, pidfd_open, pidfd_send_signal;
//   - change namespaces or mounts: unshare, setns, mount, umount2, pivot_root, chroot;
//   - write, create, remove or rename files anywhere but beneath `writable_dir`
//     (Landlock; reading stays allowed, the kernel is read from there and the C
//     library reads its locale and the like).
// A forbidden system call kills the process with SIGSYS: a kernel that tries is a
// measurement error, not a kernel that carries on after an EPERM it may ignore.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tuneforge::agent {

struct Confinement {
  bool seccomp = false;
  int landlock_abi = 0;       // 0: Landlock not used
  std::string landlock_note;  // why not, when landlock_abi == 0
  std::string Describe() const;
};

// Applies the confinement above to this process, which must be single-threaded.
// Fails if the seccomp filter cannot be installed (then nothing may be run);
// Landlock missing from the running kernel is reported in the result, not an error.
absl::StatusOr<Confinement> ConfineThisProcess(const std::string& writable_dir);

}  // namespace tuneforge::agent
