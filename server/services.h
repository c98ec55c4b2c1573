// The gRPC handlers. Thin: translate proto <-> domain, call the domain, translate
// back. No tuning logic here.
#pragma once

#include "server/agent_registry.h"
#include "server/job_manager.h"
#include "tuneforge/v1/agent.grpc.pb.h"
#include "tuneforge/v1/farm.grpc.pb.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {

class TuningServiceImpl final : public v1::TuningService::Service {
 public:
  explicit TuningServiceImpl(JobManager* jobs) : jobs_(jobs) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::JobRequest*,
                        grpc::ServerWriter<v1::JobStatus>*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::JobRequest*, v1::JobStatus*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::JobRequest*, v1::JobStatus*) override;

 private:
  JobManager* jobs_;
};

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  explicit AgentServiceImpl(AgentRegistry* registry) : registry_(registry) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse*) override;
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>*) override;

  static constexpr int kHeartbeatIntervalMs = 2000;

 private:
  AgentRegistry* registry_;
};

class FarmServiceImpl final : public v1::FarmService::Service {
 public:
  FarmServiceImpl(AgentRegistry* registry, JobManager* jobs) : registry_(registry), jobs_(jobs) {}
  grpc::Status Status(grpc::ServerContext*, const v1::FarmStatusRequest*, v1::FarmStatus*) override;

 private:
  AgentRegistry* registry_;
  JobManager* jobs_;
};

grpc::Status ToGrpc(const absl::Status& s);

}  // namespace tuneforge
