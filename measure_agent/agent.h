// The device-side client (docs/architecture.md: the agent). It registers with the server, holds one
// Connect stream open, runs the MeasureRequests that come down in the Sandbox and
// streams a MeasureResult back for every one of them, whatever happened.
//
// Lifecycle of Agent::Run:
//   Register (retried with backoff; gives up after connect_timeout_s if the server was
//   never reached) -> Connect, hello -> session -> on a broken stream: re-register and
//   reconnect with exponential backoff and jitter, forever -> return on Stop() or when
//   the server sends shutdown_reason.
//
// Threads of one session (one Connect stream), all owned by agent.cc's Session:
//   the Run() thread  supervises: waits for stop / shutdown / a broken stream, tears down
//   reader            reads ServerMessages; queues requests
//   heartbeat         writes a Heartbeat every heartbeat_interval_ms
//   workers (N)       take a queued request, Sandbox::Run it, write the result
// A gRPC sync stream allows one writer at a time, so every write takes one mutex.
#pragma once

#include <grpcpp/security/credentials.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "measure_agent/quiet.h"
#include "absl/synchronization/mutex.h"
#include "measure_agent/device_launch.h"

namespace tuneforge::agent {

class Session;

struct AgentOptions {
  std::string server_address;  // gRPC target, e.g. "farm.example.com:7070"
  std::string device_key;      // the device key, e.g. "epyc-znver4"
  int workers = 1;             // requests run at once; > 1 makes timings interfere
  // How long to keep retrying when the server cannot be reached at start-up. Once
  // registered, the agent reconnects forever.
  int connect_timeout_s = 30;
  // Executable that implements --sandbox-run (see sandbox.h).
  std::string agent_binary = "/proc/self/exe";
  // Parent of the sandbox directories; empty: $TMPDIR, else /tmp.
  std::string temp_dir;
  // A device agent (device_launch.h): measures on the device through the launcher
  // and runner, and registers the device's triple and CPU flags instead of this
  // machine's. Runner empty: measures here.
  DeviceLaunch device;
  // Measurements on this machine: the CPUs the kernels run on, their threads pinned
  // one per CPU (empty: not pinned), and the quiet check around every measurement
  // (sandbox.h; max_busy 0: off). ParseAgentFlags fills both by default.
  std::vector<int> pin_cpus;
  QuietOptions quiet;
  std::string device_triple;
  std::vector<std::string> device_flags;
  // Reconnect backoff: doubles from initial to max; each wait is jittered to
  // [1/2, 1] of the current value so that a farm does not reconnect in lockstep.
  int initial_backoff_ms = 200;
  int max_backoff_ms = 30'000;
  // Fault injection for tests only: report costs this many times higher, as a device
  // that got slower would (the nightly canary must notice). 1 = off.
  int test_slowdown = 1;
  // Fault injection for tests only: every kernel that ran correctly is reported as a
  // wrong answer, as a device with broken arithmetic would (the server must
  // quarantine it). false = off.
  bool test_wrong_answer = false;
  // Sent as "authorization: Bearer <token>" on every call (from --token-file).
  std::string token;
  // PEM certificate to verify the server with (TLS); empty: plaintext. With TLS the
  // agent only runs artifacts from the server it authenticated.
  std::string tls_ca;
  // Client certificate and key (PEM) for a server that requires them (mutual TLS);
  // both empty: none.
  std::string tls_cert;
  std::string tls_key;
  bool insecure = false;  // --insecure: plaintext to a server off loopback
};

// Thread-safe: Stop() may be called from any thread while Run() runs on another.
class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until Stop() or a shutdown_reason from the server (OK), or until the server
  // has not been reachable for connect_timeout_s since start-up (Unavailable, with a
  // one-line reason). Call at most once.
  absl::Status Run();

  // Asks Run() to return once the requests in progress are finished and their
  // results sent; queued requests are handed back to the server (Drain). Returns at once. Not
  // async-signal-safe: call it from a thread that received the signal via sigwait.
  void Stop();

 private:
  // Sleeps for `ms` unless Stop() comes first; returns false if stopped.
  bool SleepUnlessStopped(int ms);

  const AgentOptions options_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;  // from options_.tls_ca
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Session* session_ ABSL_GUARDED_BY(mu_) = nullptr;  // the live session, if any
};

}  // namespace tuneforge::agent
