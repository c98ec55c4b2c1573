// `tuneforge db ...`: query and maintain the tuning log, in a SQLite file (--db) or on
// a server (--server HOST:PORT, through DatabaseService). Export, import and merge are
// in cli/db_transfer.cc.
#include "cli/db_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "cli/client.h"
#include "compiler/templates/template.h"
#include "cli/commands.h"
#include "server/database_client.h"
#include "tuner/log_model.h"

namespace tuneforge::cli {

constexpr const char* kDbUsage =
    "usage: tuneforge db <subcommand> (--db PATH | --server HOST:PORT) [options] [--json]\n"
    "\n"
    "queries:\n"
    "  best     --task T [--device-key K | --target-key K]  the best config (noise-aware)\n"
    "  top      --task T [--device-key K | --target-key K] [--k N]  the N best configs\n"
    "  history  --task T [--device-key K | --target-key K]  records over time, improvements\n"
    "  list     every (task, target) with its record count and best\n"
    "  targets  one line per target: tasks, records, failures, first/last measurement\n"
    "  status   --tasks FILE | --task T, (--device-key K | --target-key K)\n"
    "           which tasks are tuned, untuned, or stale (tuned with an older template)\n"
    "  stats    counts, time span and file size\n"
    "maintenance:\n"
    "  export   [--out FILE] [--task T] [--target-key K] [--since D] [--until D]\n"
    "           JSON lines (tuneforge log format 1); D is YYYY-MM-DD or unix seconds\n"
    "  import   FILE [--format tuneforge|autotvm]  idempotent; bad lines are reported\n"
    "  merge    A B  copy every record of database B into database A (idempotent)\n"
    "  compact  --keep N  keep the N best records per (task, target) plus the best\n"
    "           config's records, then VACUUM; the deleted records are remembered and\n"
    "           never re-imported\n"
    "  train-model [--op OP] [--target-key K] [--max-records N] [--stale-only]\n"
    "           pre-train the log model of every (op, target): a cost model of all\n"
    "           its records, which new tasks' searches start from (docs/search.md);\n"
    "           --db only (a server refreshes its own in the background)\n"
    "\n"
    "--server uses the server's DatabaseService (every subcommand but merge), so a team\n"
    "never opens the server's SQLite file over a network share; compact needs an admin\n"
    "token.\n";

absl::StatusOr<std::unique_ptr<Database>> OpenDb(const Flags& flags, bool create_if_missing,
                                                 bool read_only) {
  if (flags.Has("db") == flags.Has("server")) {
    return absl::InvalidArgumentError("give exactly one of --db PATH or --server HOST:PORT");
  }
  if (flags.Has("server")) {
    RemoteDatabaseOptions options;
    options.address = flags.Get("server");
    ASSIGN_OR_RETURN(options.token, TokenFromFlag(flags.Get("token-file")));
    options.tls_ca = flags.Get("tls-ca");
    options.insecure = Insecure();
    return ConnectRemoteDatabase(options);
  }
  DatabaseOptions options;
  options.path = flags.Get("db");
  options.create_if_missing = create_if_missing;
  options.read_only = read_only;
  return Database::Open(options);
}

nlohmann::json RecordJson(const TuningRecord& r) {
  double s = r.result.MedianCost();
  return {{"record_id", r.id},
          {"content_id", r.content_id},
          {"task", r.workload.task_text},
          {"target_key", r.target.key},
          {"device_key", r.target.device_key},
          {"template", r.template_name},
          {"template_version", r.template_version},
          {"config", nlohmann::json::parse(r.config_json, nullptr, false)},
          {"seconds", s},
          {"gflops", r.workload.flops / s / 1e9},
          // How much the record's samples disagree (compiler/support/stats.h).
          {"spread", RelativeSpread(r.result.costs)},
          {"agent", r.result.agent_id},
          {"start_unix_us", r.result.start_unix_us}};
}

absl::StatusOr<int64_t> ParseDateFlag(const Flags& flags, const std::string& name) {
  if (!flags.Has(name)) return 0;
  std::string text = flags.Get(name);
  int64_t seconds = 0;
  if (absl::SimpleAtoi(text, &seconds) && seconds >= 0) return seconds * 1000000;
  absl::Time t;
  std::string error;
  if (!absl::ParseTime("%Y-%m-%d", text, absl::UTCTimeZone(), &t, &error) &&
      !absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return absl::InvalidArgumentError("--" + name + " must be YYYY-MM-DD, RFC 3339 or unix " +
                                      "seconds, got '" + text + "'");
  }
  return absl::ToUnixMicros(t);
}

namespace {

std::string TimeText(int64_t unix_us) {
  if (unix_us <= 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMicros(unix_us), absl::UTCTimeZone());
}

// The target of a per-task query. Never silently picks another target's records:
// narrows down by --device-key / --target-key, and insists on an explicit choice when
// more than one target remains.
absl::StatusOr<std::string> ResolveTarget(Database& db, const TuningTask& task,
                                          const Flags& flags) {
  ASSIGN_OR_RETURN(std::vector<TargetSummary> targets, db.TargetsOf(task.WorkloadKey()));
  if (targets.empty()) return absl::NotFoundError("no records for " + task.CanonicalText());
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
                                      "--target-key:" +
                                      available);
  }
  return matching[0].target.key;
}

absl::StatusOr<int> Best(const Flags& flags) {
  RETURN_IF_ERROR(flags.Require("task"));
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task")));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(std::string target, ResolveTarget(*db, task, flags));
  ASSIGN_OR_RETURN(std::vector<RankedConfig> top, db->TopK(task.WorkloadKey(), target, 1));
  if (top.empty()) {
    return absl::NotFoundError("no successful record for " + task.CanonicalText() + " on " +
                               target);
  }
  const RankedConfig& best = top[0];
  if (flags.Has("json")) {
    nlohmann::json j = RecordJson(best.record);
    j["seconds"] = best.median_cost;
    j["gflops"] = best.record.workload.flops / best.median_cost / 1e9;
    j["measurements"] = best.measurements;
    j["samples"] = best.samples;
    j["remeasured"] = best.remeasured;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "task:    %s\ntarget:  %s\nconfig:  %s\nbest:    %.2f GFLOP/s (%.3f ms, median of %lld "
      "samples in %lld measurement(s)), record %lld (its samples' spread %.1f%%)\n",
      best.record.workload.task_text.c_str(), target.c_str(), best.config_json.c_str(),
      best.record.workload.flops / best.median_cost / 1e9, best.median_cost * 1e3,
      static_cast<long long>(best.samples), static_cast<long long>(best.measurements),
      static_cast<long long>(best.record.id), 100 * RelativeSpread(best.record.result.costs));
  return 0;
}

absl::StatusOr<int> Top(const Flags& flags) {
  RETURN_IF_ERROR(flags.Require("task"));
  ASSIGN_OR_RETURN(int64_t k, flags.GetInt("k", 10, 1, 10000));
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task")));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(std::string target, ResolveTarget(*db, task, flags));
  ASSIGN_OR_RETURN(std::vector<RankedConfig> top,
                   db->TopK(task.WorkloadKey(), target, static_cast<int>(k)));
  if (flags.Has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const RankedConfig& c : top) {
      out.push_back({{"template", c.template_name},
                     {"template_version", c.template_version},
                     {"config", nlohmann::json::parse(c.config_json, nullptr, false)},
                     {"seconds", c.median_cost},
                     {"gflops", c.record.workload.flops / c.median_cost / 1e9},
                     {"measurements", c.measurements},
                     {"samples", c.samples},
                     {"remeasured", c.remeasured},
                     {"spread", RelativeSpread(c.record.result.costs)},
                     {"record_id", c.record.id}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (top.empty()) std::printf("(no successful records)\n");
  for (size_t i = 0; i < top.size(); ++i) {
    const RankedConfig& c = top[i];
    std::printf("%3zu  %9.2f GFLOP/s  %9.3f ms  %2lld meas %s  %s\n", i + 1,
                c.record.workload.flops / c.median_cost / 1e9, c.median_cost * 1e3,
                static_cast<long long>(c.measurements),
                c.remeasured ? "(re-measured)" : "             ", c.config_json.c_str());
  }
  return 0;
}

absl::StatusOr<int> History(const Flags& flags) {
  RETURN_IF_ERROR(flags.Require("task"));
  ASSIGN_OR_RETURN(TuningTask task, ParseTask(flags.Get("task")));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(std::string target, ResolveTarget(*db, task, flags));
  ASSIGN_OR_RETURN(std::vector<HistoryPoint> points, db->History(task.WorkloadKey(), target));
  const double flops = task.Flops();
  if (flags.Has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const HistoryPoint& p : points) {
      nlohmann::json j = {{"record_id", p.record_id},
                          {"start_unix_us", p.start_unix_us},
                          {"error", MeasureErrorKindName(p.error)},
                          {"improved", p.improved}};
      if (std::isfinite(p.median_cost)) j["seconds"] = p.median_cost;
      if (std::isfinite(p.best_so_far)) j["best_seconds"] = p.best_so_far;
      out.push_back(j);
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  // The improvements only; a full listing is --json.
  int64_t errors = 0;
  for (const HistoryPoint& p : points) errors += p.error != MeasureErrorKind::kNone;
  std::printf("%s on %s: %zu records, %lld failed\n", task.CanonicalText().c_str(), target.c_str(),
              points.size(), static_cast<long long>(errors));
  for (size_t i = 0; i < points.size(); ++i) {
    const HistoryPoint& p = points[i];
    if (!p.improved) continue;
    std::printf("  %s  #%-6zu record %-8lld %9.2f GFLOP/s\n", TimeText(p.start_unix_us).c_str(),
                i + 1, static_cast<long long>(p.record_id), flops / p.best_so_far / 1e9);
  }
  return 0;
}

absl::StatusOr<int> List(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(std::vector<WorkloadSummary> rows, db->List());
  if (flags.Has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const WorkloadSummary& w : rows) {
      nlohmann::json row = {{"task", w.workload.task_text},
                            {"target_key", w.target.key},
                            {"records", w.records},
                            {"errors", w.errors}};
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
    if (w.best)
      std::printf("  best %.2f GFLOP/s", w.workload.flops / w.best->result.MedianCost() / 1e9);
    std::printf("\n");
  }
  return 0;
}

absl::StatusOr<int> Targets(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(std::vector<TargetStats> rows, db->TargetSummaries());
  if (flags.Has("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const TargetStats& t : rows) {
      out.push_back({{"target_key", t.target.key},
                     {"device_key", t.target.device_key},
                     {"cpu", t.target.cpu},
                     {"tasks", t.workloads},
                     {"records", t.records},
                     {"errors", t.errors},
                     {"first_unix_us", t.first_unix_us},
                     {"last_unix_us", t.last_unix_us}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (rows.empty()) std::printf("(no records)\n");
  for (const TargetStats& t : rows) {
    std::printf("%-50s %5lld tasks %8lld records %6lld failed  %s .. %s\n", t.target.key.c_str(),
                static_cast<long long>(t.workloads), static_cast<long long>(t.records),
                static_cast<long long>(t.errors), TimeText(t.first_unix_us).c_str(),
                TimeText(t.last_unix_us).c_str());
  }
  return 0;
}

// The target of `db status`: explicit, since a task list may have no records yet.
absl::StatusOr<std::string> StatusTarget(Database& db, const Flags& flags) {
  if (flags.Has("target-key")) return flags.Get("target-key");
  if (!flags.Has("device-key")) {
    return absl::InvalidArgumentError("db status needs --target-key or --device-key");
  }
  ASSIGN_OR_RETURN(std::vector<TargetStats> targets, db.TargetSummaries());
  std::vector<std::string> keys;
  for (const TargetStats& t : targets) {
    if (t.target.device_key == flags.Get("device-key")) keys.push_back(t.target.key);
  }
  if (keys.size() == 1) return keys[0];
  if (keys.empty()) {
    return absl::NotFoundError("no target with device key '" + flags.Get("device-key") +
                               "' in the db");
  }
  std::string list;
  for (const std::string& k : keys) list += "\n  " + k;
  return absl::InvalidArgumentError("several targets have device key '" + flags.Get("device-key") +
                                    "'; choose one with --target-key:" + list);
}

absl::StatusOr<int> Status(const Flags& flags) {
  std::vector<std::string> texts;
  if (flags.Has("tasks")) {
    std::ifstream in(flags.Get("tasks"));
    if (!in) return absl::NotFoundError("cannot read task list " + flags.Get("tasks"));
    std::string line;
    while (std::getline(in, line)) {
      absl::string_view s = absl::StripAsciiWhitespace(line);
      if (!s.empty() && s[0] != '#') texts.emplace_back(s);
    }
  } else if (flags.Has("task")) {
    texts.push_back(flags.Get("task"));
  } else {
    return absl::InvalidArgumentError("db status needs --tasks FILE or --task T");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(std::string target, StatusTarget(*db, flags));
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, int> counts;
  for (const std::string& text : texts) {
    absl::StatusOr<TuningTask> task = ParseTask(text);
    if (!task.ok()) {
      return absl::InvalidArgumentError("task '" + text +
                                        "': " + std::string(task.status().message()));
    }
    // The template this build would tune the task with; records of an older version
    // of it are "stale" (the config may mean something else now).
    std::string current_template;
    int current_version = 0;
    absl::StatusOr<const Template*> tmpl = FindTemplate(*task);
    if (tmpl.ok()) {
      current_template = (*tmpl)->name();
      current_version = (*tmpl)->version();
    }
    ASSIGN_OR_RETURN(std::vector<TemplateVersionSummary> versions,
                     db->TemplateVersions(task->WorkloadKey(), target));
    bool found = false;
    int tuned_version = 0;
    for (const TemplateVersionSummary& v : versions) {
      if (!current_template.empty() && v.template_name != current_template) continue;
      tuned_version = std::max(tuned_version, v.newest_version);
      found = true;
    }
    std::string state = !found ? "untuned" : tuned_version >= current_version ? "tuned" : "stale";
    counts[state]++;
    out.push_back({{"task", task->CanonicalText()},
                   {"state", state},
                   {"template", current_template},
                   {"template_version", current_version},
                   {"tuned_template_version", tuned_version}});
  }
  if (flags.Has("json")) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  for (const nlohmann::json& row : out) {
    std::string detail;
    if (row["state"] == "stale") {
      detail = absl::StrCat("  (tuned with ", row["template"].get<std::string>(), " v",
                            row["tuned_template_version"].get<int>(), ", current v",
                            row["template_version"].get<int>(), ")");
    }
    std::printf("%-8s %s%s\n", row["state"].get<std::string>().c_str(),
                row["task"].get<std::string>().c_str(), detail.c_str());
  }
  std::printf("%d tuned, %d stale, %d untuned on %s\n", counts["tuned"], counts["stale"],
              counts["untuned"], target.c_str());
  return 0;
}

absl::StatusOr<int> Stats(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags, false, /*read_only=*/false));
  ASSIGN_OR_RETURN(DatabaseStats s, db->Stats());
  if (flags.Has("json")) {
    std::printf("%s\n", nlohmann::json({{"schema_version", s.schema_version},
                                        {"records", s.records},
                                        {"failed_records", s.failed_records},
                                        {"tasks", s.workloads},
                                        {"targets", s.targets},
                                        {"configs", s.configs},
                                        {"foreign_records", s.foreign_records},
                                        {"jobs", s.jobs},
                                        {"tombstones", s.tombstones},
                                        {"cost_models", s.cost_models},
                                        {"oldest_unix_us", s.oldest_unix_us},
                                        {"newest_unix_us", s.newest_unix_us},
                                        {"file_bytes", s.file_bytes},
                                        {"free_bytes", s.free_bytes}})
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf(
      "schema:          v%d\nrecords:         %lld (%lld failed)\ntasks:           %lld\n"
      "targets:         %lld\nconfigs:         %lld\nforeign records: %lld\njobs:            "
      "%lld\ncompacted away:  %lld records (remembered, never re-imported)\ncost models:     "
      "%lld\nmeasured:        %s .. %s\nfile:            %.1f MiB (%.1f MiB free; db compact "
      "reclaims it)\n",
      s.schema_version, static_cast<long long>(s.records), static_cast<long long>(s.failed_records),
      static_cast<long long>(s.workloads), static_cast<long long>(s.targets),
      static_cast<long long>(s.configs), static_cast<long long>(s.foreign_records),
      static_cast<long long>(s.jobs), static_cast<long long>(s.tombstones),
      static_cast<long long>(s.cost_models), TimeText(s.oldest_unix_us).c_str(),
      TimeText(s.newest_unix_us).c_str(), s.file_bytes / 1048576.0, s.free_bytes / 1048576.0);
  return 0;
}

absl::StatusOr<int> Compact(const Flags& flags) {
  RETURN_IF_ERROR(flags.Require("keep"));
  ASSIGN_OR_RETURN(int64_t keep, flags.GetInt("keep", 0, 1, 1 << 30));
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags));
  ASSIGN_OR_RETURN(CompactResult r, db->Compact(static_cast<int>(keep)));
  if (flags.Has("json")) {
    std::printf("%s\n", nlohmann::json({{"records_before", r.records_before},
                                        {"records_deleted", r.records_deleted},
                                        {"bytes_before", r.bytes_before},
                                        {"bytes_after", r.bytes_after}})
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("deleted %lld of %lld records; file %.1f MiB -> %.1f MiB\n",
              static_cast<long long>(r.records_deleted), static_cast<long long>(r.records_before),
              r.bytes_before / 1048576.0, r.bytes_after / 1048576.0);
  return 0;
}

absl::StatusOr<int> TrainModel(const Flags& flags) {
  if (flags.Has("server"))
    return absl::InvalidArgumentError(
        "db train-model needs --db PATH: a server refreshes the log models of its own db in the "
        "background");
  LogModelRefresh refresh;
  refresh.op = flags.Get("op");
  refresh.target_key = flags.Get("target-key");
  refresh.only_stale = flags.Has("stale-only");
  ASSIGN_OR_RETURN(int64_t max_records,
                   flags.GetInt("max-records", refresh.model.max_records, 16, 10000000));
  refresh.model.max_records = static_cast<int>(max_records);
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDb(flags, /*create_if_missing=*/false,
                                                         /*read_only=*/false));
  ASSIGN_OR_RETURN(LogModelRefreshResult r, RefreshLogModels(db.get(), refresh));
  if (r.trained.empty() && r.skipped.empty())
    return absl::NotFoundError("no records" +
                               (refresh.op.empty() ? std::string() : " of op " + refresh.op) +
                               (refresh.target_key.empty() ? std::string()
                                                           : " on target " + refresh.target_key) +
                               " in " + flags.Get("db"));
  if (flags.Has("json")) {
    nlohmann::json trained = nlohmann::json::array();
    for (const LogModelInfo& i : r.trained) trained.push_back(nlohmann::json::parse(i.ToJson()));
    std::printf("%s\n", nlohmann::json({{"trained", trained}, {"skipped", r.skipped}}).dump().c_str());
  } else {
    for (const LogModelInfo& i : r.trained) {
      std::printf("trained %s: %lld records of %d tasks in %.2f s (trees %d deep)\n", i.key.c_str(),
                  static_cast<long long>(i.records), i.tasks, i.train_seconds, i.max_depth);
      for (const auto& [reason, count] : i.dropped)
        std::printf("  left out: %lld records (%s)\n", static_cast<long long>(count), reason.c_str());
    }
    for (const std::string& s : r.skipped) std::printf("skipped %s\n", s.c_str());
  }
  // Nothing trained where something was asked for (not up-to-date skips): an error.
  bool all_fresh = std::all_of(r.skipped.begin(), r.skipped.end(), [](const std::string& s) {
    return s.find(": up to date") != std::string::npos;
  });
  return r.trained.empty() && !all_fresh ? 1 : 0;
}

}  // namespace

absl::StatusOr<int> DbCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags,
                   Flags::Parse(args,
                                {"db", "server", "task", "tasks", "device-key", "target-key", "k",
                                 "keep", "out", "format", "since", "until", "token-file", "tls-ca",
                                 "op", "max-records"},
                                {"json", "help", "stale-only"}));
  if (flags.Has("help")) {
    std::fputs(kDbUsage, stdout);
    return 0;
  }
  if (flags.positional().empty()) {
    return absl::InvalidArgumentError(
        "expected a subcommand: best, top, history, list, targets, status, stats, export, "
        "import, merge, compact or train-model (see --help)");
  }
  const std::string& sub = flags.positional()[0];
  const std::map<std::string, absl::StatusOr<int> (*)(const Flags&)> subcommands = {
      {"best", Best},       {"top", Top},       {"history", History}, {"list", List},
      {"targets", Targets}, {"status", Status}, {"stats", Stats},     {"export", DbExport},
      {"import", DbImport}, {"merge", DbMerge}, {"compact", Compact},
      {"train-model", TrainModel},
  };
  auto it = subcommands.find(sub);
  if (it == subcommands.end()) {
    return absl::InvalidArgumentError("unknown db subcommand '" + sub + "' (see --help)");
  }
  // Only import and merge take positional arguments (files).
  if (flags.positional().size() > 1 && sub != "import" && sub != "merge") {
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[1] + "'");
  }
  return it->second(flags);
}

}  // namespace tuneforge::cli
