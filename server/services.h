// The gRPC handlers. Thin: translate proto <-> domain, call the domain, translate
// back. No tuning logic here.
#pragma once

#include "server/agent_health.h"
#include "server/agent_registry.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "tuneforge/v1/agent.grpc.pb.h"
#include "tuneforge/v1/farm.grpc.pb.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {

class TuningServiceImpl final : public v1::TuningService::Service {
 public:
  TuningServiceImpl(JobManager* jobs, const TokenAuth* auth) : jobs_(jobs), auth_(auth) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::JobRequest*,
                        grpc::ServerWriter<v1::JobStatus>*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::JobRequest*, v1::JobStatus*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::JobRequest*, v1::JobStatus*) override;

 private:
  // The job, if `who` may see it: its owner or an admin. NOT_FOUND otherwise, so
  // other users' job ids are not revealed.
  grpc::Status OwnJob(const Principal& who, const std::string& job_id, v1::JobStatus* status);

  JobManager* jobs_;
  const TokenAuth* auth_;  // null: open server
};

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  // `health` (may be null: no golden-kernel checks) checks every agent that connects.
  // `require_client_certificate` (mutual TLS, ServerOptions::tls_client_ca_path):
  // every call must come with a verified client certificate, and a registration is
  // bound to the certificate's identity as well as to the token's principal.
  AgentServiceImpl(AgentRegistry* registry, AgentHealth* health, const TokenAuth* auth,
                   bool require_client_certificate = false)
      : registry_(registry), health_(health), auth_(auth),
        require_client_certificate_(require_client_certificate) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse*) override;
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>*) override;

 private:
  AgentRegistry* registry_;
  AgentHealth* health_;
  const TokenAuth* auth_;
  const bool require_client_certificate_;

  // Authorizes an agent call; `identity` gets what the registration is bound to: the
  // token's principal and, with mutual TLS, the client certificate's identity.
  grpc::Status AuthorizeAgent(grpc::ServerContext* ctx, std::string* identity) const;
};

class FarmServiceImpl final : public v1::FarmService::Service {
 public:
  FarmServiceImpl(AgentRegistry* registry, JobManager* jobs, const TokenAuth* auth)
      : registry_(registry), jobs_(jobs), auth_(auth) {}
  grpc::Status Status(grpc::ServerContext*, const v1::FarmStatusRequest*, v1::FarmStatus*) override;

 private:
  AgentRegistry* registry_;
  JobManager* jobs_;
  const TokenAuth* auth_;
};

grpc::Status ToGrpc(const absl::Status& s);

}  // namespace tuneforge
