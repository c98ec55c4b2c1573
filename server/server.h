// Server: the tuneforge service in one object. It owns the Database, the
// AgentRegistry, the Builder pool, the JobManager and the gRPC server with the
// TuningService and AgentService. Used by `tuneforge-server` and by the CLI's
// embedded default (same code path as a real farm).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/agent_health.h"
#include "server/agent_registry.h"

namespace tuneforge {

class Builder;
class DispatchObserver;

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";  // host:port; port 0 picks a free port
  std::string db_path = "tuneforge.db";
  // Tokens file (server/auth.h); empty: no authentication, for loopback use only.
  std::string tokens_path;
  // TLS certificate chain and key (PEM); both empty: plaintext.
  std::string tls_cert_path;
  std::string tls_key_path;
  // CA (PEM) of the agents' client certificates; empty: agents need none. Set (with
  // TLS), every AgentService call must present a certificate it signed, and an
  // agent's registration is bound to that certificate (mutual TLS).
  std::string tls_client_ca_path;
  int builder_threads = 0;                // 0: one per core
  // gRPC message size limits: artifacts and expected outputs travel in messages
  // (server -> agent), imports and query results in DatabaseService calls.
  int max_receive_message_bytes = 256 << 20;
  int max_send_message_bytes = 256 << 20;
  // Uploaded ONNX models (TuningService.UploadModel): their folder (empty: the db's
  // path + ".models") and the largest one taken.
  std::string models_dir;
  int64_t max_model_bytes = int64_t{1024} << 20;
  // HOST:PORT serving /metrics (Prometheus text) and /healthz over HTTP; empty: off.
  std::string metrics_listen;
  // Builds candidates into artifacts; null: LLVM builds on `builder_threads` threads.
  // Benchmarks inject a fake so they measure dispatch, not the compiler.
  std::shared_ptr<const Builder> builder;
  // Also told every dispatch event (benchmarks); not owned, may be null.
  DispatchObserver* dispatch_observer = nullptr;
  // Leases, heartbeats and re-dispatch (validated by Start).
  DispatchOptions dispatch;
  // Golden-kernel checks of agents (validated by Start); off: agents are trusted.
  bool golden_check = true;
  HealthOptions health;
};

class Server {
 public:
  virtual ~Server() = default;
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  virtual int port() const = 0;
  // Port of the /metrics endpoint; 0 when metrics_listen is empty.
  virtual int metrics_port() const = 0;
  // Cancels jobs, disconnects agents, stops gRPC. Idempotent.
  virtual void Shutdown() = 0;
  // Blocks until Shutdown.
  virtual void Wait() = 0;
};

// "host:port" checks shared by the server and clients: InvalidArgument when the
// text is not host:port with a port in 0..65535.
absl::Status CheckAddress(const std::string& address);

}  // namespace tuneforge
