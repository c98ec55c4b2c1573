// JobManager: accepts TuningJobs, runs each TuningLoop on its own thread, and keeps
// each job's JobStatus for GetJob/WatchJob. Job rows are written to the db at every
// state change. After every job the log model of its op and target is refreshed in
// the background if enough new records arrived (LogModelRefresher).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "server/agent_registry.h"
#include "server/job_cpu_share.h"
#include "server/log_model_refresher.h"
#include "server/model_files.h"
#include "tuner/builder.h"
#include "tuner/tuning_loop.h"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge {

// Thread-safe.
class JobManager {
 public:
  // `models`: the uploaded models a job may name (JobSpec.model_hash); null: none.
  JobManager(Database* db, AgentRegistry* registry, const Builder* builder, const ModelFiles* models = nullptr);
  ~JobManager();  // cancels and joins every job

  // Validates the spec (task, trials, policy, target, device key) and starts it.
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) const;
  // Every job this server ran since it started, oldest first.
  std::vector<v1::JobStatus> List() const;
  absl::StatusOr<v1::JobStatus> Cancel(const std::string& job_id);
  // Calls `on_status` with the current status and after every change until the job
  // ends (the last call carries the final state) or `on_status` returns false.
  absl::Status Watch(const std::string& job_id,
                     const std::function<bool(const v1::JobStatus&)>& on_status) const;
  void CancelAll();
  // Restarts the jobs the db says were queued or running when a previous server
  // stopped (crash, kill -9), under their ids. A resumed job only runs the trials it
  // still owes; configs already in the db are never measured again. Returns how many.
  // An error when the stored jobs cannot be listed (the db is unusable); a stored job
  // whose spec no longer reads is marked failed with the reason, not left "running".
  absl::StatusOr<int> ResumeStoredJobs();

  // Limits on user input.
  static constexpr int kMaxTrials = 100000;
  static constexpr int kMaxRepeat = 100;  // JobSpec.measure.max_repeat
  static constexpr int kMaxBatch = 1024;  // JobSpec.batch_size and model_early_batch
  static constexpr int kMaxTasks = 1000;  // JobSpec.tasks
  static constexpr int kMaxWeight = 1000000;  // WeightedTask.weight
  static constexpr int kDefaultRoundTrials = 32;  // JobSpec.round_trials 0
  static constexpr int kMaxFlatRounds = 1000;     // JobSpec.flat_rounds
  // JobSpec.priority: the job's weight in the fair share of agents (0 = default).
  static constexpr int kMinPriority = 1;
  static constexpr int kMaxPriority = 10;
  static constexpr int kDefaultPriority = 5;

 private:
  struct Job {
    v1::JobStatus status;       // GUARDED_BY(mu_)
    int64_t version = 0;        // GUARDED_BY(mu_), bumped on every change
    std::atomic<bool> cancel{false};
    std::thread thread;
    std::chrono::steady_clock::time_point started;
    int resumed_trials = 0;     // trials recorded before a server restart
    // The server's own warnings about the job (its state could not be stored), kept
    // beside the tuning loop's in status.warnings.
    std::vector<std::string> server_warnings;  // GUARDED_BY(mu_)
  };
  void RunJob(Job* job, v1::JobSpec spec);
  // A job of several tasks: the task scheduler's rounds (tuner/task_rounds.h), each a
  // TuningLoop of one task with `base`'s options, through one runner.
  void RunTasksInRounds(Job* job, const v1::JobSpec& spec, const Target& target, const TuningOptions& base,
                        Runner* runner);
  // A model job's model (spec.model_hash) timed with default schedules when this CPU is
  // the job's target: `timing` says whether and the leftovers; the graph for the runs
  // with the db's best schedules, or nullopt (a failure also goes to `warnings`).
  std::optional<graph::Graph> TimeModel(const v1::JobSpec& spec, const Target& target, v1::ModelTiming* timing,
                                        std::vector<std::string>* warnings) const;
  // Starts a stored job again under its id (ResumeStoredJobs).
  void ResumeJob(const std::string& id, const v1::JobSpec& spec, const std::string& canonical,
                 int resumed_trials, const std::string& event);
  void Update(Job* job, const std::function<void(v1::JobStatus*)>& change);
  // Writes the job's row; a failure is logged and becomes one of the job's warnings.
  void Persist(Job* job, const v1::JobStatus& status);
  static constexpr int kJobThreadNice = 10;
  static void LowerThreadPriority();

  Database* db_;
  AgentRegistry* registry_;
  const Builder* builder_;
  const ModelFiles* models_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;  // GUARDED_BY(mu_)
  int64_t next_job_ = 1;                              // GUARDED_BY(mu_)
  std::string id_prefix_;
  // Job threads working at once: half the cores, at least one (see job_cpu_share.h).
  JobCpuShare cpu_share_;
  // Retrains a log model when a job leaves it stale (after every job, in the background).
  LogModelRefresher log_models_;
};

bool IsTerminal(v1::JobState state);

}  // namespace tuneforge
