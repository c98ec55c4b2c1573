// Runs the Artifact of one MeasureRequest in a fresh, confined child process and
// turns whatever happens there into a MeasureResult (failures are data: docs/architecture.md).
//
// The kernel never decides its own verdict. The parent (Sandbox::Run) checks the
// request and the artifact hash, makes a private directory with the kernel in it,
// puts the buffers in shared memory (a memfd) that it fills and checks itself, and
// execs `agent_binary --sandbox-run DIR`. The child (RunSandboxChild) starts as a
// brand-new process — no threads inherited from the agent's gRPC machinery — sets
// resource limits, confines itself (confine.h: seccomp, Landlock), maps the buffers
// with guard pages around each, loads the kernel and then only runs what the parent
// asks over a socket: "prepack", "run N times", "unpack", "flush the caches".
// The parent holds the clock (a sample is one "run N" round trip, less the round
// trip of an empty one), checks the output after the first run and after every
// timed sample (poisoned with NaN before each), and checks that the inputs are
// unchanged at the end. The child is never told the expected output.
//
// Files in the private directory, <temp_root>/tuneforge-sandbox-<agent pid>-XXXXXX
// (removed in every case when Run returns; the only place the child may write):
//   kernel.so   the artifact
//   request.pb  the request without the artifact and the expected output
//   child.log   the child's stdout and stderr; its tail goes into error messages
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/runtime/runtime.h"
#include "measure_agent/device_launch.h"
#include "measure_agent/quiet.h"
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
  // Set (its runner non-empty): requests run on a device through its launcher and
  // the device runner (device_launch.h), not in a child on this machine.
  DeviceLaunch device;
  // Measurements on this machine (not a device): the CPUs the kernel runs on, its
  // threads pinned one per CPU (runtime::PinThreads); empty: not pinned.
  std::vector<int> pin_cpus;
  // Wait for those CPUs (or, unpinned, the agent's) to be quiet before measuring,
  // and measure again (up to twice) when other work took more than quiet.max_busy of
  // them during the measurement; max_busy 0: neither. While the load is persistent
  // (quiet.persistent_after measurements in a row found no quiet: PersistentLoad), one
  // reading and one measurement, recorded as such. The result's environment_json gets
  // a "measurement" object saying what was found (docs/search.md "Clean labels").
  QuietOptions quiet;
};

// What a request from the server must be before the agent acts on it (an entry symbol,
// buffers of known roles and bounded sizes, exactly one OUTPUT, an expected output of
// its size); InvalidArgument naming what is not. Run calls it first.
absl::Status ValidateMeasureRequest(const tuneforge::v1::MeasureRequest& request);

// A buffer's element type and, for an INPUT, how it is filled (the type's default
// when fill_low and fill_high are both 0). Only for buffers that passed
// ValidateMeasureRequest.
runtime::ElementType ElementTypeOf(const tuneforge::v1::BufferSpec& buffer);
runtime::FillSpec FillOf(const tuneforge::v1::BufferSpec& buffer);

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
  std::vector<int> watched_cpus_;  // pin_cpus, or the agent's own when unpinned
  std::string watched_cpus_text_;  // FormatCpuList(watched_cpus_), for every record
  std::unique_ptr<PersistentLoad> load_;  // of those CPUs, over this sandbox's measurements
};

// Removes the sandbox directories under `temp_root` (empty: the default root) that
// belong to agents no longer running — left behind when an agent was SIGKILLed in
// the middle of a request. Directories of live agents, including other agents on
// the same machine, are kept. Returns how many were removed.
int RemoveStaleSandboxDirs(const std::string& temp_root);

// Per-run costs of samples timed as whole round trips to the child (`costs`: each
// sample's seconds / `number` runs), less the round trip of an empty call,
// `overhead_seconds`, spread over the runs. Never less than half a cost: with samples
// of >= min_repeat_ms the round trip is a fraction of a percent, and only an estimate
// inflated by a busy machine (every empty round trip waited for a CPU) comes near a
// sample; subtracting it whole made figures several times too fast, or zero, which the
// server rejects.
std::vector<double> SubtractRoundTrip(const std::vector<double>& costs, int64_t number, double overhead_seconds);

// The flag that makes the agent binary act as a sandbox child.
inline constexpr char kSandboxRunFlag[] = "--sandbox-run";

// Given after DIR when the parent pinned the child to its CPUs: the child then pins
// its threads one per CPU.
inline constexpr char kPinThreadsFlag[] = "--pin-threads";

// Body of `tuneforge-agent --sandbox-run DIR [--pin-threads]`, in the freshly exec'd child, with the
// buffers' memfd as descriptor 4 and the control socket as 5. Returns the process
// exit code (0: the parent said quit or is gone; every failure is reported to the
// parent over the socket). The caller must leave with std::_Exit so that no
// destructor of the loaded kernel runs.
int RunSandboxChild(const std::string& dir, bool pin_threads);

}  // namespace tuneforge::agent
