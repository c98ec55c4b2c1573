// TuningService's handlers: jobs submitted, watched, read and cancelled.
#include "server/tuning_service.h"

#include <string>
#include <vector>

#include "server/grpc_status.h"

namespace tuneforge {

grpc::Status TuningServiceImpl::OwnJob(const Principal& who, const std::string& job_id,
                                       v1::JobStatus* status) {
  absl::StatusOr<v1::JobStatus> s = jobs_->Get(job_id);
  if (!s.ok()) return ToGrpc(s.status());
  // Admins and viewers (read-only) see every job; a user only theirs.
  if (auth_ && who.role != Role::kAdmin && who.role != Role::kViewer && s->spec().owner() != who.name) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + job_id);
  }
  *status = *s;
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                          v1::SubmitJobResponse* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kUser, Role::kAdmin}, &who);
  if (!st.ok()) return st;
  v1::JobSpec spec = req->spec();
  if (auth_) spec.set_owner(who.name);  // the token, not the request, says who owns it
  absl::StatusOr<std::string> id = jobs_->Submit(spec);
  if (!id.ok()) return ToGrpc(id.status());
  resp->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::JobRequest* req,
                                         grpc::ServerWriter<v1::JobStatus>* writer) {
  Principal who;
  v1::JobStatus ignored;
  grpc::Status st = Authorize(auth_, ctx, {Role::kViewer, Role::kUser, Role::kAdmin}, &who);
  if (st.ok()) st = OwnJob(who, req->job_id(), &ignored);
  if (!st.ok()) return st;
  return ToGrpc(jobs_->Watch(req->job_id(), [&](const v1::JobStatus& s) {
    return !ctx->IsCancelled() && writer->Write(s);
  }));
}

grpc::Status TuningServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::JobRequest* req,
                                       v1::JobStatus* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kViewer, Role::kUser, Role::kAdmin}, &who);
  return st.ok() ? OwnJob(who, req->job_id(), resp) : st;
}

grpc::Status TuningServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::JobRequest* req,
                                          v1::JobStatus* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kUser, Role::kAdmin}, &who);
  if (st.ok()) st = OwnJob(who, req->job_id(), resp);
  if (!st.ok()) return st;
  absl::StatusOr<v1::JobStatus> s = jobs_->Cancel(req->job_id());
  if (!s.ok()) return ToGrpc(s.status());
  *resp = *s;
  return grpc::Status::OK;
}

grpc::Status TuningServiceImpl::UploadModel(grpc::ServerContext* ctx, grpc::ServerReader<v1::ModelChunk>* reader,
                                            v1::ModelUploaded* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kUser, Role::kAdmin}, &who);
  if (!st.ok()) return st;
  v1::ModelChunk chunk;
  std::string bytes, name;
  std::vector<std::string> dims, shapes;
  for (bool first = true; reader->Read(&chunk); first = false) {
    if (first) {
      name = chunk.name().empty() ? "model.onnx" : chunk.name();
      dims.assign(chunk.dims().begin(), chunk.dims().end());
      shapes.assign(chunk.shapes().begin(), chunk.shapes().end());
    }
    // Refused while it streams, not after the whole of it is in memory.
    if (static_cast<int64_t>(bytes.size() + chunk.data().size()) > models_->max_bytes()) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          name + ": more than this server's limit of " + std::to_string(models_->max_bytes()) +
                              " bytes for a model (tuneforge-server --max-model-bytes)");
    }
    bytes += chunk.data();
  }
  if (bytes.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "UploadModel: no bytes were sent");
  absl::StatusOr<UploadedModel> model = models_->Put(name, bytes, dims, shapes);
  if (!model.ok()) return ToGrpc(model.status());
  resp->set_model_hash(model->hash);
  resp->set_bytes(model->bytes);
  resp->set_leftovers(model->leftovers);
  for (const v1::WeightedTask& t : model->tasks) *resp->add_tasks() = t;
  return grpc::Status::OK;
}

}  // namespace tuneforge
