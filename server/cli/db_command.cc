// `tuneforge db best|list`: read the tuning log directly from a SQLite file.
#include <cstdio>

#include "compiler/task/task.h"
#include "db/database.h"
#include "nlohmann/json.hpp"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "compiler/support/status.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kDbUsage =
    "usage: tuneforge db best --db PATH --task \"...\" [--device-key KEY] [--target-key KEY] [--json]\n"
    "       tuneforge db list --db PATH [--json]\n"
    "  best  the fastest correct record of a task on one target\n"
    "  list  every (task, target) in the db with its record count and best\n";

nlohmann::json RecordJson(const TuningRecord& r) {
  double s = r.result.MedianCost();
  return {{"record_id", r.id},
          {"task", r.workload.task_text},
          {"target_key", r.target.key},
          {"device_key", r.target.device_key},
          {"template", r.template_name},
          {"template_version", r.template_version},
          {"config", nlohmann::json::parse(r.config_json, nullptr, false)},
          {"seconds", s},
          {"gflops", r.workload.flops / s / 1e9},
          {"agent", r.result.agent_id}};
}

absl::StatusOr<std::unique_ptr<Database>> OpenExisting(const Flags& flags) {
  RETURN_IF_ERROR(flags.Require("db"));
  DatabaseOptions options;
  options.path = flags.Get("db");
  options.create_if_missing = false;
  return Database::Open(options);
}

absl::StatusOr<int> Best(const Flags& flags) {
  RETURN_IF_ERROR(flags.Require("task"));
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task")));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenExisting(flags));
  ASSIGN_OR_RETURN(std::vector<TargetSummary> targets, db->TargetsOf(task.WorkloadKey()));
  if (targets.empty()) {
    return absl::NotFoundError("no records for " + task.CanonicalText() + " in " + flags.Get("db"));
  }
  // Never silently pick another target's records: narrow down, and insist on an
  // explicit choice when more than one target remains.
  std::vector<TargetSummary> matching;
  for (const TargetSummary& t : targets) {
    if (flags.Has("device-key") && t.target.device_key != flags.Get("device-key")) continue;
    if (flags.Has("target-key") && t.target.key != flags.Get("target-key")) continue;
    matching.push_back(t);
  }
  std::string available;
  for (const TargetSummary& t : targets) available += "\n  " + t.target.key;
  if (matching.empty()) {
    return absl::NotFoundError("no records for " + task.CanonicalText() +
                               " on the requested target; targets with records:" + available);
  }
  if (matching.size() > 1) {
    return absl::InvalidArgumentError(task.CanonicalText() +
                                      " has records on several targets; choose one with "
                                      "--target-key:" + available);
  }
  ASSIGN_OR_RETURN(TuningRecord best, db->Best(task.WorkloadKey(), matching[0].target.key));
  if (flags.Has("json")) {
    std::printf("%s\n", RecordJson(best).dump().c_str());
    return 0;
  }
  double s = best.result.MedianCost();
  std::printf("task:    %s\ntarget:  %s\nconfig:  %s\nbest:    %.2f GFLOP/s (%.3f ms), record %lld\n",
              best.workload.task_text.c_str(), best.target.key.c_str(), best.config_json.c_str(),
              best.workload.flops / s / 1e9, s * 1e3, static_cast<long long>(best.id));
  return 0;
}

absl::StatusOr<int> List(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenExisting(flags));
  ASSIGN_OR_RETURN(std::vector<WorkloadSummary> rows, db->List());
  if (flags.Has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const WorkloadSummary& w : rows) {
      nlohmann::json row = {{"task", w.workload.task_text}, {"target_key", w.target.key},
                            {"records", w.records}, {"errors", w.errors}};
      if (w.best) row["best"] = RecordJson(*w.best);
      out.push_back(row);
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (rows.empty()) std::printf("(no records)\n");
  for (const WorkloadSummary& w : rows) {
    std::printf("%-45s %-50s %6lld records %5lld failed", w.workload.task_text.c_str(),
                w.target.key.c_str(), static_cast<long long>(w.records),
                static_cast<long long>(w.errors));
    if (w.best) std::printf("  best %.2f GFLOP/s", w.workload.flops / w.best->result.MedianCost() / 1e9);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

absl::StatusOr<int> DbCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"db", "task", "device-key", "target-key"},
                                             {"json", "help"}));
  if (flags.Has("help")) {
    std::fputs(kDbUsage, stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return absl::InvalidArgumentError("expected a subcommand: best or list (see --help)");
  }
  const std::string& sub = flags.positional()[0];
  if (sub == "best") return Best(flags);
  if (sub == "list") return List(flags);
  return absl::InvalidArgumentError("unknown db subcommand '" + sub + "' (best, list)");
}

}  // namespace tuneforge::cli
