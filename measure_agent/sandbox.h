// Runs the Artifact of one MeasureRequest in a fresh child process and turns whatever
// happens there into a MeasureResult (DESIGN.md: failures are data).
//
// The parent side (Sandbox::Run) checks the request and the artifact hash, makes a
// private directory, writes the kernel and the request into it, execs
// `agent_binary --sandbox-run DIR`, waits for it with the request's timeout and reads
// the result back. The child side (RunSandboxChild) starts as a brand-new process —
// no threads inherited from the agent's gRPC machinery — sets resource limits, loads
// the kernel, checks its output against the expected one and times it with the
// measurement protocol of measure.h.
//
// Files in the private directory, <temp_root>/tuneforge-sandbox-<agent pid>-XXXXXX
// (removed in every case when Run returns):
//   kernel.so   the artifact
//   request.pb  the request without the artifact bytes, timeout_ms made explicit
//   result.pb   the child's MeasureResult (costs, error, error_message only)
//   child.log   the child's stdout and stderr; its tail goes into error messages
#pragma once

#include <string>

#include "tuneforge/v1/common.pb.h"

namespace tuneforge::agent {

struct SandboxOptions {
  // Executable that implements `--sandbox-run DIR` (the agent itself in production;
  // tests pass the built tuneforge-agent). It must export the runtime's
  // tf_parallel_for, which kernels resolve when they are loaded.
  std::string agent_binary = "/proc/self/exe";
  // Parent of the per-request directories. Empty: $TMPDIR if set, else /tmp. Must not
  // be mounted noexec, since the kernel is mapped executable from there.
  std::string temp_root;
  // Copied into every result.
  std::string agent_id;
  std::string environment_json;
  // Wall-clock limit for a request whose options.timeout_ms is <= 0.
  int default_timeout_ms = 10000;
};

// Thread-safe: Run may be called from several threads at once (--workers N).
class Sandbox {
 public:
  explicit Sandbox(SandboxOptions options);

  // Never fails: every outcome, including a malformed request, is a MeasureResult
  // whose request_id, agent_id, environment_json and timestamps are filled. Blocks for
  // at most the request's timeout plus process start-up and clean-up. The calling
  // thread must stay alive until Run returns: the child is killed when the thread that
  // forked it exits (PR_SET_PDEATHSIG), so a dying agent leaves no kernels behind.
  tuneforge::v1::MeasureResult Run(const tuneforge::v1::MeasureRequest& request) const;

  const SandboxOptions& options() const { return options_; }

 private:
  SandboxOptions options_;
};

// Removes the sandbox directories under `temp_root` (empty: the default root) that
// belong to agents no longer running — left behind when an agent was SIGKILLed in
// the middle of a request. Directories of live agents, including other agents on
// the same machine, are kept. Returns how many were removed.
int RemoveStaleSandboxDirs(const std::string& temp_root);

// The flag that makes the agent binary act as a sandbox child.
inline constexpr char kSandboxRunFlag[] = "--sandbox-run";

// Body of `tuneforge-agent --sandbox-run DIR`, in the freshly exec'd child. Returns
// the process exit code: 0 once DIR/result.pb is written (whatever the kernel did),
// non-zero if not even that was possible. The caller must leave with std::_Exit so
// that no destructor of the loaded kernel runs after the result is written.
int RunSandboxChild(const std::string& dir);

}  // namespace tuneforge::agent
