// `tuneforge nightly run SPEC`: a nightly tuning job. For every (device key, task) -
// each task of `tasks` as a job of its own, each model of `models` as one model job:
//   1. canary: re-measure last night's best config first, so a device or toolchain
//      that got slower is flagged instead of being mistaken for a worse schedule;
//   2. tune: the full budget for new or stale tasks (no record made with the current
//      template version), a small one for converged tasks; the search starts from
//      the db (earlier records are not re-measured; the model transfers);
//   3. log models: on the embedded default, the cost models new tasks start from are
//      retrained from the whole log (a server refreshes its own after each job);
//   4. report: a dated folder with report.md, report.html, report.json and a
//      tuning-curve SVG per task, compared with the previous report.
// Exit status 0, or 3 when a regression beyond the spec's threshold is found.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>

#include "compiler/support/clock.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "db/database.h"
#include "deploy/nightly.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tuner/log_model.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kNightlyUsage =
    "usage: tuneforge nightly run SPEC.yaml [--server HOST:PORT] [--report-dir DIR]\n"
    "                         [--token-file FILE] [--tls-ca FILE] [--verbose]\n"
    "  Runs the nightly job described by SPEC (see docs/operations.md): canary\n"
    "  re-measurement of last night's best, tuning with a budget that depends on\n"
    "  whether a task is new, stale or converged, and a dated report folder.\n"
    "  Without --server it runs on the embedded default with the spec's db.\n"
    "  --report-dir  where dated report folders go (default: reports/ next to SPEC)\n"
    "  Exit status: 0 ok, 3 regression found, other non-zero: the job could not run.\n";

std::string Stamp() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H%M%S", std::localtime(&now));
  return buf;
}

// The target of `device_key` with the most records of this workload, if any.
absl::StatusOr<std::optional<TargetInfo>> TargetFor(Database* db, const TuningTask& task,
                                                    const std::string& device_key) {
  ASSIGN_OR_RETURN(std::vector<TargetSummary> targets, db->TargetsOf(task.WorkloadKey()));
  std::optional<TargetInfo> best;
  int64_t most = -1;
  for (const TargetSummary& t : targets) {
    if (t.target.device_key == device_key && t.records > most) {
      best = t.target;
      most = t.records;
    }
  }
  return best;
}

absl::StatusOr<v1::JobStatus> RunJob(TuningClient* client, const v1::JobSpec& spec, bool verbose) {
  ASSIGN_OR_RETURN(std::string id, client->Submit(spec));
  std::string printed;
  return client->Wait(id, [&](const v1::JobStatus& s) {
    if (verbose && s.last_event() != printed) {
      printed = s.last_event();
      std::fprintf(stderr, "  [%s] %s\n", id.c_str(), printed.c_str());
    }
  });
}

// One task of tonight: what is known before tuning it (its target, last night's best,
// the canary's figure) and the budget that follows.
struct TaskNight {
  TuningTask task;
  std::optional<TargetInfo> target;
  int budget = 0;
  NightlyTaskResult result;
};

NightlyTaskResult Skipped(const std::string& text, const std::string& device_key, const std::string& model) {
  NightlyTaskResult r;
  r.task = ParseTask(text)->CanonicalText();
  r.device_key = device_key;
  r.model = model;
  r.status = "skipped (time limit)";
  return r;
}

// Finds last night's best (current template only), re-measures it first when the spec
// asks for canaries, and sets the budget: `new` trials for a new or stale task,
// `converged` for the rest.
absl::StatusOr<TaskNight> Prepare(Database* db, TuningClient* client, const NightlySpec& spec,
                                  const std::string& text, const std::string& device_key, bool verbose) {
  TaskNight n{*ParseTask(text), std::nullopt, 0, {}};
  NightlyTaskResult& r = n.result;
  r.task = n.task.CanonicalText();
  r.device_key = device_key;
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(n.task));
  ASSIGN_OR_RETURN(n.target, TargetFor(db, n.task, device_key));
  std::optional<TuningRecord> previous;
  if (n.target) {
    absl::StatusOr<TuningRecord> best = db->Best(n.task.WorkloadKey(), n.target->key);
    if (best.ok() && best->template_name == tmpl->name() && best->template_version == tmpl->version()) {
      previous = *best;
    }
  }
  r.was_stale = !previous.has_value();
  std::fprintf(stderr, "nightly: %s on %s (%s)\n", r.task.c_str(), device_key.c_str(),
               r.was_stale ? "new or stale" : "converged");
  if (spec.canary && previous) {
    v1::JobSpec canary;
    canary.set_task(r.task);
    canary.set_device_key(device_key);
    canary.add_configs(previous->config_json);
    canary.set_owner("nightly:" + spec.name);
    ASSIGN_OR_RETURN(v1::JobStatus s, RunJob(client, canary, verbose));
    r.canary_recorded_gflops = n.task.Flops() / previous->result.MedianCost() / 1e9;
    if (s.state() == v1::SUCCEEDED) r.canary_measured_gflops = s.best().gflops();
  }
  n.budget = r.was_stale ? spec.new_trials : spec.converged_trials;
  return n;
}

// The db's best after tonight and the best-so-far curve of `job_id`'s records of the
// task ("" = none tonight).
absl::Status Finish(Database* db, const std::string& job_id, TaskNight* n) {
  NightlyTaskResult& r = n->result;
  r.job_id = job_id;
  if (!n->target && !job_id.empty()) {
    ASSIGN_OR_RETURN(n->target, TargetFor(db, n->task, r.device_key));
  }
  if (!n->target) return absl::OkStatus();
  absl::StatusOr<TuningRecord> best = db->Best(n->task.WorkloadKey(), n->target->key);
  if (best.ok()) r.best_gflops = n->task.Flops() / best->result.MedianCost() / 1e9;
  ASSIGN_OR_RETURN(std::vector<TuningRecord> records, db->Records(n->task.WorkloadKey(), n->target->key));
  double so_far = 0;
  for (const TuningRecord& rec : records) {
    if (job_id.empty() || rec.job_id != job_id) continue;
    if (rec.result.error == MeasureErrorKind::kNone)
      so_far = std::max(so_far, n->task.Flops() / rec.result.MedianCost() / 1e9);
    r.curve.push_back(so_far);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Run(const Flags& flags) {
  if (flags.positional().size() != 2) return absl::InvalidArgumentError("nightly run needs SPEC");
  const std::string spec_path = flags.positional()[1];
  ASSIGN_OR_RETURN(NightlySpec spec, LoadNightlySpec(spec_path));
  bool verbose = flags.Has("verbose");
  std::string report_root =
      flags.Get("report-dir", (std::filesystem::absolute(spec_path).parent_path() / "reports").string());

  std::unique_ptr<EmbeddedFarm> farm;
  std::string address = flags.Get("server");
  if (address.empty()) {
    ASSIGN_OR_RETURN(farm, EmbeddedFarm::Start(spec.db, spec.device_keys, verbose));
    address = farm->address();
  }
  ASSIGN_OR_RETURN(std::string token, TokenFromFlag(flags.Get("token-file")));
  if (farm) token = farm->user_token();
  ASSIGN_OR_RETURN(std::unique_ptr<TuningClient> client, TuningClient::Connect(address, token, flags.Get("tls-ca")));
  DatabaseOptions db_options;
  db_options.path = spec.db;
  db_options.create_if_missing = false;
  db_options.read_only = true;
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(db_options));

  NightlyReport report;
  report.name = spec.name;
  std::string stamp = Stamp();
  report.date = stamp.substr(0, 10);
  report.threshold = spec.regression_threshold;
  const std::string dir = report_root + "/" + stamp;
  auto started = std::chrono::steady_clock::now();

  for (const std::string& device_key : spec.device_keys) {
    auto out_of_time = [&] {
      return spec.time_limit_minutes > 0 && SecondsSince(started) / 60 > spec.time_limit_minutes;
    };
    for (const std::string& text : spec.tasks) {
      if (out_of_time()) {
        report.tasks.push_back(Skipped(text, device_key, ""));
        continue;
      }
      ASSIGN_OR_RETURN(TaskNight night, Prepare(db.get(), client.get(), spec, text, device_key, verbose));
      v1::JobSpec tune;
      tune.set_task(night.result.task);
      tune.set_device_key(device_key);
      tune.set_trials(night.budget);
      tune.set_owner("nightly:" + spec.name);
      std::string job_id;
      if (tune.trials() > 0) {
        ASSIGN_OR_RETURN(v1::JobStatus s, RunJob(client.get(), tune, verbose));
        night.result.trials = s.trials_done();
        job_id = s.job_id();
        night.result.status = s.state() == v1::SUCCEEDED ? "tuned" : "failed: " + s.message();
      } else {
        night.result.status = "canary only";
      }
      RETURN_IF_ERROR(Finish(db.get(), job_id, &night));
      report.tasks.push_back(std::move(night.result));
    }
    // A model is one job of its tasks: the server's task scheduler spreads the sum of
    // their budgets over them by expected gain, as `tune --model` does.
    for (const NightlyModel& model : spec.models) {
      if (out_of_time()) {
        for (const std::string& text : model.tasks) report.tasks.push_back(Skipped(text, device_key, model.name));
        continue;
      }
      std::vector<TaskNight> nights;
      int budget = 0;
      for (const std::string& text : model.tasks) {
        ASSIGN_OR_RETURN(TaskNight night, Prepare(db.get(), client.get(), spec, text, device_key, verbose));
        night.result.model = model.name;
        budget += night.budget;
        nights.push_back(std::move(night));
      }
      std::string job_id;
      v1::JobStatus s;
      if (budget > 0) {
        ASSIGN_OR_RETURN(v1::ModelUploaded uploaded, client->UploadModel(model.path, {}, {}));
        v1::JobSpec tune;
        tune.set_model_hash(uploaded.model_hash());
        tune.set_model_name(std::filesystem::path(model.name).filename().string());
        tune.set_device_key(device_key);
        tune.set_trials(budget);
        // Rounds small enough that every task gets its first round and the scheduler
        // has rounds left to spread by gradient (a round is the server's 32 trials at
        // most; with a small budget a task could otherwise get none).
        tune.set_round_trials(std::clamp(budget / (2 * static_cast<int>(nights.size())), 1, 32));
        tune.set_owner("nightly:" + spec.name);
        ASSIGN_OR_RETURN(s, RunJob(client.get(), tune, verbose));
        job_id = s.job_id();
      }
      for (TaskNight& night : nights) {
        if (budget == 0) {
          night.result.status = "canary only";
        } else {
          night.result.status = s.state() == v1::SUCCEEDED ? "tuned (model job)" : "failed: " + s.message();
          for (const v1::TaskProgress& t : s.tasks()) {
            if (t.task() == night.result.task) night.result.trials = t.trials();
          }
        }
        RETURN_IF_ERROR(Finish(db.get(), job_id, &night));
        report.tasks.push_back(std::move(night.result));
      }
    }
  }
  // The log models (the cost models new tasks start from) are retrained from the whole
  // log. On a server its job manager keeps them fresh itself (after each job, when
  // stale); on the embedded default the nightly job owns the db.
  if (farm) {
    DatabaseOptions rw;
    rw.path = spec.db;
    rw.create_if_missing = false;
    ASSIGN_OR_RETURN(std::unique_ptr<Database> writable, Database::Open(rw));
    ASSIGN_OR_RETURN(LogModelRefreshResult models, RefreshLogModels(writable.get(), {}));
    for (const LogModelInfo& m : models.trained)
      std::fprintf(stderr, "nightly: log model %s: %lld records of %d tasks\n", m.key.c_str(),
                   static_cast<long long>(m.records), m.tasks);
    report.log_models = static_cast<int>(models.trained.size());
  }
  std::map<std::string, double> previous_night;
  for (const auto& [key, gflops] : PreviousBest(report_root, dir)) previous_night[key] = gflops;
  for (NightlyTaskResult& t : report.tasks) {
    auto it = previous_night.find(t.task + "|" + t.device_key);
    if (it != previous_night.end()) t.previous_gflops = it->second;
  }
  Classify(&report);
  RETURN_IF_ERROR(WriteNightlyReport(report, dir));
  std::printf("report: %s/report.md\n", dir.c_str());
  for (const NightlyTaskResult& t : report.tasks) {
    std::printf("  %-45s %-12s %-10s %8.2f GFLOP/s%s%s\n", t.task.c_str(), t.device_key.c_str(),
                t.status.c_str(), t.best_gflops, t.canary_slower ? "  CANARY SLOWER" : "",
                t.regression ? "  REGRESSION" : "");
  }
  if (report.HasRegression()) {
    std::fprintf(stderr, "tuneforge nightly: regression beyond %.0f%% found (see %s/report.md)\n",
                 spec.regression_threshold * 100, dir.c_str());
    return 3;
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> NightlyCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"server", "report-dir", "token-file", "tls-ca"}, {"help", "verbose"}));
  if (flags.Has("help")) {
    std::fputs(kNightlyUsage, stdout);
    return 0;
  }
  if (flags.positional().empty() || flags.positional()[0] != "run") {
    return absl::InvalidArgumentError("expected: nightly run SPEC (see --help)");
  }
  return Run(flags);
}

}  // namespace tuneforge::cli
