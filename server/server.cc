// Server: the gRPC server, its services and their lifecycle.
#include "server/server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "compiler/support/log.h"
#include "compiler/support/rpc_credentials.h"
#include "compiler/support/status.h"
#include "db/database.h"
#include "server/agent_registry.h"
#include "server/agent_service.h"
#include "server/dashboard/dashboard.h"
#include "server/database_service.h"
#include "server/farm_service.h"
#include "server/job_manager.h"
#include "server/observability.h"
#include "server/tuning_service.h"
#include "tuner/builder.h"

namespace tuneforge {

absl::Status CheckAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError("address '" + address + "' is not HOST:PORT (port 0..65535)");
  }
  return absl::OkStatus();
}

namespace {

class ServerImpl : public Server {
 public:
  int port() const override { return port_; }
  int metrics_port() const override { return observability_ ? observability_->port() : 0; }

  void Shutdown() override {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (observability_) observability_->Stop();  // /healthz: 503 from here on
    // Init may have failed part-way: only stop what was started.
    if (jobs_) jobs_->CancelAll();
    if (registry_) registry_->Shutdown();
    if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    jobs_.reset();  // joins job threads
  }

  void Wait() override { grpc_->Wait(); }

  ~ServerImpl() override { Shutdown(); }

  absl::Status Init(const ServerOptions& options) {
    RETURN_IF_ERROR(CheckAddress(options.listen));
    RETURN_IF_ERROR(options.dispatch.Validate());
    // The registry calls the observer (dispatch metrics) from its first lease on.
    observability_ = std::make_unique<Observability>(options.dispatch_observer);
    registry_ = std::make_unique<AgentRegistry>(options.dispatch);
    registry_->SetObserver(observability_.get());
    // Every check that can refuse the start comes before the db is opened, so that a
    // refused start leaves no new (migrated) db file behind.
    if (!options.tokens_path.empty()) {
      ASSIGN_OR_RETURN(auth_, TokenAuth::Load(options.tokens_path));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                     ServerCredentials(options.tls_cert_path, options.tls_key_path,
                                       options.tls_client_ca_path));
    if (options.golden_check) RETURN_IF_ERROR(options.health.Validate());
    if (!IsLoopbackAddress(options.listen)) {
      if (!auth_) {
        TF_LOG(Warning) << "listening on " << options.listen
                        << " without --tokens: anyone who can reach it can run code on the agents";
      }
      if (options.tls_cert_path.empty()) {
        TF_LOG(Warning) << "listening on " << options.listen
                        << " without TLS (--tls-cert/--tls-key): tokens, kernels and results "
                           "cross the network in clear text";
      }
    }
    DatabaseOptions db_options;
    db_options.path = options.db_path;
    ASSIGN_OR_RETURN(db_, Database::Open(db_options));
    int threads = options.builder_threads > 0 ? options.builder_threads
                                              : std::max(1u, std::thread::hardware_concurrency());
    builder_ = options.builder ? options.builder : std::make_shared<Builder>(threads);
    metered_builder_ = std::make_unique<MeteredBuilder>(builder_.get(), observability_.get());
    models_ = std::make_unique<ModelFiles>(options.models_dir.empty() ? options.db_path + ".models" : options.models_dir,
                                           options.max_model_bytes);
    jobs_ = std::make_unique<JobManager>(db_.get(), registry_.get(), metered_builder_.get(), models_.get());
    observability_->Attach(registry_.get(), jobs_.get(), db_.get());
    if (options.golden_check) {
      health_ = std::make_unique<AgentHealth>(registry_.get(), metered_builder_.get(),
                                              options.health);
    }
    if (!options.metrics_listen.empty()) {
      // The dashboard shares the listener; the HTTP thread stops (Shutdown) before
      // any member it reads is destroyed.
      // Its own read-only connection: the dashboard's reads run beside the writes of
      // the jobs (SQLite's WAL), not queued behind them on the server's connection.
      DatabaseOptions read_only;
      read_only.path = options.db_path;
      read_only.read_only = true;
      read_only.create_if_missing = false;
      ASSIGN_OR_RETURN(dashboard_db_, Database::Open(read_only));
      dashboard_ = std::make_unique<Dashboard>(jobs_.get(), registry_.get(), dashboard_db_.get(), auth_.get());
      RETURN_IF_ERROR(observability_->Listen(
          options.metrics_listen,
          [dashboard = dashboard_.get()](const http::Request& r) { return dashboard->Handle(r); }));
    }
    tuning_ = std::make_unique<TuningServiceImpl>(jobs_.get(), models_.get(), auth_.get());
    agents_ = std::make_unique<AgentServiceImpl>(registry_.get(), health_.get(), auth_.get(),
                                                 !options.tls_client_ca_path.empty());
    farm_ = std::make_unique<FarmServiceImpl>(registry_.get(), jobs_.get(), auth_.get());
    // Reads for viewers, users and admins; uploads for users and admins; compaction (it
    // deletes records) for admins only.
    const TokenAuth* auth = auth_.get();
    database_ = std::make_unique<DatabaseServiceImpl>(
        db_.get(), [auth](grpc::ServerContext* ctx, DatabaseAccess access, DatabaseCaller* caller) {
          Principal who;
          grpc::Status st =
              access == DatabaseAccess::kDelete ? Authorize(auth, ctx, {Role::kAdmin}, &who)
              : access == DatabaseAccess::kWrite ? Authorize(auth, ctx, {Role::kUser, Role::kAdmin}, &who)
                                                 : Authorize(auth, ctx, {Role::kViewer, Role::kUser, Role::kAdmin}, &who);
          caller->name = who.name;
          caller->admin = who.role == Role::kAdmin;
          return st;
        });

    grpc::ServerBuilder builder;
    builder.AddListeningPort(options.listen, credentials, &port_);
    builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
    builder.SetMaxSendMessageSize(options.max_send_message_bytes);
    builder.RegisterService(tuning_.get());
    builder.RegisterService(agents_.get());
    builder.RegisterService(farm_.get());
    builder.RegisterService(database_.get());
    grpc_ = builder.BuildAndStart();
    if (!grpc_ || port_ == 0) {
      return absl::UnavailableError("could not listen on " + options.listen +
                                    " (address in use or not local?)");
    }
    absl::StatusOr<int> resumed = jobs_->ResumeStoredJobs();
    if (!resumed.ok()) return resumed.status();
    observability_->SetServing(true);
    if (observability_->port()) {
      TF_LOG(Info) << "metrics on http://" << options.metrics_listen.substr(0, options.metrics_listen.rfind(':'))
                   << ":" << observability_->port() << "/metrics";
    }
    TF_LOG(Info) << "tuneforge server listening on port " << port_ << ", db " << options.db_path
                 << ", " << threads << " builder threads";
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Database> db_;
  std::unique_ptr<Observability> observability_;  // outlives registry_, which calls it
  std::unique_ptr<AgentRegistry> registry_;
  std::shared_ptr<const Builder> builder_;
  std::unique_ptr<MeteredBuilder> metered_builder_;
  std::unique_ptr<ModelFiles> models_;  // before jobs_, which reads it
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<AgentHealth> health_;  // null: no golden-kernel checks
  std::unique_ptr<Database> dashboard_db_;  // the dashboard's read-only connection
  std::unique_ptr<Dashboard> dashboard_;  // null: no --metrics-listen
  std::unique_ptr<TuningServiceImpl> tuning_;
  std::unique_ptr<AgentServiceImpl> agents_;
  std::unique_ptr<FarmServiceImpl> farm_;
  std::unique_ptr<DatabaseServiceImpl> database_;
  std::unique_ptr<TokenAuth> auth_;  // null: open server
  std::unique_ptr<grpc::Server> grpc_;
  int port_ = 0;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  auto server = std::make_unique<ServerImpl>();
  RETURN_IF_ERROR(server->Init(options));
  return server;
}

}  // namespace tuneforge
