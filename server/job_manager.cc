// JobManager: jobs' lifecycle, priorities, tuning loops, persistence and resume.
#include "server/job_manager.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <thread>

#include "compiler/codegen/build.h"
#include "compiler/support/clock.h"
#include "compiler/support/files.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/support/thread_name.h"
#include "compiler/task/task.h"
#include "google/protobuf/util/json_util.h"
#include "server/agent_runner.h"
#include "server/job_target.h"
#include "tuner/search_policy.h"
#include "tuner/tuning_loop.h"

namespace tuneforge {

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

namespace {

const char* StateName(v1::JobState s) {
  switch (s) {
    case v1::QUEUED: return "queued";
    case v1::RUNNING: return "running";
    case v1::SUCCEEDED: return "succeeded";
    case v1::FAILED: return "failed";
    case v1::CANCELLED: return "cancelled";
    default: return "unknown";
  }
}

int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SetBest(const TrialSummary& s, v1::BestResult* out) {
  out->set_config_json(s.config_json);
  out->set_seconds(s.seconds);
  out->set_gflops(s.gflops);
  out->set_record_id(std::to_string(s.record_id));
}

}  // namespace

JobManager::JobManager(Database* db, AgentRegistry* registry, const Builder* builder)
    : db_(db),
      registry_(registry),
      builder_(builder),
      cpu_share_(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2)),
      log_models_(db, LogModelRefresh{}) {
  // Job ids stay unique across server restarts on the same db.
  id_prefix_ = "job-" + std::to_string(NowUnixUs() / 1000000 % 1000000000) + "-";
}

JobManager::~JobManager() {
  CancelAll();
  std::map<std::string, std::unique_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs.swap(jobs_);
  }
  for (auto& [id, job] : jobs)
    if (job->thread.joinable()) job->thread.join();
}

absl::StatusOr<std::string> JobManager::Submit(const v1::JobSpec& spec_in) {
  v1::JobSpec spec = spec_in;
  absl::StatusOr<TuningTask> task = ParseTask(spec.task());
  if (!task.ok()) return task.status();
  if (spec.configs_size() > 0) {
    spec.set_trials(spec.configs_size());  // the budget is exactly the given configs
  }
  if (spec.trials() < 1 || spec.trials() > kMaxTrials) {
    return absl::InvalidArgumentError("trials must be between 1 and " + std::to_string(kMaxTrials) +
                                      ", got " + std::to_string(spec.trials()));
  }
  if (spec.device_key().empty()) spec.set_device_key("local");
  if (spec.policy().empty()) spec.set_policy("model");
  const std::vector<std::string>& policies = SearchPolicyNames();
  if (std::find(policies.begin(), policies.end(), spec.policy()) == policies.end()) {
    return absl::InvalidArgumentError("unknown search policy '" + spec.policy() +
                                      "' (available: model, random, grid, ga)");
  }
  if (spec.early_stop() < 0) return absl::InvalidArgumentError("early_stop must be >= 0");
  if (spec.has_model_early_batch() && (spec.model_early_batch() < 0 || spec.model_early_batch() > kMaxBatch)) {
    return absl::InvalidArgumentError("model_early_batch must be 0.." + std::to_string(kMaxBatch) +
                                      " (0: full batches), got " + std::to_string(spec.model_early_batch()));
  }
  if (spec.measure().max_repeat() < 0 || spec.measure().max_repeat() > kMaxRepeat) {
    return absl::InvalidArgumentError("measure.max_repeat must be 0.." + std::to_string(kMaxRepeat) +
                                      ", got " + std::to_string(spec.measure().max_repeat()));
  }
  if (!(spec.measure().max_spread() >= 0 && spec.measure().max_spread() <= 1)) {
    return absl::InvalidArgumentError("measure.max_spread must be 0..1 (a fraction of the median), got " +
                                      std::to_string(spec.measure().max_spread()));
  }
  if (spec.priority() == 0) spec.set_priority(kDefaultPriority);
  if (spec.priority() < kMinPriority || spec.priority() > kMaxPriority) {
    return absl::InvalidArgumentError("priority must be " + std::to_string(kMinPriority) + ".." +
                                      std::to_string(kMaxPriority) + ", got " +
                                      std::to_string(spec.priority()));
  }
  if (spec.batch_size() < 0 || spec.batch_size() > kMaxBatch) {
    return absl::InvalidArgumentError("batch_size must be 0.." + std::to_string(kMaxBatch));
  }
  Target host = DetectHostTarget(spec.device_key());
  if (!spec.target().empty()) {
    absl::StatusOr<Target> t = ParseTarget(spec.target(), host);
    if (!t.ok()) return t.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = id_prefix_ + std::to_string(next_job_++);
  auto job = std::make_unique<Job>();
  job->status.set_job_id(id);
  *job->status.mutable_spec() = spec;
  job->status.set_state(v1::QUEUED);
  job->status.set_task(task->CanonicalText());
  job->started = std::chrono::steady_clock::now();
  Job* raw = job.get();
  jobs_[id] = std::move(job);
  raw->thread = std::thread([this, raw, spec] { RunJob(raw, spec); });
  return id;
}

// A job's own work between batches (proposing, building, committing records) is
// throughput work; the agents' streams carry measurements whose lease-to-result time
// counts. On a loaded server the job threads yield to dispatch: nice 10 gives them a
// tenth of a dispatch thread's CPU share while both are runnable, and all of it when
// dispatch is idle. Only this thread (Linux: priorities are per thread).
void JobManager::LowerThreadPriority() {
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kJobThreadNice) != 0) {
    TF_LOG(Debug) << "could not lower a job thread's priority: " << std::strerror(errno);
  }
}

void JobManager::Persist(Job* job, const v1::JobStatus& status) {
  JobRow row;
  row.id = status.job_id();
  row.owner = status.spec().owner();
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(status.spec(), &json);
  row.spec_json = json;
  row.state = StateName(status.state());
  row.message = status.message();
  row.updated_unix_us = NowUnixUs();
  row.created_unix_us = row.updated_unix_us;  // kept from the first write (PutJob)
  absl::Status st = db_->PutJob(row);
  if (st.ok()) return;
  TF_LOG(Error) << "could not store job " << row.id << ": " << st;
  const std::string kind = "job state not stored in the db";
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& w : job->server_warnings)
    if (w.rfind(kind, 0) == 0) return;
  job->server_warnings.push_back(kind + " (a server restart would not resume it as it is): " +
                                 std::string(st.message()));
  job->status.add_warnings(job->server_warnings.back());
  ++job->version;
  cv_.notify_all();
}

void JobManager::Update(Job* job, const std::function<void(v1::JobStatus*)>& change) {
  v1::JobStatus snapshot;
  bool state_changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    v1::JobState before = job->status.state();
    change(&job->status);
    job->status.set_elapsed_seconds(SecondsSince(job->started));
    ++job->version;
    state_changed = before != job->status.state();
    snapshot = job->status;
    cv_.notify_all();
  }
  if (state_changed) Persist(job, snapshot);
}

void JobManager::RunJob(Job* job, v1::JobSpec spec) {
  SetThreadName("tf-job " + job->status.job_id());
  LowerThreadPriority();
  v1::JobStatus first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = job->status;
  }
  Persist(job, first);
  TuningTask task = *ParseTask(spec.task());
  // The target comes from the agents of the job's key (server/job_target.h); until one
  // that can run it is connected the job waits and says why.
  const Target host = DetectHostTarget(spec.device_key());
  const std::string host_model = CpuModelOfCpuInfo(ReadFile("/proc/cpuinfo").value_or(""));
  JobTarget resolved;
  std::string said;
  for (;;) {
    std::vector<v1::AgentCapabilities> caps;
    for (const AgentInfo& a : registry_->Agents()) {
      if (a.device_key == spec.device_key() && a.connected && !a.quarantined && !a.draining)
        caps.push_back(a.capabilities);
    }
    resolved = ResolveJobTarget(spec.device_key(), spec.target(), caps, host, host_model);
    if (resolved.ready) break;
    if (job->cancel.load()) {
      Update(job, [&](v1::JobStatus* s) {
        s->set_state(v1::CANCELLED);
        s->set_message("cancelled");
      });
      return;
    }
    if (resolved.waiting != said) {
      said = resolved.waiting;
      TF_LOG(Info) << "job " << job->status.job_id() << ": " << said;
      Update(job, [&](v1::JobStatus* s) {
        s->set_message(said);
        s->set_last_event(said);
      });
    }
    registry_->WaitForAgent(spec.device_key(), 1000);
    std::this_thread::sleep_for(std::chrono::milliseconds(caps.empty() ? 0 : 1000));
  }
  Target target = resolved.target;
  JobCpuShare::Hold working(&cpu_share_);  // given back while the runner waits
  TF_LOG(Info) << "job " << job->status.job_id() << ": target " << target.ToString() << " from "
               << resolved.source;
  Update(job, [&](v1::JobStatus* s) {
    s->set_message("");
    s->set_last_event("target from " + resolved.source);
    s->set_state(v1::RUNNING);
    v1::Target* t = s->mutable_target();
    t->set_triple(target.triple);
    t->set_cpu(target.cpu);
    t->set_features(target.features);
    t->set_num_threads(target.num_threads);
    t->set_device_key(target.device_key);
  });

  TuningOptions options;
  // A resumed job owes only the rest (at least one trial, so it ends with a best).
  // (With count_earlier the loop counts the db's records itself, the job's own included.)
  options.count_earlier = spec.count_earlier();
  options.trials = spec.count_earlier() ? spec.trials() : std::max(1, spec.trials() - job->resumed_trials);
  options.batch_size = spec.batch_size();
  options.seed = spec.seed() ? spec.seed() : 1;
  options.policy = spec.policy();
  options.early_stop = spec.early_stop();
  if (spec.has_model_early_batch()) options.model_early_batch = spec.model_early_batch();
  options.heuristics = !spec.no_heuristics();
  options.job_id = job->status.job_id();
  options.fixed_configs.assign(spec.configs().begin(), spec.configs().end());
  DatabaseModelStore model_store(db_);  // the job's cost model lives in its db
  options.model_store = &model_store;
  if (spec.has_measure()) {
    const v1::MeasureOptions& m = spec.measure();
    if (m.warmup() > 0) options.measure.warmup = m.warmup();
    if (m.number() > 0) options.measure.number = m.number();
    if (m.repeat() > 0) options.measure.repeat = m.repeat();
    if (m.min_repeat_ms() > 0) options.measure.min_repeat_ms = m.min_repeat_ms();
    if (m.timeout_ms() > 0) options.measure.timeout_ms = m.timeout_ms();
    if (m.max_repeat() > 0) options.measure.max_repeat = m.max_repeat();
    if (m.max_spread() > 0) options.measure.max_spread = m.max_spread();
    options.measure.flush_cache = m.flush_cache();
  }
  AgentRunner runner(
      registry_, target.device_key, job->status.job_id(),
      [&](const std::string& why) {
        Update(job, [&](v1::JobStatus* s) {
          s->set_message(why);
          s->set_last_event(why);
        });
      },
      &job->cancel,
      std::clamp(spec.priority() ? spec.priority() : kDefaultPriority, kMinPriority, kMaxPriority),
      target.PlausiblePeakGflops(), &cpu_share_);
  TuningLoop loop(task, target, options, db_, builder_, &runner);
  absl::StatusOr<TuningProgress> result = loop.Run(
      [&](const TuningProgress& p) {
        Update(job, [&](v1::JobStatus* s) {
          s->set_message("");
          s->set_trials_done((spec.count_earlier() ? 0 : job->resumed_trials) + p.trials_done);
          s->set_records(p.records);
          s->set_errors(p.errors);
          s->set_median_build_seconds(p.median_build_seconds);
          s->set_last_event(p.last_event);
          s->clear_warnings();
          for (const std::string& w : p.warnings) s->add_warnings(w);
          for (const std::string& w : job->server_warnings) s->add_warnings(w);
          if (p.best) SetBest(*p.best, s->mutable_best());
          if (p.baseline) SetBest(*p.baseline, s->mutable_baseline());
          s->set_earlier_trials(p.earlier_trials);
          if (p.earlier_best) SetBest(*p.earlier_best, s->mutable_earlier_best());
        });
      },
      &job->cancel);
  // Before the job is seen to end, so a caller that waits for the end and then stops
  // the server finds the refresh done (the refresher finishes what it was asked).
  log_models_.Request(task.op(), target.Key());
  Update(job, [&](v1::JobStatus* s) {
    if (result.ok()) {
      s->set_state(s->has_best() ? v1::SUCCEEDED : v1::FAILED);
      if (!s->has_best()) s->set_message("no candidate ran correctly");
    } else if (absl::IsCancelled(result.status())) {
      s->set_state(v1::CANCELLED);
      s->set_message("cancelled");
    } else {
      s->set_state(v1::FAILED);
      s->set_message(std::string(result.status().message()));
    }
  });
  TF_LOG(Info) << "job " << job->status.job_id() << " finished";
}

absl::StatusOr<v1::JobStatus> JobManager::Get(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job " + job_id);
  return it->second->status;
}

std::vector<v1::JobStatus> JobManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::JobStatus> out;
  for (const auto& [id, job] : jobs_) out.push_back(job->status);
  // Ids end in a counter: order by it, not by text.
  std::sort(out.begin(), out.end(), [](const v1::JobStatus& a, const v1::JobStatus& b) {
    return a.job_id().size() != b.job_id().size() ? a.job_id().size() < b.job_id().size()
                                                  : a.job_id() < b.job_id();
  });
  return out;
}

absl::StatusOr<v1::JobStatus> JobManager::Cancel(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError("no job " + job_id);
  it->second->cancel = true;
  cv_.notify_all();
  return it->second->status;
}

absl::Status JobManager::Watch(const std::string& job_id,
                               const std::function<bool(const v1::JobStatus&)>& on_status) const {
  int64_t seen = -1;
  for (;;) {
    v1::JobStatus snapshot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = jobs_.find(job_id);
      if (it == jobs_.end()) return absl::NotFoundError("no job " + job_id);
      Job* job = it->second.get();
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return job->version != seen; });
      if (job->version == seen) continue;
      seen = job->version;
      snapshot = job->status;
    }
    if (!on_status(snapshot) || IsTerminal(snapshot.state())) return absl::OkStatus();
  }
}

absl::StatusOr<int> JobManager::ResumeStoredJobs() {
  absl::StatusOr<std::vector<JobRow>> rows = db_->ListJobs();
  if (!rows.ok()) {
    return absl::Status(rows.status().code(),
                        "cannot list the stored jobs to resume them: " + std::string(rows.status().message()));
  }
  int resumed = 0;
  for (const JobRow& row : *rows) {
    if (row.state != "queued" && row.state != "running") continue;
    v1::JobSpec spec;
    absl::StatusOr<TuningTask> task;
    if (!google::protobuf::util::JsonStringToMessage(row.spec_json, &spec).ok() ||
        !(task = ParseTask(spec.task())).ok()) {
      TF_LOG(Error) << "stored job " << row.id << " has an unreadable spec; not resumed";
      JobRow failed = row;
      failed.state = "failed";
      failed.message = "not resumed after a server restart: its stored spec does not read";
      failed.updated_unix_us = NowUnixUs();
      RETURN_IF_ERROR(db_->PutJob(failed));
      continue;
    }
    int recorded = 0;
    absl::StatusOr<std::vector<TuningRecord>> records = db_->Records(task->WorkloadKey(), "");
    if (records.ok()) {
      for (const TuningRecord& r : *records) recorded += r.job_id == row.id;
    }
    auto job = std::make_unique<Job>();
    job->resumed_trials = std::clamp(recorded - 1, 0, std::max(0, spec.trials() - 1));  // minus the baseline
    job->status.set_job_id(row.id);
    *job->status.mutable_spec() = spec;
    job->status.set_state(v1::QUEUED);
    job->status.set_task(task->CanonicalText());
    job->status.set_trials_done(job->resumed_trials);
    job->status.set_last_event("resumed after a server restart: " +
                               std::to_string(job->resumed_trials) + " of " +
                               std::to_string(spec.trials()) + " trials were already recorded");
    job->started = std::chrono::steady_clock::now();
    TF_LOG(Info) << "job " << row.id << ": " << job->status.last_event();
    std::lock_guard<std::mutex> lock(mu_);
    Job* raw = job.get();
    jobs_[row.id] = std::move(job);
    raw->thread = std::thread([this, raw, spec] { RunJob(raw, spec); });
    ++resumed;
  }
  return resumed;
}

void JobManager::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, job] : jobs_) job->cancel = true;
  cv_.notify_all();
}

}  // namespace tuneforge
