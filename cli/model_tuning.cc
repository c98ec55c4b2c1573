// `tune --model`: loading a model, timing leftovers and the model's run, the scheduler's rounds.
#include "cli/model_tuning.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/graph/executor.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "compiler/codegen/build.h"
#include "nlohmann/json.hpp"
#include "tuner/task_rounds.h"
#include "tuner/task_scheduler.h"

namespace tuneforge::cli {
namespace {

// "0.512 ms", "31.2 us": latencies from a dense of 2 rows to a whole ResNet.
std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return "-";
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.4g ms", s * 1e3);
  return buf;
}

std::string Shorten(std::string s, size_t n) {
  const std::string suffix = " dtype=float32";  // the default; not worth a column
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

}  // namespace

absl::StatusOr<frontend::DimBindings> DimBindingsFromFlags(const Flags& flags) {
  frontend::DimBindings b;
  for (const std::string& v : flags.GetAll("dim")) RETURN_IF_ERROR(frontend::ParseDimBinding(v, &b));
  for (const std::string& v : flags.GetAll("shape")) RETURN_IF_ERROR(frontend::ParseShapeBinding(v, &b));
  return b;
}

absl::Status TuneModel(const LoadedModel& model, const LeftoverTime& leftovers,
                       const ModelTuningOptions& options, const RoundJobFn& run_round) {
  const std::vector<graph::ExtractedTask>& tasks = model.table.tasks;
  if (tasks.empty()) {
    return absl::FailedPreconditionError(options.model_path + " has no tunable task (" +
                                         std::to_string(model.table.leftovers.size()) +
                                         " operators, none a conv, matmul or dense)");
  }
  std::vector<SchedulerTask> scheduled;
  for (const graph::ExtractedTask& t : tasks)
    scheduled.push_back(SchedulerTask{static_cast<double>(t.weight), t.flops, t.op});
  TaskSchedulerOptions so;
  so.total_trials = static_cast<int>(options.trials);
  so.round_trials = static_cast<int>(options.round_trials);
  so.flat_rounds = options.flat_rounds;
  so.round_robin = options.round_robin;
  TaskScheduler scheduler(scheduled, so);
  std::vector<std::optional<v1::BestResult>> best(tasks.size());
  const bool live = !options.json && isatty(STDERR_FILENO);

  // The leftovers as last measured: untuned at first, then in the tuned model's run.
  double leftover_seconds = leftovers.leftover_seconds;
  bool calibrated = false;
  auto estimated = [&] { return scheduler.Objective() + leftover_seconds; };

  // The model run here with the db's best schedules: each task's in-run factor and
  // the leftovers from the run (see ModelTuningOptions::local_db). A failure to build
  // or run leaves the estimate as it was, and says so.
  std::vector<std::string> warnings;
  auto measure_in_run = [&](const char* when) -> std::optional<InRunTime> {
    absl::StatusOr<InRunTime> m = [&]() -> absl::StatusOr<InRunTime> {
      ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDbReadOnly(options.local_db));
      std::vector<std::string> texts;
      for (const graph::ExtractedTask& t : tasks) texts.push_back(t.task);
      Target target = DetectHostTarget("local");  // the embedded default's agent
      target.num_threads = leftovers.threads;
      return MeasureInRun(model.graph, texts, db.get(), target);
    }();
    if (!m.ok()) {
      warnings.push_back(absl::StrCat("the model run ", when, " failed (the estimate keeps the factors it had): ",
                                      m.status().message()));
      if (!options.json) std::fprintf(stderr, "warning: %s\n", warnings.back().c_str());
      return std::nullopt;
    }
    if (m->unmatched_task_steps > 0) {
      warnings.push_back(absl::StrCat(m->unmatched_task_steps, " kernel step(s) of the model run ", when,
                                      " matched no task; their time counts as leftovers"));
      if (!options.json) std::fprintf(stderr, "warning: %s\n", warnings.back().c_str());
    }
    return *m;
  };
  auto calibrate = [&](const InRunTime& m) {
    CalibrateInRun(m, &scheduler);
    leftover_seconds = m.leftover_seconds;
    calibrated = true;
  };
  auto in_run_event = [&](const char* when, const InRunTime& m) {
    if (options.json) {
      nlohmann::json factors = nlohmann::json::array();
      for (size_t i = 0; i < tasks.size(); ++i) factors.push_back(scheduler.in_run_factor(static_cast<int>(i)));
      std::printf("%s\n", nlohmann::json{{"event", "in_run"},
                                         {"when", when},
                                         {"spent", scheduler.spent()},
                                         {"measured_seconds", m.model_seconds},
                                         {"runs", m.runs},
                                         {"compile_seconds", m.compile_seconds},
                                         {"leftover_seconds", m.leftover_seconds},
                                         {"in_run_factors", factors},
                                         {"estimated_seconds", estimated()}}
                                .dump()
                                .c_str());
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "model run here %s: %s (median of %d runs); estimate now %s\n", when,
                   FormatSeconds(m.model_seconds).c_str(), m.runs, FormatSeconds(estimated()).c_str());
    }
  };
  auto table_lines = [&] {
    std::vector<std::string> lines;
    const double total = estimated();
    char buf[256];
    std::snprintf(buf, sizeof buf, "%3s  %-48s %6s %7s %10s %8s %6s %6s", "#", "task", "weight", "trials",
                  "best", "GFLOP/s", "in run", "share");
    lines.push_back(buf);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const double b = scheduler.best()[i];
      const bool has = std::isfinite(b);
      const double factor = scheduler.in_run_factor(static_cast<int>(i));
      std::snprintf(buf, sizeof buf, "%3zu  %-48s %6d %7d %10s %8s %6s %6s%s", i + 1,
                    Shorten(tasks[i].task, 48).c_str(), tasks[i].weight, scheduler.trials()[i],
                    FormatSeconds(b).c_str(),
                    has ? absl::StrCat(static_cast<int>(tasks[i].flops / b * 1e-9)).c_str() : "-",
                    calibrated ? absl::StrFormat("%.2fx", factor).c_str() : "-",
                    has && std::isfinite(total)
                        ? absl::StrCat(static_cast<int>(100 * tasks[i].weight * factor * b / total + 0.5), "%")
                              .c_str()
                        : "-",
                    scheduler.flat(static_cast<int>(i)) ? "  flat" : "");
      lines.push_back(buf);
    }
    std::snprintf(buf, sizeof buf, "     %-48s %6s %7s %10s %8s %6s %6s",
                  calibrated ? "leftovers (in the model's run here)" : "leftovers (untuned, measured here)", "", "",
                  FormatSeconds(leftover_seconds).c_str(), "", "",
                  std::isfinite(total)
                      ? absl::StrCat(static_cast<int>(100 * leftover_seconds / total + 0.5), "%").c_str()
                      : "-");
    lines.push_back(buf);
    return lines;
  };
  auto task_json = [&](size_t i) {
    nlohmann::json t = {{"task", tasks[i].task},       {"op", tasks[i].op},
                        {"weight", tasks[i].weight},   {"flops", tasks[i].flops},
                        {"trials", scheduler.trials()[i]}, {"flat", scheduler.flat(static_cast<int>(i))},
                        {"in_run_factor", scheduler.in_run_factor(static_cast<int>(i))}};
    if (std::isfinite(scheduler.best()[i])) t["best_seconds"] = scheduler.best()[i];
    if (best[i]) t["config"] = nlohmann::json::parse(best[i]->config_json(), nullptr, false);
    return t;
  };

  if (options.json) {
    nlohmann::json tj = nlohmann::json::array();
    for (size_t i = 0; i < tasks.size(); ++i) tj.push_back(task_json(i));
    std::printf("%s\n", nlohmann::json{{"event", "start"},
                                       {"model", options.model_path},
                                       {"tasks", tj},
                                       {"trials", options.trials},
                                       {"round_trials", options.round_trials},
                                       {"scheduler", options.round_robin ? "round-robin" : "gradient"},
                                       {"leftover_seconds", leftovers.leftover_seconds},
                                       {"untuned_seconds", leftovers.untuned_seconds},
                                       {"threads", leftovers.threads}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  } else {
    std::fprintf(stderr,
                 "model %s: %zu tasks, %zu leftover operators (%s untuned, measured here at %d "
                 "threads; the whole model %s)\n",
                 options.model_path.c_str(), tasks.size(), model.table.leftovers.size(),
                 FormatSeconds(leftovers.leftover_seconds).c_str(), leftovers.threads,
                 FormatSeconds(leftovers.untuned_seconds).c_str());
  }

  int drawn = 0;
  double after_warmup = NAN;
  bool half_checked = false;
  // A round is one job of the task; the db's earlier configs of it count (the job's
  // count_earlier), so the round's spent trials are what the task's total grew by.
  auto run_job_round = [&](const RoundInfo& r) -> absl::StatusOr<RoundResult> {
    const int i = r.task;
    absl::StatusOr<v1::JobStatus> job = run_round(tasks[i].task, r.trials_before + r.trials, r.seed);
    if (!job.ok() && absl::IsCancelled(job.status())) return job.status();
    RoundResult out;
    out.spent = r.trials;
    if (job.ok()) {
      const int total_now = job->earlier_trials() + job->trials_done();
      out.spent = std::max(0, total_now - r.trials_before);
      out.new_trials = job->trials_done();
      for (const v1::BestResult* b : {&job->best(), &job->earlier_best()}) {
        if (b->seconds() > 0 && (!best[i] || b->seconds() < best[i]->seconds())) best[i] = *b;
      }
    } else {
      out.ok = false;
      out.error = std::string(job.status().message());
      if (!options.json)
        std::fprintf(stderr, "round %d: %s failed: %s\n", r.round + 1, tasks[i].task.c_str(), out.error.c_str());
    }
    out.best_seconds = best[i] ? best[i]->seconds() : INFINITY;
    return out;
  };
  auto after_round = [&](const RoundInfo& r, const RoundResult& result) {
    const int i = r.task;
    bool warm = true;
    for (size_t t = 0; t < tasks.size(); ++t) warm &= scheduler.rounds(static_cast<int>(t)) > 0;
    if (warm && std::isnan(after_warmup)) {
      if (!options.local_db.empty() && std::isfinite(scheduler.Objective())) {
        if (std::optional<InRunTime> m = measure_in_run("after the warm-up")) {
          calibrate(*m);
          in_run_event("after the warm-up", *m);
          drawn = 0;
        }
      }
      after_warmup = estimated();
    } else if (!options.local_db.empty() && !half_checked && 2 * scheduler.spent() >= options.trials &&
               std::isfinite(scheduler.Objective())) {
      half_checked = true;
      if (std::optional<InRunTime> m = measure_in_run("at half the budget")) {
        calibrate(*m);
        in_run_event("at half the budget", *m);
        drawn = 0;
      }
    }

    if (options.json) {
      nlohmann::json ev = {{"event", "round"},
                           {"round", r.round + 1},
                           {"task_index", i},
                           {"task", tasks[i].task},
                           {"trials", result.spent},
                           {"new_trials", result.new_trials},
                           {"expected_gain_seconds",
                            std::isfinite(r.expected_gain) ? nlohmann::json(r.expected_gain) : nlohmann::json()},
                           {"spent", scheduler.spent()},
                           {"estimated_seconds", std::isfinite(estimated()) ? nlohmann::json(estimated()) : nlohmann::json()}};
      if (std::isfinite(scheduler.best()[i])) ev["best_seconds"] = scheduler.best()[i];
      if (!result.ok) ev["error"] = result.error;
      std::printf("%s\n", ev.dump().c_str());
      std::fflush(stdout);
      return;
    }
    const std::string line = absl::StrCat(
        "round ", r.round + 1, ": ", Shorten(tasks[i].task, 60), ", ", result.spent, " trials (",
        result.new_trials, " new); estimated ",
        std::isfinite(estimated()) ? FormatSeconds(estimated()) : "- (warm-up)",
        ", ", scheduler.spent(), "/", options.trials, " trials");
    if (live) {
      // Redraw the table in place.
      if (drawn > 0) std::fprintf(stderr, "\x1b[%dA\x1b[J", drawn);
      std::vector<std::string> lines = table_lines();
      lines.push_back(line);
      for (const std::string& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
      drawn = static_cast<int>(lines.size());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  };
  ASSIGN_OR_RETURN(const RoundsSummary rounds,
                   RunRounds(&scheduler, static_cast<int>(options.trials), options.seed, run_job_round, after_round));
  const int round = rounds.rounds, new_trials = rounds.new_trials;
  const std::string& stop_reason = rounds.stop_reason;
  // The estimate the budget was spent by, then the check: the model as it runs with
  // the schedules found (which also leaves the factors as they are now).
  const double est = estimated();
  const double est_leftover_seconds = leftover_seconds;  // the leftovers inside `est`
  std::optional<InRunTime> final_run;
  if (!options.local_db.empty() && std::isfinite(scheduler.Objective())) {
    final_run = measure_in_run("at the end");
    if (final_run) calibrate(*final_run);
  }
  const double measured = final_run ? final_run->model_seconds : NAN;
  if (options.json) {
    nlohmann::json tj = nlohmann::json::array();
    for (size_t i = 0; i < tasks.size(); ++i) tj.push_back(task_json(i));
    nlohmann::json done = {{"event", "done"},
                           {"tasks", tj},
                           {"rounds", round},
                           {"trials", scheduler.spent()},
                           {"new_trials", new_trials},
                           {"stop_reason", stop_reason},
                           {"estimated_seconds", std::isfinite(est) ? nlohmann::json(est) : nlohmann::json()},
                           {"leftover_seconds", est_leftover_seconds},
                           {"untuned_seconds", leftovers.untuned_seconds},
                           {"warnings", warnings}};
    if (!std::isnan(after_warmup) && std::isfinite(after_warmup)) done["after_warmup_seconds"] = after_warmup;
    if (final_run) {
      done["measured_seconds"] = measured;
      done["measured_leftover_seconds"] = final_run->leftover_seconds;
      done["measured_runs"] = final_run->runs;
      if (std::isfinite(est)) done["estimate_over_measured"] = est / measured;
    }
    std::printf("%s\n", done.dump().c_str());
    return absl::OkStatus();
  }
  for (const std::string& l : table_lines()) std::printf("%s\n", l.c_str());
  std::printf("estimated:   %s end to end (%s)", FormatSeconds(est).c_str(),
              options.local_db.empty() ? "tasks as measured alone by the agents + leftovers; the agents are not "
                                         "this machine, so no run here checks it"
                                       : "tasks as measured by the agents x their in-run factors + leftovers");
  if (std::isfinite(after_warmup)) std::printf("; %s after the warm-up rounds", FormatSeconds(after_warmup).c_str());
  if (final_run) {
    std::printf("\nmeasured:    %s (the model with these schedules run here, median of %d runs); "
                "estimate/measured %.2f",
                FormatSeconds(measured).c_str(), final_run->runs, est / measured);
  }
  std::printf("\nuntuned:     %s (the executor with default schedules, measured here)\n",
              FormatSeconds(leftovers.untuned_seconds).c_str());
  std::printf("trials:      %d of %lld (%d new in this run) in %d rounds; %s\n", scheduler.spent(),
              static_cast<long long>(options.trials), new_trials, round, stop_reason.c_str());
  for (const std::string& w : warnings) std::printf("warning:     %s\n", w.c_str());
  return absl::OkStatus();
}

}  // namespace tuneforge::cli
