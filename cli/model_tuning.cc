// `tune --model`: the model's upload and the printing of its job (see model_tuning.h).
#include "cli/model_tuning.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/support/status.h"
#include "nlohmann/json.hpp"
#include "server/job_json.h"

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

absl::Status AttachModel(const Flags& flags, const LoadedModel& model, TuningClient* client, v1::JobSpec* spec,
                         bool quiet) {
  const std::string path = flags.Get("model");
  if (model.table.tasks.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " has no tunable task (", model.table.leftovers.size(),
                                                      " operators, none a conv, matmul or dense)"));
  }
  // The server keeps the model by content hash, reads it with its own importer and
  // tunes the task table it finds (the same as this one).
  const std::vector<std::string> dims = flags.GetAll("dim"), shapes = flags.GetAll("shape");
  ASSIGN_OR_RETURN(v1::ModelUploaded uploaded, client->UploadModel(path, dims, shapes));
  spec->set_model_hash(uploaded.model_hash());
  for (const std::string& d : dims) spec->add_model_dims(d);
  for (const std::string& s : shapes) spec->add_model_shapes(s);
  spec->set_model_name(std::filesystem::path(path).filename().string());
  if (!quiet) {
    std::fprintf(stderr, "uploaded %s: %lld bytes, sha256 %s, %d tasks\n", path.c_str(),
                 static_cast<long long>(uploaded.bytes()), uploaded.model_hash().c_str(), uploaded.tasks_size());
  }
  return absl::OkStatus();
}

ModelJobPrinter::ModelJobPrinter(const LoadedModel& model, std::string model_path, bool json)
    : model_(model), model_path_(std::move(model_path)), json_(json), live_(!json && isatty(STDERR_FILENO)) {}

namespace {

// The model's task of a job's task text (the same importer made both tables).
const graph::ExtractedTask* FindTask(const LoadedModel& model, const std::string& text) {
  for (const graph::ExtractedTask& t : model.table.tasks)
    if (t.task == text) return &t;
  return nullptr;
}

double Flops(const LoadedModel& model, const std::string& text) {
  const graph::ExtractedTask* t = FindTask(model, text);
  return t ? t->flops : 0;
}

nlohmann::json SecondsOrNull(double s) { return s > 0 && std::isfinite(s) ? nlohmann::json(s) : nlohmann::json(); }

std::vector<double> Factors(const v1::JobStatus& s) {
  std::vector<double> out;
  for (const v1::TaskProgress& t : s.tasks()) out.push_back(InRunFactor(t));
  return out;
}

// "12 rounds, 96 trials: budget spent" -> "budget spent".
std::string StopReason(const v1::JobStatus& s) {
  const std::string& e = s.last_event();
  const size_t colon = e.find(": ");
  return colon == std::string::npos ? e : e.substr(colon + 2);
}

}  // namespace

void ModelJobPrinter::Start(const v1::JobStatus& s) {
  started_ = true;
  rounds_seen_.assign(s.spec().tasks_size(), 0);
  trials_seen_.assign(s.spec().tasks_size(), 0);
  new_seen_.assign(s.spec().tasks_size(), 0);
  if (json_) {
    nlohmann::json tasks = nlohmann::json::array();
    for (const v1::WeightedTask& t : s.spec().tasks()) {
      const graph::ExtractedTask* e = FindTask(model_, t.task());
      tasks.push_back({{"task", t.task()}, {"op", e ? e->op : ""}, {"weight", t.weight()},
                       {"flops", e ? e->flops : 0}});
    }
    std::printf("%s\n", nlohmann::json{{"event", "start"},
                                       {"job_id", s.job_id()},
                                       {"model", model_path_},
                                       {"tasks", tasks},
                                       {"trials", s.spec().trials()},
                                       {"round_trials", s.spec().round_trials()},
                                       {"scheduler", s.spec().scheduler().empty() ? "gradient" : s.spec().scheduler()},
                                       {"leftover_operators", model_.table.leftovers.size()}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  } else {
    std::fprintf(stderr, "model %s: %d tasks, %zu leftover operators; job %s, rounds of %d trials\n",
                 model_path_.c_str(), s.spec().tasks_size(), model_.table.leftovers.size(), s.job_id().c_str(),
                 s.spec().round_trials());
  }
}

std::vector<std::string> ModelJobPrinter::TableLines(const v1::JobStatus& s) const {
  std::vector<std::string> lines;
  const v1::ModelTiming& m = s.model_timing();
  const double total = s.estimated_seconds();
  const bool calibrated = m.in_runs() > 0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%3s  %-48s %6s %7s %10s %8s %6s %6s", "#", "task", "weight", "trials", "best",
                "GFLOP/s", "in run", "share");
  lines.push_back(buf);
  for (int i = 0; i < s.tasks_size(); ++i) {
    const v1::TaskProgress& t = s.tasks(i);
    const double b = t.best().seconds();
    const bool has = b > 0;
    const double factor = InRunFactor(t);
    const double flops = Flops(model_, t.task());
    std::snprintf(buf, sizeof buf, "%3d  %-48s %6g %7d %10s %8s %6s %6s%s", i + 1, Shorten(t.task(), 48).c_str(),
                  t.weight(), t.trials(), has ? FormatSeconds(b).c_str() : "-",
                  has && flops > 0 ? absl::StrCat(static_cast<int>(flops / b * 1e-9)).c_str() : "-",
                  calibrated ? absl::StrFormat("%.2fx", factor).c_str() : "-",
                  has && total > 0 ? absl::StrCat(static_cast<int>(100 * t.weight() * factor * b / total + 0.5), "%").c_str()
                                   : "-",
                  t.flat() ? "  flat" : "");
    lines.push_back(buf);
  }
  if (m.timed()) {
    std::snprintf(buf, sizeof buf, "     %-48s %6s %7s %10s %8s %6s %6s",
                  calibrated ? "leftovers (in the model's run)" : "leftovers (untuned)", "", "",
                  FormatSeconds(m.leftover_seconds()).c_str(), "", "",
                  total > 0 ? absl::StrCat(static_cast<int>(100 * m.leftover_seconds() / total + 0.5), "%").c_str()
                            : "-");
    lines.push_back(buf);
  }
  return lines;
}

void ModelJobPrinter::OnStatus(const v1::JobStatus& s) {
  if (s.spec().tasks_size() == 0) return;
  if (!started_) Start(s);
  if (s.tasks_size() != static_cast<int>(rounds_seen_.size())) return;  // queued: no progress yet
  const double estimate = s.estimated_seconds();
  // Rounds that ended since the last status (usually one).
  for (int i = 0; i < s.tasks_size(); ++i) {
    const v1::TaskProgress& t = s.tasks(i);
    const int ended = t.rounds() - rounds_seen_[i];
    if (ended <= 0) continue;
    rounds_ += ended;
    const int spent = t.trials() - trials_seen_[i], fresh = t.new_trials() - new_seen_[i];
    rounds_seen_[i] = t.rounds();
    trials_seen_[i] = t.trials();
    new_seen_[i] = t.new_trials();
    if (json_) {
      nlohmann::json ev = {{"event", "round"},          {"round", rounds_},
                           {"rounds_ended", ended},      {"task_index", i},
                           {"task", t.task()},           {"trials", spent},
                           {"new_trials", fresh},        {"spent", s.trials_done()},
                           {"estimated_seconds", SecondsOrNull(estimate)}};
      if (t.best().seconds() > 0) ev["best_seconds"] = t.best().seconds();
      if (!t.error().empty()) ev["error"] = t.error();
      std::printf("%s\n", ev.dump().c_str());
      std::fflush(stdout);
      continue;
    }
    const std::string line =
        absl::StrCat("round ", rounds_, ": ", Shorten(t.task(), 60), ", ", spent, " trials (", fresh, " new); estimated ",
                     estimate > 0 ? FormatSeconds(estimate) : "- (warm-up)", ", ", s.trials_done(), "/",
                     s.spec().trials(), " trials", t.error().empty() ? "" : "; failed: " + t.error());
    if (live_) {
      // Redraw the table in place.
      if (drawn_ > 0) std::fprintf(stderr, "\x1b[%dA\x1b[J", drawn_);
      std::vector<std::string> lines = TableLines(s);
      lines.push_back(line);
      for (const std::string& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
      drawn_ = static_cast<int>(lines.size());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
  // A run of the model with the best schedules (the server's CPU is the target).
  const v1::ModelTiming& m = s.model_timing();
  if (m.in_runs() > in_runs_seen_) {
    in_runs_seen_ = m.in_runs();
    if (m.measured_when() == "after the warm-up") after_warmup_ = estimate;
    if (json_) {
      std::printf("%s\n", nlohmann::json{{"event", "in_run"},
                                         {"when", m.measured_when()},
                                         {"spent", s.trials_done()},
                                         {"measured_seconds", m.measured_seconds()},
                                         {"runs", m.measured_runs()},
                                         {"leftover_seconds", m.leftover_seconds()},
                                         {"in_run_factors", Factors(s)},
                                         {"estimated_before_seconds", SecondsOrNull(m.estimated_before_seconds())},
                                         {"estimated_seconds", SecondsOrNull(estimate)}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "model run on the server %s: %s (median of %d runs); estimate now %s\n",
                   m.measured_when().c_str(), FormatSeconds(m.measured_seconds()).c_str(), m.measured_runs(),
                   FormatSeconds(estimate).c_str());
      drawn_ = 0;
    }
  }
}

void ModelJobPrinter::Finish(const v1::JobStatus& last) {
  OnStatus(last);
  const v1::ModelTiming& m = last.model_timing();
  // The estimate the budget was spent by: before the run at the end, which then
  // checks it (and leaves the factors as they are now).
  const bool checked = m.timed() && m.measured_when() == "at the end";
  const double est = checked ? m.estimated_before_seconds() : last.estimated_seconds();
  int new_trials = 0;
  for (const v1::TaskProgress& t : last.tasks()) new_trials += t.new_trials();
  if (json_) {
    nlohmann::json tasks = nlohmann::json::array();
    for (const v1::TaskProgress& t : last.tasks()) {
      const graph::ExtractedTask* e = FindTask(model_, t.task());
      nlohmann::json j = {{"task", t.task()},
                          {"op", e ? e->op : ""},
                          {"weight", t.weight()},
                          {"flops", e ? e->flops : 0},
                          {"trials", t.trials()},
                          {"new_trials", t.new_trials()},
                          {"rounds", t.rounds()},
                          {"flat", t.flat()},
                          {"in_run_factor", InRunFactor(t)}};
      if (t.best().seconds() > 0) {
        j["best_seconds"] = t.best().seconds();
        j["config"] = BestJson(t.best())["config"];
      }
      tasks.push_back(j);
    }
    nlohmann::json done = {{"event", "done"},
                           {"job_id", last.job_id()},
                           {"tasks", tasks},
                           {"rounds", rounds_},
                           {"trials", last.trials_done()},
                           {"new_trials", new_trials},
                           {"stop_reason", StopReason(last)},
                           {"estimated_seconds", SecondsOrNull(est)},
                           {"timed", m.timed()},
                           {"warnings", std::vector<std::string>(last.warnings().begin(), last.warnings().end())}};
    if (m.timed()) {
      done["untuned_seconds"] = m.untuned_seconds();
      done["leftover_seconds"] = m.leftover_seconds();
    } else {
      done["not_timed_reason"] = m.not_timed_reason();
    }
    if (after_warmup_ > 0) done["after_warmup_seconds"] = after_warmup_;
    if (checked) {
      done["measured_seconds"] = m.measured_seconds();
      done["measured_runs"] = m.measured_runs();
      if (est > 0) done["estimate_over_measured"] = est / m.measured_seconds();
    }
    std::printf("%s\n", done.dump().c_str());
    return;
  }
  for (const std::string& l : TableLines(last)) std::printf("%s\n", l.c_str());
  std::printf("estimated:   %s end to end (%s)", FormatSeconds(est).c_str(),
              m.timed() ? "the tasks as the agents measured them x their in-run factors + leftovers"
                        : "the tasks as the agents measured them; the server did not time the model");
  if (after_warmup_ > 0) std::printf("; %s after the warm-up rounds", FormatSeconds(after_warmup_).c_str());
  if (checked) {
    std::printf("\nmeasured:    %s (the model with these schedules run on the server, median of %d runs); "
                "estimate/measured %.2f",
                FormatSeconds(m.measured_seconds()).c_str(), m.measured_runs(), est / m.measured_seconds());
  }
  if (m.timed()) {
    std::printf("\nuntuned:     %s (default schedules, measured on the server)\n",
                FormatSeconds(m.untuned_seconds()).c_str());
  } else {
    std::printf("\nnot timed:   %s\n", m.not_timed_reason().c_str());
  }
  std::printf("trials:      %d of %d (%d new in this run) in %d rounds; %s\n", last.trials_done(),
              last.spec().trials(), new_trials, rounds_, StopReason(last).c_str());
  for (const std::string& w : last.warnings()) std::printf("warning:     %s\n", w.c_str());
}

}  // namespace tuneforge::cli
