// FarmService (proto/tuneforge/v1/farm.proto): the farm at a glance, agents and the
// jobs a caller may see (`tuneforge farm status`).
#pragma once

#include "server/agent_registry.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "tuneforge/v1/farm.grpc.pb.h"

namespace tuneforge {

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

}  // namespace tuneforge
