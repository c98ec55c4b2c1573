// JobManager: jobs' lifecycle, priorities, tuning loops, persistence and resume.
#include "server/job_manager.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tuner/search_policy.h"
#include "tuner/model_timing.h"
#include "tuner/task_rounds.h"
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

// A job of several tasks: each task parses (stored as its canonical text, weight 0
// as 1), within the limits; not with fixed configs.
absl::Status CheckTasksOfJob(v1::JobSpec* spec) {
  if (!spec->task().empty()) {
    return absl::InvalidArgumentError("a job has either a task or a list of tasks, not both (task '" +
                                      spec->task() + "' and " + std::to_string(spec->tasks_size()) +
                                      " tasks)");
  }
  if (spec->configs_size() > 0) {
    return absl::InvalidArgumentError("fixed configs are for a job of one task, not of " +
                                      std::to_string(spec->tasks_size()));
  }
  if (spec->tasks_size() > JobManager::kMaxTasks) {
    return absl::InvalidArgumentError("at most " + std::to_string(JobManager::kMaxTasks) +
                                      " tasks in a job, got " + std::to_string(spec->tasks_size()));
  }
  if (spec->round_trials() < 0 || spec->round_trials() > JobManager::kMaxTrials) {
    return absl::InvalidArgumentError("round_trials must be 0.." + std::to_string(JobManager::kMaxTrials) +
                                      " (0: " + std::to_string(JobManager::kDefaultRoundTrials) +
                                      "), got " + std::to_string(spec->round_trials()));
  }
  if (spec->flat_rounds() < 0 || spec->flat_rounds() > JobManager::kMaxFlatRounds) {
    return absl::InvalidArgumentError("flat_rounds must be 0.." + std::to_string(JobManager::kMaxFlatRounds) +
                                      " (0: never stop a task early), got " +
                                      std::to_string(spec->flat_rounds()));
  }
  if (!spec->scheduler().empty() && spec->scheduler() != "gradient" && spec->scheduler() != "round-robin") {
    return absl::InvalidArgumentError("scheduler must be gradient or round-robin, got '" + spec->scheduler() + "'");
  }
  std::set<std::string> seen;
  for (int i = 0; i < spec->tasks_size(); ++i) {
    v1::WeightedTask* t = spec->mutable_tasks(i);
    absl::StatusOr<TuningTask> task = ParseTask(t->task());
    if (!task.ok()) {
      return absl::Status(task.status().code(),
                          "task " + std::to_string(i + 1) + ": " + std::string(task.status().message()));
    }
    if (t->weight() == 0) t->set_weight(1);
    if (!(t->weight() > 0 && t->weight() <= JobManager::kMaxWeight)) {
      return absl::InvalidArgumentError(absl::StrCat("task ", i + 1, " (", t->task(), "): weight must be > 0 and <= ",
                                                     JobManager::kMaxWeight, " (0: 1), got ", t->weight()));
    }
    t->set_task(task->CanonicalText());
    if (!seen.insert(t->task()).second) {
      return absl::InvalidArgumentError("task " + std::to_string(i + 1) + " (" + t->task() +
                                        ") is listed twice: give it once, with the sum of the weights");
    }
  }
  return absl::OkStatus();
}

}  // namespace

JobManager::JobManager(Database* db, AgentRegistry* registry, const Builder* builder, const ModelFiles* models)
    : db_(db),
      registry_(registry),
      builder_(builder),
      models_(models),
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
  std::string canonical;  // the job's task, or "" for a job of several
  if (!spec.model_hash().empty()) {
    // An uploaded model: its task table becomes the job's tasks (stored with the
    // spec, so a resumed job does not need the model again).
    if (spec.tasks_size() > 0 || !spec.task().empty()) {
      return absl::InvalidArgumentError("a job of a model (model_hash) lists no task or tasks of its own");
    }
    if (models_ == nullptr) return absl::FailedPreconditionError("this server takes no uploaded models");
    ASSIGN_OR_RETURN(UploadedModel model,
                     models_->Get(spec.model_hash(), {spec.model_dims().begin(), spec.model_dims().end()},
                                  {spec.model_shapes().begin(), spec.model_shapes().end()}));
    for (const v1::WeightedTask& t : model.tasks) *spec.add_tasks() = t;
  } else if (!spec.model_dims().empty() || !spec.model_shapes().empty()) {
    return absl::InvalidArgumentError("model_dims and model_shapes go with model_hash");
  }
  if (spec.tasks_size() > 0) {
    RETURN_IF_ERROR(CheckTasksOfJob(&spec));
  } else {
    absl::StatusOr<TuningTask> task = ParseTask(spec.task());
    if (!task.ok()) return task.status();
    canonical = task->CanonicalText();
  }
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
  job->status.set_task(canonical);
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
  if (spec.tasks_size() > 0) {
    RunTasksInRounds(job, spec, target, options, &runner);
    return;
  }
  TuningTask task = *ParseTask(spec.task());
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

void JobManager::RunTasksInRounds(Job* job, const v1::JobSpec& spec, const Target& target,
                                  const TuningOptions& base, Runner* runner) {
  std::vector<TuningTask> tasks;
  std::vector<SchedulerTask> scheduled;
  std::set<std::string> ops;
  for (const v1::WeightedTask& t : spec.tasks()) {
    tasks.push_back(*ParseTask(t.task()));  // checked by Submit or ResumeStoredJobs
    scheduled.push_back(SchedulerTask{t.weight(), tasks.back().Flops(), tasks.back().op()});
    ops.insert(tasks.back().op());
  }
  TaskSchedulerOptions so;
  so.total_trials = spec.trials();
  so.round_trials = spec.round_trials() > 0 ? spec.round_trials() : kDefaultRoundTrials;
  so.flat_rounds = spec.flat_rounds();
  so.round_robin = spec.scheduler() == "round-robin";
  TaskScheduler scheduler(scheduled, so);
  std::vector<std::optional<TrialSummary>> best(tasks.size());
  std::vector<std::string> errors(tasks.size());
  std::vector<int> new_trials(tasks.size(), 0);  // measured by this job (ended rounds)
  std::vector<std::string> warnings;  // the rounds', each once, prefixed with its task

  // A model job's model, timed here when this CPU is the job's target: its leftovers
  // join the estimate and its runs with the db's best schedules set the in-run factors.
  std::optional<graph::Graph> model;
  v1::ModelTiming timing;
  if (!spec.model_hash().empty()) model = TimeModel(spec, target, &timing, &warnings);
  std::vector<std::string> task_texts;
  for (const v1::WeightedTask& t : spec.tasks()) task_texts.push_back(t.task());

  // The estimate from the bests so far (the running round's included); +inf until
  // every task has one.
  auto estimated = [&] {
    double sum = timing.timed() ? timing.leftover_seconds() : 0;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!best[i]) return static_cast<double>(INFINITY);
      sum += scheduler.weight(static_cast<int>(i)) * scheduler.in_run_factor(static_cast<int>(i)) * best[i]->seconds;
    }
    return sum;
  };
  // The status of every task as the scheduler has it.
  auto fill = [&](v1::JobStatus* s, int spent) {
    s->set_trials_done(spent);
    s->clear_tasks();
    for (size_t i = 0; i < tasks.size(); ++i) {
      v1::TaskProgress* t = s->add_tasks();
      t->set_task(spec.tasks(static_cast<int>(i)).task());
      t->set_weight(spec.tasks(static_cast<int>(i)).weight());
      t->set_trials(scheduler.trials()[i]);
      t->set_rounds(scheduler.rounds(static_cast<int>(i)));
      t->set_flat(scheduler.flat(static_cast<int>(i)));
      t->set_error(errors[i]);
      t->set_in_run_factor(scheduler.in_run_factor(static_cast<int>(i)));
      t->set_new_trials(new_trials[i]);
      if (best[i]) SetBest(*best[i], t->mutable_best());
    }
    const double e = estimated();
    s->set_estimated_seconds(std::isfinite(e) ? e : 0);
    if (!spec.model_hash().empty()) *s->mutable_model_timing() = timing;
    s->clear_warnings();
    for (const std::string& w : warnings) s->add_warnings(w);
    for (const std::string& w : job->server_warnings) s->add_warnings(w);
  };
  // The model run here with the db's best schedules: the in-run factors and leftovers
  // from the run. A failure leaves the estimate as it was, and says so.
  int spent_at_last_run = -1;  // the scheduler's spent budget when the model last ran
  auto time_in_run = [&](const char* when) {
    if (!model || !std::isfinite(scheduler.Objective())) return;
    Update(job, [&](v1::JobStatus* s) { s->set_last_event(absl::StrCat("running the model ", when)); });
    absl::StatusOr<InRunTime> m = MeasureInRun(*model, task_texts, db_, target);
    if (!m.ok()) {
      warnings.push_back(absl::StrCat("the model's run ", when, " failed (the estimate keeps the factors it had): ",
                                      m.status().message()));
      return;
    }
    if (m->unmatched_task_steps > 0) {
      warnings.push_back(absl::StrCat(m->unmatched_task_steps, " kernel step(s) of the model's run ", when,
                                      " matched no task; their time counts as leftovers"));
    }
    timing.set_estimated_before_seconds(std::isfinite(estimated()) ? estimated() : 0);
    CalibrateInRun(*m, &scheduler);
    timing.set_leftover_seconds(m->leftover_seconds);
    timing.set_measured_seconds(m->model_seconds);
    timing.set_measured_runs(m->runs);
    timing.set_measured_when(when);
    timing.set_in_runs(timing.in_runs() + 1);
    spent_at_last_run = scheduler.spent();
  };
  bool after_warmup = false, at_half = false;
  auto keep_best = [&](int i, const std::optional<TrialSummary>& b) {
    if (b && b->seconds > 0 && (!best[i] || b->seconds < best[i]->seconds)) best[i] = b;
  };

  // A round is a tuning loop of its task that counts the db's earlier configs of it on
  // this target (count_earlier): what it spent is what the task's total grew by.
  auto run = [&](const RoundInfo& r) -> absl::StatusOr<RoundResult> {
    const int i = r.task;
    const std::string name = absl::StrCat("task ", i + 1, "/", tasks.size(), " (", tasks[i].CanonicalText(), ")");
    TuningOptions options = base;
    options.count_earlier = true;
    options.trials = r.trials_before + r.trials;
    options.seed = r.seed;
    TuningLoop loop(tasks[i], target, options, db_, builder_, runner);
    const int spent_before = scheduler.spent();
    absl::StatusOr<TuningProgress> done = loop.Run(
        [&](const TuningProgress& p) {
          keep_best(i, p.best);
          keep_best(i, p.earlier_best);
          for (const std::string& w : p.warnings) {
            const std::string line = name + ": " + w;
            if (std::find(warnings.begin(), warnings.end(), line) == warnings.end()) warnings.push_back(line);
          }
          const int grown = std::max(0, p.earlier_trials + p.trials_done - r.trials_before);
          Update(job, [&](v1::JobStatus* s) {
            s->set_message("");
            s->set_last_event(absl::StrCat("round ", r.round + 1, ", ", name, ": ", p.last_event));
            fill(s, spent_before + std::min(grown, r.trials));
          });
        },
        &job->cancel);
    if (!done.ok() && absl::IsCancelled(done.status())) return done.status();
    RoundResult out;
    out.spent = r.trials;
    if (done.ok()) {
      out.spent = std::max(0, done->earlier_trials + done->trials_done - r.trials_before);
      out.new_trials = done->trials_done;
      new_trials[i] += done->trials_done;
      errors[i].clear();
    } else {
      out.ok = false;
      out.error = std::string(done.status().message());
      errors[i] = out.error;
      TF_LOG(Warning) << "job " << job->status.job_id() << ": round " << r.round + 1 << " of " << name
                      << " failed: " << out.error;
    }
    out.best_seconds = best[i] ? best[i]->seconds : INFINITY;
    return out;
  };
  auto after = [&](const RoundInfo&, const RoundResult&) {
    bool warm = true;
    for (size_t t = 0; t < tasks.size(); ++t) warm &= scheduler.rounds(static_cast<int>(t)) > 0;
    if (warm && !after_warmup) {
      after_warmup = true;
      time_in_run("after the warm-up");
    } else if (after_warmup && !at_half && 2 * scheduler.spent() >= spec.trials()) {
      at_half = true;
      time_in_run("at half the budget");
    }
    Update(job, [&](v1::JobStatus* s) { fill(s, scheduler.spent()); });
  };
  absl::StatusOr<RoundsSummary> rounds = RunRounds(&scheduler, spec.trials(), spec.seed() ? spec.seed() : 1, run, after);
  if (rounds.ok()) {
    // No round since the last run (the warm-up's was the last round): that run had the
    // final schedules already.
    if (spent_at_last_run == scheduler.spent()) timing.set_measured_when("at the end");
    else time_in_run("at the end");
  }
  for (const std::string& op : ops) log_models_.Request(op, target.Key());
  Update(job, [&](v1::JobStatus* s) {
    fill(s, scheduler.spent());
    if (!rounds.ok()) {
      const bool cancelled = absl::IsCancelled(rounds.status());
      s->set_state(cancelled ? v1::CANCELLED : v1::FAILED);
      s->set_message(cancelled ? "cancelled" : std::string(rounds.status().message()));
      return;
    }
    std::vector<std::string> without;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (!best[i]) without.push_back(tasks[i].CanonicalText());
    s->set_last_event(absl::StrCat(rounds->rounds, " rounds, ", scheduler.spent(), " trials: ", rounds->stop_reason));
    if (without.empty()) {
      s->set_state(v1::SUCCEEDED);
      s->set_message("");
    } else {
      s->set_state(v1::FAILED);
      s->set_message(absl::StrCat("no config ran correctly for ", without.size(), " of ", tasks.size(),
                                  " tasks: ", absl::StrJoin(without, "; ")));
    }
  });
  TF_LOG(Info) << "job " << job->status.job_id() << " finished";
}

std::optional<graph::Graph> JobManager::TimeModel(const v1::JobSpec& spec, const Target& target,
                                                  v1::ModelTiming* timing, std::vector<std::string>* warnings) const {
  if (models_ == nullptr) {
    timing->set_not_timed_reason("this server keeps no uploaded models");
    return std::nullopt;
  }
  if (!RunsHereAsOnDevice(target)) {
    timing->set_not_timed_reason("the job's target (" + target.ToString() +
                                 ") is not this server's CPU: the estimate is the tasks as measured alone");
    return std::nullopt;
  }
  absl::StatusOr<UploadedModel> m = models_->Get(spec.model_hash(), {spec.model_dims().begin(), spec.model_dims().end()},
                                                 {spec.model_shapes().begin(), spec.model_shapes().end()});
  absl::StatusOr<LeftoverTime> leftovers =
      m.ok() ? MeasureLeftovers(m->graph, target.num_threads) : absl::StatusOr<LeftoverTime>(m.status());
  if (!leftovers.ok()) {
    timing->set_not_timed_reason(absl::StrCat("timing the model failed: ", leftovers.status().message()));
    warnings->push_back(absl::StrCat("the estimate is the tasks as measured alone: ", timing->not_timed_reason()));
    return std::nullopt;
  }
  timing->set_timed(true);
  timing->set_untuned_seconds(leftovers->untuned_seconds);
  timing->set_leftover_seconds(leftovers->leftover_seconds);
  return std::move(m->graph);
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
    const bool spec_reads = google::protobuf::util::JsonStringToMessage(row.spec_json, &spec).ok();
    if (spec_reads && spec.tasks_size() > 0) {
      // Rounds count the db's records of each task, the job's own included: it starts
      // its rounds again and measures only what it still owes.
      absl::Status valid = CheckTasksOfJob(&spec);
      if (valid.ok()) {
        ResumeJob(row.id, spec, "", 0, "resumed after a server restart: its rounds count the records it made");
        ++resumed;
        continue;
      }
    }
    if (!spec_reads || spec.tasks_size() > 0 || !(task = ParseTask(spec.task())).ok()) {
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
    const int resumed_trials = std::clamp(recorded - 1, 0, std::max(0, spec.trials() - 1));  // minus the baseline
    ResumeJob(row.id, spec, task->CanonicalText(), resumed_trials,
              "resumed after a server restart: " + std::to_string(resumed_trials) + " of " +
                  std::to_string(spec.trials()) + " trials were already recorded");
    ++resumed;
  }
  return resumed;
}

void JobManager::ResumeJob(const std::string& id, const v1::JobSpec& spec, const std::string& canonical,
                           int resumed_trials, const std::string& event) {
  auto job = std::make_unique<Job>();
  job->resumed_trials = resumed_trials;
  job->status.set_job_id(id);
  *job->status.mutable_spec() = spec;
  job->status.set_state(v1::QUEUED);
  job->status.set_task(canonical);
  job->status.set_trials_done(resumed_trials);
  job->status.set_last_event(event);
  job->started = std::chrono::steady_clock::now();
  TF_LOG(Info) << "job " << id << ": " << event;
  std::lock_guard<std::mutex> lock(mu_);
  Job* raw = job.get();
  jobs_[id] = std::move(job);
  raw->thread = std::thread([this, raw, spec] { RunJob(raw, spec); });
}

void JobManager::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, job] : jobs_) job->cancel = true;
  cv_.notify_all();
}

}  // namespace tuneforge
