// TuningService (proto/tuneforge/v1/tuning.proto): submit, watch, get and cancel
// jobs; upload models. Thin: proto <-> JobManager and ModelFiles, a user sees only
// the jobs they own (an admin all).
#pragma once

#include "server/auth.h"
#include "server/job_manager.h"
#include "server/model_files.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {

class TuningServiceImpl final : public v1::TuningService::Service {
 public:
  TuningServiceImpl(JobManager* jobs, ModelFiles* models, const TokenAuth* auth)
      : jobs_(jobs), models_(models), auth_(auth) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::JobRequest*,
                        grpc::ServerWriter<v1::JobStatus>*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::JobRequest*, v1::JobStatus*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::JobRequest*, v1::JobStatus*) override;
  grpc::Status UploadModel(grpc::ServerContext*, grpc::ServerReader<v1::ModelChunk>*, v1::ModelUploaded*) override;

 private:
  // The job, if `who` may see it: its owner or an admin. NOT_FOUND otherwise, so
  // other users' job ids are not revealed.
  grpc::Status OwnJob(const Principal& who, const std::string& job_id, v1::JobStatus* status);

  JobManager* jobs_;
  ModelFiles* models_;
  const TokenAuth* auth_;  // null: open server
};

}  // namespace tuneforge
