// The TuningService and AgentService gRPC handlers (proto <-> domain).
#include "server/services.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

#include "compiler/codegen/build.h"
#include "compiler/support/files.h"
#include "compiler/support/log.h"
#include "compiler/support/thread_name.h"
#include "server/job_target.h"

namespace tuneforge {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case absl::StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case absl::StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case absl::StatusCode::kCancelled: code = grpc::StatusCode::CANCELLED; break;
    case absl::StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    default: code = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(code, std::string(s.message()));
}

grpc::Status TuningServiceImpl::OwnJob(const Principal& who, const std::string& job_id,
                                       v1::JobStatus* status) {
  absl::StatusOr<v1::JobStatus> s = jobs_->Get(job_id);
  if (!s.ok()) return ToGrpc(s.status());
  if (auth_ && who.role != Role::kAdmin && s->spec().owner() != who.name) {
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
  grpc::Status st = Authorize(auth_, ctx, {Role::kUser, Role::kAdmin}, &who);
  if (st.ok()) st = OwnJob(who, req->job_id(), &ignored);
  if (!st.ok()) return st;
  return ToGrpc(jobs_->Watch(req->job_id(), [&](const v1::JobStatus& s) {
    return !ctx->IsCancelled() && writer->Write(s);
  }));
}

grpc::Status TuningServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::JobRequest* req,
                                       v1::JobStatus* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kUser, Role::kAdmin}, &who);
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

grpc::Status AgentServiceImpl::AuthorizeAgent(grpc::ServerContext* ctx,
                                              std::string* identity) const {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kAgent, Role::kAdmin}, &who);
  if (!st.ok()) return st;
  *identity = who.name;
  if (!require_client_certificate_) return grpc::Status::OK;
  // gRPC verified the certificate against the client CA during the handshake; the
  // peer identity is its subjectAltName entries, or its common name without them.
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  std::string certificate;
  if (auth && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref& name : auth->GetPeerIdentity()) {
      if (!certificate.empty()) certificate += ",";
      certificate.append(name.data(), name.size());
    }
  }
  if (certificate.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this server requires agents to present a client certificate signed by "
                        "its agents' CA (mutual TLS): give the agent --tls-cert and --tls-key");
  }
  absl::StrAppend(identity, " certificate ", certificate);
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                        v1::RegisterResponse* resp) {
  std::string identity;
  grpc::Status st = AuthorizeAgent(ctx, &identity);
  if (!st.ok()) return st;
  if (req->device_key().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "device_key must not be empty");
  }
  if (req->workers() < 0 || req->workers() > 256) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "workers must be 0..256");
  }
  // The peak-speed bound on results scales with the cores: an agent may not claim
  // more than any machine has.
  if (req->capabilities().cores() < 0 || req->capabilities().cores() > Target::kMaxThreads) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "capabilities.cores must be 0.." + std::to_string(Target::kMaxThreads) +
                            ", got " + std::to_string(req->capabilities().cores()));
  }
  std::string session_token;
  std::string id = registry_->Register(req->device_key(), req->capabilities(),
                                       std::max(1, req->workers()), /*checking=*/health_ != nullptr,
                                       identity, &session_token);
  TF_LOG(Info) << "agent " << id << " registered from " << ctx->peer() << " with device key '"
               << req->device_key() << "' (" << req->capabilities().cpu_model() << ", "
               << req->capabilities().cores() << " cores)";
  resp->set_agent_id(id);
  resp->set_session_token(session_token);
  resp->set_heartbeat_interval_ms(registry_->options().heartbeat_interval_ms);
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::Connect(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream) {
  std::string identity;
  grpc::Status st = AuthorizeAgent(ctx, &identity);
  if (!st.ok()) return st;
  v1::AgentMessage hello;
  if (!stream->Read(&hello) || hello.kind_case() != v1::AgentMessage::kHelloAgentId) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be hello");
  }
  const std::string agent_id = hello.hello_agent_id();
  switch (registry_->ConnectSession(agent_id, hello.hello_session_token(), identity)) {
    case AgentRegistry::SessionCheck::kOk:
      break;
    case AgentRegistry::SessionCheck::kUnknown:
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "unknown agent id " + agent_id + "; register first");
    case AgentRegistry::SessionCheck::kWrongSession:
      TF_LOG(Warning) << "refused a stream for " << agent_id << " from " << ctx->peer()
                      << ": wrong session token";
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "session token does not match the registration of " + agent_id);
    case AgentRegistry::SessionCheck::kWrongPrincipal:
      TF_LOG(Warning) << "refused a stream for " << agent_id << " from " << ctx->peer()
                      << ": registered by another principal";
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          agent_id + " was registered with another token" +
                              (require_client_certificate_ ? " or client certificate" : ""));
    case AgentRegistry::SessionCheck::kAlreadyConnected:
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          agent_id + " is already connected; register to get a new id");
  }
  if (health_) health_->CheckAgent(agent_id);  // queued before any other work
  // Reader: results and heartbeats up. Writer (this thread): requests down.
  std::thread reader([&] {
    SetThreadName("tf-agent-read");
    v1::AgentMessage msg;
    while (stream->Read(&msg)) {
      if (msg.has_result()) {
        v1::MeasureResult r = msg.result();
        r.set_agent_id(agent_id);
        registry_->Complete(agent_id, r);
      } else if (msg.has_heartbeat()) {
        const auto& ids = msg.heartbeat().request_ids();
        registry_->Heartbeat(agent_id, msg.heartbeat().unix_ms(),
                             std::vector<std::string>(ids.begin(), ids.end()));
      } else if (msg.has_drain()) {
        const auto& ids = msg.drain().handback_request_ids();
        registry_->Drain(agent_id, std::vector<std::string>(ids.begin(), ids.end()));
      }
    }
    registry_->Disconnect(agent_id);
  });
  v1::MeasureRequest request;
  while (registry_->NextRequest(agent_id, &request)) {
    v1::ServerMessage out;
    *out.mutable_request() = std::move(request);
    if (!stream->Write(out)) break;
  }
  // The agent went away, or the server is shutting down: end the stream so the
  // reader's Read returns.
  if (!ctx->IsCancelled()) ctx->TryCancel();
  reader.join();
  registry_->Disconnect(agent_id);
  TF_LOG(Info) << "agent " << agent_id << " disconnected";
  return grpc::Status::OK;
}

}  // namespace tuneforge

namespace tuneforge {

grpc::Status FarmServiceImpl::Status(grpc::ServerContext* ctx, const v1::FarmStatusRequest*,
                                     v1::FarmStatus* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kUser, Role::kAdmin}, &who);
  if (!st.ok()) return st;
  const Target host = DetectHostTarget("");
  const std::string host_model = CpuModelOfCpuInfo(ReadFile("/proc/cpuinfo").value_or(""));
  for (const AgentInfo& a : registry_->Agents()) {
    v1::AgentStatus* out = resp->add_agents();
    out->set_launcher(a.capabilities.launcher());
    JobTarget t = ResolveJobTarget(a.device_key, "", {a.capabilities}, host, host_model);
    if (t.ready) out->set_target(t.target.ToString());
    out->set_agent_id(a.id);
    out->set_device_key(a.device_key);
    out->set_state(a.State());
    out->set_hostname(a.capabilities.hostname());
    out->set_cpu_model(a.capabilities.cpu_model());
    out->set_triple(a.capabilities.triple());
    out->set_cores(a.capabilities.cores());
    out->set_in_flight(a.in_flight);
    out->set_measurements(a.measurements);
    out->set_errors(a.errors);
    out->set_last_heartbeat_unix_ms(a.last_heartbeat_unix_ms);
    out->set_state_reason(a.state_reason);
    out->set_workers(a.workers);
    out->set_golden_seconds(a.golden_seconds);
    out->set_lease_expiries(a.lease_expiries);
  }
  AgentRegistry::Counters counters = registry_->Stats();
  resp->set_queued_requests(counters.queued);
  resp->set_leases(counters.leased);
  resp->set_redispatches(counters.redispatches);
  resp->set_dropped_results(counters.dropped_results);
  for (const v1::JobStatus& j : jobs_->List()) {
    if (auth_ && who.role != Role::kAdmin && j.spec().owner() != who.name) continue;
    v1::JobSummary* out = resp->add_jobs();
    out->set_job_id(j.job_id());
    out->set_owner(j.spec().owner());
    out->set_task(j.task());
    out->set_state(v1::JobState_Name(j.state()));
    out->set_trials_done(j.trials_done());
    out->set_trials(j.spec().trials());
    out->set_trials_per_second(j.elapsed_seconds() > 0 ? j.trials_done() / j.elapsed_seconds() : 0);
    out->set_best_gflops(j.best().gflops());
    *out->mutable_warnings() = j.warnings();
    out->set_message(j.message());
    out->set_priority(j.spec().priority());
  }
  return grpc::Status::OK;
}

}  // namespace tuneforge
