// FarmService's handler: agents and visible jobs as one FarmStatus.
#include "server/farm_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/build.h"
#include "compiler/support/files.h"
#include "server/job_target.h"

namespace tuneforge {

grpc::Status FarmServiceImpl::Status(grpc::ServerContext* ctx, const v1::FarmStatusRequest*,
                                     v1::FarmStatus* resp) {
  Principal who;
  grpc::Status st = Authorize(auth_, ctx, {Role::kViewer, Role::kUser, Role::kAdmin}, &who);
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
    // Admins and viewers (read-only) see every job; a user only theirs.
    if (auth_ && who.role != Role::kAdmin && who.role != Role::kViewer && j.spec().owner() != who.name) continue;
    v1::JobSummary* out = resp->add_jobs();
    out->set_job_id(j.job_id());
    out->set_owner(j.spec().owner());
    // A job of several tasks: their count and the first (the status has them all).
    if (j.spec().tasks_size() == 0) {
      out->set_task(j.task());
    } else if (!j.spec().model_name().empty()) {
      out->set_task(absl::StrCat(j.spec().model_name(), ": ", j.spec().tasks_size(), " tasks"));
    } else {
      out->set_task(absl::StrCat(j.spec().tasks_size(), " tasks: ", j.spec().tasks(0).task(),
                                 j.spec().tasks_size() > 1 ? ", ..." : ""));
    }
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
