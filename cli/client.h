// Client side of the TuningService, shared by the CLI commands that run jobs
// (tune, nightly), and the embedded default (in-process Server + a local
// tuneforge-agent child process), so every command takes the same code path.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compiler/support/files.h"
#include "server/server.h"
#include <grpcpp/channel.h>

#include "tuneforge/v1/farm.pb.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge::cli {

// `tuneforge --insecure ...` (a global option, anywhere on the command line): allow
// plaintext to servers that are not on loopback (compiler/support/rpc_credentials.h).
void SetInsecure(bool insecure);
bool Insecure();

// A channel to a tuneforge server, connected within 5 s or "cannot reach tuneforge
// server at ...". Plaintext off loopback is refused unless Insecure().
// `tls_ca` empty: plaintext; else TLS trusting that PEM file.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const std::string& address,
                                                              const std::string& tls_ca = "");

class TuningClient {
 public:
  // Connects within 5 s or fails with "cannot reach tuneforge server at ...".
  // `token` (may be empty) is sent with every call.
  static absl::StatusOr<std::unique_ptr<TuningClient>> Connect(const std::string& address,
                                                               const std::string& token = "",
                                                               const std::string& tls_ca = "");
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec);
  // Follows the job until it ends; `on_status` sees every update. Returns the last.
  // When the server goes away mid-job (killed, restarted, network), the client says so
  // on stderr and re-attaches to the same job id with backoff (0.25 s doubling to 5 s)
  // for up to `reconnect_timeout` without a status; a restarted server resumes the job
  // under its id. A job the server does not know, or a refused token, ends it at once.
  absl::StatusOr<v1::JobStatus> Wait(const std::string& job_id,
                                     const std::function<void(const v1::JobStatus&)>& on_status);
  absl::Status Cancel(const std::string& job_id);
  // Sends an ONNX model file (1 MiB chunks) with the bindings of its symbolic
  // dimensions (NAME=N) and input shapes (INPUT=D0,...); the server keeps it by
  // SHA-256 once its importer accepts it. Weights kept as ONNX external data are
  // inlined into the upload (the server keeps one file; its hash is of those bytes).
  absl::StatusOr<v1::ModelUploaded> UploadModel(const std::string& path, const std::vector<std::string>& dims,
                                                const std::vector<std::string>& shapes);
  // The job's status now; NotFound when the server does not know the id.
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id);
  void set_reconnect_timeout(absl::Duration d) { reconnect_timeout_ = d; }

 private:
  std::unique_ptr<v1::TuningService::Stub> stub_;
  std::string token_;
  std::string address_;
  absl::Duration reconnect_timeout_ = absl::Seconds(60);
};

// The server's agents and the jobs `token` may see (FarmService.Status, 10 s deadline);
// Unavailable "<what> failed: <the server's reason>" when the call fails.
absl::StatusOr<v1::FarmStatus> FetchFarmStatus(const std::string& address, const std::string& token,
                                               const std::string& tls_ca, const std::string& what);

// The token of --token-file, or "" when the flag is absent.
absl::StatusOr<std::string> TokenFromFlag(const std::string& token_file);

// A tuneforge-agent child process; killed (SIGTERM, then SIGKILL) on destruction.
// tuneforge-agent next to this executable.
std::string AgentBinaryPath();

class AgentProcess {
 public:
  // The agent binary next to this executable.
  static absl::StatusOr<std::unique_ptr<AgentProcess>> Spawn(
      const std::string& server, const std::string& device_key, bool verbose,
      const std::vector<std::string>& extra_args = {});
  ~AgentProcess();
  bool Exited();

 private:
  pid_t pid_ = -1;
};

// A named target (`tune --target aarch64`): the full target text, and for another
// architecture than the host's, how the embedded default reaches such a device — the
// cross-built runner next to this binary, run under qemu-user.
struct NamedTarget {
  std::string name;                   // aarch64, riscv64, x86-64-v3
  std::string target;                 // ParseTarget text
  std::string triple;                 // empty: the host's architecture
  std::vector<std::string> launcher;  // qemu-user command
  std::string cpu_flags;              // what the device's /proc/cpuinfo would say
};
// The named targets; NotFound lists them for an unknown name.
absl::StatusOr<NamedTarget> FindNamedTarget(const std::string& name);
// True when `text` looks like a name rather than target options ("-mcpu=...").
bool IsTargetName(const std::string& text);
// tuneforge-agent's arguments that make it a device agent for `t` (its runner found
// next to this binary); empty for a target of the host's architecture.
absl::StatusOr<std::vector<std::string>> DeviceAgentArgs(const NamedTarget& t);

// The embedded default: a Server on a free loopback port with `db_path`, and one
// local agent per device key (`agent_args` added to each: a device agent's).
class EmbeddedFarm {
 public:
  static absl::StatusOr<std::unique_ptr<EmbeddedFarm>> Start(
      const std::string& db_path, const std::vector<std::string>& device_keys, bool verbose,
      const std::vector<std::string>& agent_args = {});
  ~EmbeddedFarm();
  const std::string& address() const { return address_; }
  // The embedded server only takes tokens made for this run (a user token, with the
  // admin role, and the local agents' token), so other users of the machine cannot
  // run code through it on loopback. The client sends this one.
  const std::string& user_token() const { return user_token_; }

 private:
  std::unique_ptr<TempDir> secrets_;  // tokens files, mode 0700 directory; removed last
  std::string user_token_;
  std::unique_ptr<Server> server_;
  std::vector<std::unique_ptr<AgentProcess>> agents_;
  std::string address_;
};

}  // namespace tuneforge::cli
