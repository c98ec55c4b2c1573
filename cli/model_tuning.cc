#include "cli/model_tuning.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/graph/executor.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "compiler/codegen/build.h"
#include "nlohmann/json.hpp"
#include "tuner/task_scheduler.h"

namespace tuneforge::cli {
namespace {

bool IsTaskStep(const std::string& source) {
  return source.rfind("tuned ", 0) == 0 || source.rfind("default ", 0) == 0;
}

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

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const frontend::DimBindings& dims) {
  LoadedModel m;
  ASSIGN_OR_RETURN(m.model, frontend::ReadOnnxModel(path));
  RETURN_IF_ERROR(frontend::BindDimensions(&m.model, dims));
  RETURN_IF_ERROR(frontend::CheckSupported(m.model));
  ASSIGN_OR_RETURN(m.graph, graph::ImportOnnx(m.model));
  ASSIGN_OR_RETURN(m.table, graph::ExtractTasks(m.graph));
  return m;
}

absl::StatusOr<frontend::DimBindings> DimBindingsFromFlags(const Flags& flags) {
  frontend::DimBindings b;
  for (const std::string& v : flags.GetAll("dim")) RETURN_IF_ERROR(frontend::ParseDimBinding(v, &b));
  for (const std::string& v : flags.GetAll("shape")) RETURN_IF_ERROR(frontend::ParseShapeBinding(v, &b));
  return b;
}

absl::StatusOr<LeftoverTime> MeasureLeftovers(const graph::Graph& graph, int threads) {
  Target target = DetectHostTarget("local");
  target.num_threads = threads;
  ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec, graph::Executor::Create(graph, target));
  graph::RunBuffers io = graph::SeededRunBuffers(*exec, 1);
  for (int i = 0; i < 2; ++i) RETURN_IF_ERROR(exec->Run(io.input_ptrs, io.output_ptrs));  // warm-up
  const std::vector<std::string> sources = exec->steps();
  LeftoverTime out;
  out.threads = threads;
  out.steps = static_cast<int>(sources.size());
  for (const std::string& s : sources) out.leftover_steps += !IsTaskStep(s);
  // Median of per-run sums, at least 5 runs and about half a second.
  std::vector<double> leftover_ms, total_ms;
  const auto start = std::chrono::steady_clock::now();
  while (leftover_ms.size() < 5 ||
         (leftover_ms.size() < 200 && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500))) {
    std::vector<double> step_ms(sources.size(), 0.0);
    RETURN_IF_ERROR(exec->RunProfiled(io.input_ptrs, io.output_ptrs, &step_ms));
    double leftover = 0, total = 0;
    for (size_t i = 0; i < step_ms.size(); ++i) {
      total += step_ms[i];
      if (!IsTaskStep(sources[i])) leftover += step_ms[i];
    }
    leftover_ms.push_back(leftover);
    total_ms.push_back(total);
  }
  out.leftover_seconds = MedianOr(leftover_ms, 0) * 1e-3;
  out.untuned_seconds = MedianOr(total_ms, 0) * 1e-3;
  return out;
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

  auto estimated = [&] { return scheduler.Objective() + leftovers.leftover_seconds; };
  auto table_lines = [&] {
    std::vector<std::string> lines;
    const double total = estimated();
    char buf[256];
    std::snprintf(buf, sizeof buf, "%3s  %-48s %6s %7s %10s %8s %6s", "#", "task", "weight", "trials",
                  "best", "GFLOP/s", "share");
    lines.push_back(buf);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const double b = scheduler.best()[i];
      const bool has = std::isfinite(b);
      std::snprintf(buf, sizeof buf, "%3zu  %-48s %6d %7d %10s %8s %6s%s", i + 1,
                    Shorten(tasks[i].task, 48).c_str(), tasks[i].weight, scheduler.trials()[i],
                    FormatSeconds(b).c_str(),
                    has ? absl::StrCat(static_cast<int>(tasks[i].flops / b * 1e-9)).c_str() : "-",
                    has && std::isfinite(total)
                        ? absl::StrCat(static_cast<int>(100 * tasks[i].weight * b / total + 0.5), "%").c_str()
                        : "-",
                    scheduler.flat(static_cast<int>(i)) ? "  flat" : "");
      lines.push_back(buf);
    }
    std::snprintf(buf, sizeof buf, "     %-48s %6s %7s %10s %8s %6s", "leftovers (untuned, measured here)", "", "",
                  FormatSeconds(leftovers.leftover_seconds).c_str(), "",
                  std::isfinite(total)
                      ? absl::StrCat(static_cast<int>(100 * leftovers.leftover_seconds / total + 0.5), "%").c_str()
                      : "-");
    lines.push_back(buf);
    return lines;
  };
  auto task_json = [&](size_t i) {
    nlohmann::json t = {{"task", tasks[i].task},       {"op", tasks[i].op},
                        {"weight", tasks[i].weight},   {"flops", tasks[i].flops},
                        {"trials", scheduler.trials()[i]}, {"flat", scheduler.flat(static_cast<int>(i))}};
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

  int round = 0, new_trials = 0, drawn = 0;
  double after_warmup = NAN;
  int trials = 0;
  for (int i; (i = scheduler.Next(&trials)) >= 0; ++round) {
    const int known = scheduler.trials()[i];
    const double gain = scheduler.ExpectedGain(i);
    absl::StatusOr<v1::JobStatus> job =
        run_round(tasks[i].task, known + trials, options.seed + static_cast<uint64_t>(round));
    if (!job.ok() && absl::IsCancelled(job.status())) return job.status();
    int spent = trials;
    if (job.ok()) {
      const int total_now = job->earlier_trials() + job->trials_done();
      spent = std::max(0, total_now - known);
      new_trials += job->trials_done();
      for (const v1::BestResult* b : {&job->best(), &job->earlier_best()}) {
        if (b->seconds() > 0 && (!best[i] || b->seconds() < best[i]->seconds())) best[i] = *b;
      }
    } else if (!options.json) {
      std::fprintf(stderr, "round %d: %s failed: %s\n", round + 1, tasks[i].task.c_str(),
                   std::string(job.status().message()).c_str());
    }
    scheduler.Update(i, spent, best[i] ? best[i]->seconds() : INFINITY);
    bool warm = true;
    for (size_t t = 0; t < tasks.size(); ++t) warm &= scheduler.rounds(static_cast<int>(t)) > 0;
    if (warm && std::isnan(after_warmup)) after_warmup = estimated();

    if (options.json) {
      nlohmann::json ev = {{"event", "round"},
                           {"round", round + 1},
                           {"task_index", i},
                           {"task", tasks[i].task},
                           {"trials", spent},
                           {"new_trials", job.ok() ? job->trials_done() : 0},
                           {"expected_gain_seconds", std::isfinite(gain) ? nlohmann::json(gain) : nlohmann::json()},
                           {"spent", scheduler.spent()},
                           {"estimated_seconds", std::isfinite(estimated()) ? nlohmann::json(estimated()) : nlohmann::json()}};
      if (std::isfinite(scheduler.best()[i])) ev["best_seconds"] = scheduler.best()[i];
      if (!job.ok()) ev["error"] = std::string(job.status().message());
      std::printf("%s\n", ev.dump().c_str());
      std::fflush(stdout);
      continue;
    }
    const std::string line = absl::StrCat(
        "round ", round + 1, ": ", Shorten(tasks[i].task, 60), ", ", spent, " trials (",
        job.ok() ? job->trials_done() : 0, " new); estimated ",
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
  }
  const std::string stop_reason = scheduler.spent() >= options.trials ? "budget spent" : "every task flat";
  const double est = estimated();
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
                           {"leftover_seconds", leftovers.leftover_seconds},
                           {"untuned_seconds", leftovers.untuned_seconds}};
    if (!std::isnan(after_warmup) && std::isfinite(after_warmup)) done["after_warmup_seconds"] = after_warmup;
    std::printf("%s\n", done.dump().c_str());
    return absl::OkStatus();
  }
  for (const std::string& l : table_lines()) std::printf("%s\n", l.c_str());
  std::printf("estimated:   %s end to end (tasks as measured by the agents + leftovers)",
              FormatSeconds(est).c_str());
  if (std::isfinite(after_warmup)) std::printf("; %s after the warm-up rounds", FormatSeconds(after_warmup).c_str());
  std::printf("\nuntuned:     %s (the executor with default schedules, measured here)\n",
              FormatSeconds(leftovers.untuned_seconds).c_str());
  std::printf("trials:      %d of %lld (%d new in this run) in %d rounds; %s\n", scheduler.spent(),
              static_cast<long long>(options.trials), new_trials, round, stop_reason.c_str());
  return absl::OkStatus();
}

}  // namespace tuneforge::cli
