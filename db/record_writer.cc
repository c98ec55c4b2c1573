#include "db/record_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"
#include "nlohmann/json.hpp"

namespace tuneforge::db_internal {

const char kRecordSelect[] =
    "SELECT r.id, w.key, w.op, w.task_text, w.task_json, w.flops, "
    "t.key, t.triple, t.cpu, t.features, t.num_threads, t.device_key, "
    "r.job_id, r.template_name, r.template_version, r.config_json, r.costs_json, "
    "r.error_kind, r.error_message, r.build_seconds, r.start_unix_us, r.end_unix_us, "
    "r.agent_id, r.environment_json, r.content_id "
    "FROM records r JOIN workloads w ON w.id = r.workload_id "
    "JOIN targets t ON t.id = r.target_id ";

absl::StatusOr<std::vector<double>> ParseCosts(const std::string& text) {
  nlohmann::json costs = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!costs.is_array()) return absl::DataLossError("costs are not a JSON array");
  std::vector<double> out;
  out.reserve(costs.size());
  for (const nlohmann::json& c : costs) {
    if (!c.is_number()) return absl::DataLossError("costs hold a non-number: " + c.dump());
    out.push_back(c.get<double>());
  }
  return out;
}

std::string CostsJson(const std::vector<double>& costs) {
  // By hand rather than through the JSON library: this runs for every record written.
  // %.17g round-trips every double exactly; costs are finite (ValidateRecord).
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < costs.size(); ++i) {
    if (i > 0) out += ',';
    int n = std::snprintf(buf, sizeof(buf), "%.17g", costs[i]);
    out.append(buf, static_cast<size_t>(n));
  }
  out += ']';
  return out;
}

TargetInfo TargetFromRow(const Statement& row, int col) {
  TargetInfo t;
  t.key = row.ColumnText(col);
  t.triple = row.ColumnText(col + 1);
  t.cpu = row.ColumnText(col + 2);
  t.features = row.ColumnText(col + 3);
  t.num_threads = static_cast<int>(row.ColumnInt64(col + 4));
  t.device_key = row.ColumnText(col + 5);
  return t;
}

absl::StatusOr<TuningRecord> RecordFromRow(const Statement& row) {
  TuningRecord r;
  r.id = row.ColumnInt64(0);
  r.workload.key = row.ColumnText(1);
  r.workload.op = row.ColumnText(2);
  r.workload.task_text = row.ColumnText(3);
  r.workload.task_json = row.ColumnText(4);
  r.workload.flops = row.ColumnDouble(5);
  r.target = TargetFromRow(row, 6);
  r.job_id = row.ColumnText(12);
  r.template_name = row.ColumnText(13);
  r.template_version = static_cast<int>(row.ColumnInt64(14));
  r.config_json = row.ColumnText(15);
  absl::StatusOr<std::vector<double>> costs = ParseCosts(row.ColumnText(16));
  if (!costs.ok()) {
    return absl::DataLossError(absl::StrCat("record ", r.id, ": ", costs.status().message()));
  }
  r.result.costs = std::move(*costs);
  std::string kind = row.ColumnText(17);
  std::optional<MeasureErrorKind> parsed = ParseMeasureErrorKind(kind);
  if (!parsed) {
    return absl::DataLossError(absl::StrCat("record ", r.id, ": unknown error_kind '", kind, "'"));
  }
  r.result.error = *parsed;
  r.result.error_message = row.ColumnText(18);
  r.result.build_seconds = row.ColumnDouble(19);
  r.result.start_unix_us = row.ColumnInt64(20);
  r.result.end_unix_us = row.ColumnInt64(21);
  r.result.agent_id = row.ColumnText(22);
  r.result.environment_json = row.ColumnText(23);
  r.content_id = row.ColumnText(24);
  return r;
}

absl::Status ValidateRecord(const TuningRecord& r) {
  if (r.workload.key.empty()) return absl::InvalidArgumentError("empty workload key");
  if (r.target.key.empty()) return absl::InvalidArgumentError("empty target key");
  if (r.template_name.empty()) return absl::InvalidArgumentError("empty template name");
  for (size_t j = 0; j < r.result.costs.size(); ++j) {
    // JSON has no inf/NaN, and a negative time is a measurement bug; either would
    // corrupt the ranking.
    double c = r.result.costs[j];
    if (!std::isfinite(c) || c < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost[", j, "] = ", c, " is not a finite, non-negative time"));
    }
  }
  return absl::OkStatus();
}

namespace {

// A key must always name the same task / target: two different tasks under one key
// (a bug in key derivation, or a hand-edited import) would silently merge their
// records. The canonical task text is the workload's identity; for a target every
// field is part of its identity.
absl::Status CheckSameWorkload(const std::string& stored_text, const WorkloadInfo& w) {
  if (stored_text == w.task_text) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("workload key '", w.key, "' already names '",
                                                 stored_text, "', not '", w.task_text, "'"));
}

absl::Status CheckSameTarget(const TargetInfo& stored, const TargetInfo& t) {
  if (stored.triple == t.triple && stored.cpu == t.cpu && stored.features == t.features &&
      stored.num_threads == t.num_threads && stored.device_key == t.device_key) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "target key '", t.key, "' already names a different target (", stored.triple, " ", stored.cpu,
      " ", stored.features, " threads=", stored.num_threads, " device=", stored.device_key, ")"));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

absl::StatusOr<RecordWriter> RecordWriter::Prepare(sqlite3* db) {
  RecordWriter w;
  w.db_ = db;
  ASSIGN_OR_RETURN(w.find_content_,
                   Statement::Prepare(db, "SELECT id FROM records WHERE content_id = ?"));
  ASSIGN_OR_RETURN(
      w.insert_workload_,
      Statement::Prepare(db,
                         "INSERT INTO workloads (key, op, task_text, task_json, flops) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"));
  ASSIGN_OR_RETURN(w.select_workload_,
                   Statement::Prepare(db, "SELECT id, task_text FROM workloads WHERE key = ?"));
  ASSIGN_OR_RETURN(w.insert_target_,
                   Statement::Prepare(
                       db,
                       "INSERT INTO targets (key, triple, cpu, features, num_threads, device_key) "
                       "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"));
  ASSIGN_OR_RETURN(w.select_target_, Statement::Prepare(db,
                                                        "SELECT id, key, triple, cpu, features, "
                                                        "num_threads, device_key FROM targets "
                                                        "WHERE key = ?"));
  ASSIGN_OR_RETURN(
      w.select_config_,
      Statement::Prepare(db,
                         "SELECT id, successes, failures, wrong_answers, samples_json FROM configs "
                         "WHERE workload_id = ? AND target_id = ? AND template_name = ? AND "
                         "template_version = ? AND config_json = ?"));
  ASSIGN_OR_RETURN(
      w.insert_config_,
      Statement::Prepare(db,
                         "INSERT INTO configs (workload_id, target_id, template_name, "
                         "template_version, config_json, successes, failures, wrong_answers, "
                         "samples_json, median_cost, rank_class) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  ASSIGN_OR_RETURN(
      w.update_config_,
      Statement::Prepare(db,
                         "UPDATE configs SET successes = ?2, failures = ?3, wrong_answers = ?4, "
                         "samples_json = ?5, median_cost = ?6, rank_class = ?7 WHERE id = ?1"));
  ASSIGN_OR_RETURN(
      w.insert_record_,
      Statement::Prepare(
          db,
          "INSERT INTO records (workload_id, target_id, job_id, template_name, template_version, "
          "config_json, costs_json, median_cost, error_kind, error_message, build_seconds, "
          "start_unix_us, end_unix_us, agent_id, environment_json, created_unix_us, content_id, "
          "config_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  ASSIGN_OR_RETURN(w.attach_record_,
                   Statement::Prepare(db,
                                      "UPDATE records SET content_id = ?, config_id = ? "
                                      "WHERE id = ?"));
  return w;
}

absl::StatusOr<int64_t> RecordWriter::WorkloadId(const WorkloadInfo& w) {
  auto it = workload_ids_.find(w.key);
  if (it != workload_ids_.end()) {
    RETURN_IF_ERROR(CheckSameWorkload(it->second.second.task_text, w));
    return it->second.first;
  }
  insert_workload_.Reset();
  insert_workload_.BindText(1, w.key);
  insert_workload_.BindText(2, w.op);
  insert_workload_.BindText(3, w.task_text);
  insert_workload_.BindText(4, w.task_json);
  insert_workload_.BindDouble(5, w.flops);
  RETURN_IF_ERROR(insert_workload_.Run());
  select_workload_.Reset();
  select_workload_.BindText(1, w.key);
  ASSIGN_OR_RETURN(bool row, select_workload_.Step());
  TF_CHECK(row, "workload row vanished inside a transaction");
  std::string stored_text = select_workload_.ColumnText(1);
  int64_t id = select_workload_.ColumnInt64(0);
  // Reset at once: a statement left mid-result keeps a read snapshot open, which
  // blocks the WAL checkpoint after the commit (the WAL would grow without bound).
  select_workload_.Reset();
  RETURN_IF_ERROR(CheckSameWorkload(stored_text, w));
  workload_ids_.emplace(w.key, std::make_pair(id, w));
  return id;
}

absl::StatusOr<int64_t> RecordWriter::TargetId(const TargetInfo& t) {
  auto it = target_ids_.find(t.key);
  if (it != target_ids_.end()) {
    RETURN_IF_ERROR(CheckSameTarget(it->second.second, t));
    return it->second.first;
  }
  insert_target_.Reset();
  insert_target_.BindText(1, t.key);
  insert_target_.BindText(2, t.triple);
  insert_target_.BindText(3, t.cpu);
  insert_target_.BindText(4, t.features);
  insert_target_.BindInt64(5, t.num_threads);
  insert_target_.BindText(6, t.device_key);
  RETURN_IF_ERROR(insert_target_.Run());
  select_target_.Reset();
  select_target_.BindText(1, t.key);
  ASSIGN_OR_RETURN(bool row, select_target_.Step());
  TF_CHECK(row, "target row vanished inside a transaction");
  TargetInfo stored = TargetFromRow(select_target_, 1);
  int64_t id = select_target_.ColumnInt64(0);
  select_target_.Reset();  // see WorkloadId
  RETURN_IF_ERROR(CheckSameTarget(stored, t));
  target_ids_.emplace(t.key, std::make_pair(id, t));
  return id;
}

absl::StatusOr<int64_t> RecordWriter::FoldIntoConfig(int64_t workload_id, int64_t target_id,
                                                     const TuningRecord& r) {
  const bool ok = r.result.error == MeasureErrorKind::kNone && !r.result.costs.empty();
  const bool wrong = r.result.error == MeasureErrorKind::kWrongAnswer;
  Statement& find = select_config_;
  find.Reset();
  find.BindInt64(1, workload_id);
  find.BindInt64(2, target_id);
  find.BindText(3, r.template_name);
  find.BindInt64(4, r.template_version);
  find.BindText(5, r.config_json);
  ASSIGN_OR_RETURN(bool exists, find.Step());
  int64_t id = 0, successes = 0, failures = 0, wrong_answers = 0;
  // The pooled samples of every successful record; configs are measured a handful of
  // times, so the array stays short.
  std::vector<double> samples;
  if (exists) {
    id = find.ColumnInt64(0);
    successes = find.ColumnInt64(1);
    failures = find.ColumnInt64(2);
    wrong_answers = find.ColumnInt64(3);
    ASSIGN_OR_RETURN(samples, ParseCosts(find.ColumnText(4)));
  }
  find.Reset();
  successes += ok ? 1 : 0;
  failures += !ok && !wrong ? 1 : 0;
  wrong_answers += wrong ? 1 : 0;
  if (ok) samples.insert(samples.end(), r.result.costs.begin(), r.result.costs.end());
  const int rank = (wrong_answers > 0 || successes == 0) ? 2 : (successes >= 2 ? 0 : 1);

  Statement& u = exists ? update_config_ : insert_config_;
  u.Reset();
  int col = 1;
  if (exists) {
    u.BindInt64(col++, id);
  } else {
    u.BindInt64(col++, workload_id);
    u.BindInt64(col++, target_id);
    u.BindText(col++, r.template_name);
    u.BindInt64(col++, r.template_version);
    u.BindText(col++, r.config_json);
  }
  u.BindInt64(col++, successes);
  u.BindInt64(col++, failures);
  u.BindInt64(col++, wrong_answers);
  u.BindText(col++, CostsJson(samples));
  if (samples.empty()) {
    u.BindNull(col++);
  } else {
    u.BindDouble(col++, Median(samples));
  }
  u.BindInt64(col++, rank);
  RETURN_IF_ERROR(u.Run());
  return exists ? id : LastInsertRowid(db_);
}

absl::StatusOr<std::pair<int64_t, bool>> RecordWriter::Write(const TuningRecord& r,
                                                             int64_t now_unix_us) {
  RETURN_IF_ERROR(ValidateRecord(r));
  const std::string content_id = ContentId(r);
  find_content_.Reset();
  find_content_.BindText(1, content_id);
  ASSIGN_OR_RETURN(bool dup, find_content_.Step());
  if (dup) {
    int64_t id = find_content_.ColumnInt64(0);
    find_content_.Reset();
    return std::make_pair(id, false);
  }
  ASSIGN_OR_RETURN(int64_t workload_id, WorkloadId(r.workload));
  ASSIGN_OR_RETURN(int64_t target_id, TargetId(r.target));
  ASSIGN_OR_RETURN(int64_t config_id, FoldIntoConfig(workload_id, target_id, r));

  Statement& s = insert_record_;
  s.Reset();
  s.BindInt64(1, workload_id);
  s.BindInt64(2, target_id);
  s.BindTextOrNull(3, r.job_id);
  s.BindText(4, r.template_name);
  s.BindInt64(5, r.template_version);
  s.BindText(6, r.config_json);
  s.BindText(7, CostsJson(r.result.costs));
  if (r.result.costs.empty()) {
    s.BindNull(8);
  } else {
    s.BindDouble(8, r.result.MedianCost());
  }
  s.BindText(9, MeasureErrorKindName(r.result.error));
  s.BindText(10, r.result.error_message);
  s.BindDouble(11, r.result.build_seconds);
  s.BindInt64(12, r.result.start_unix_us);
  s.BindInt64(13, r.result.end_unix_us);
  s.BindText(14, r.result.agent_id);
  s.BindText(15, r.result.environment_json);
  s.BindInt64(16, now_unix_us);
  s.BindText(17, content_id);
  s.BindInt64(18, config_id);
  RETURN_IF_ERROR(s.Run());
  return std::make_pair(LastInsertRowid(db_), true);
}

absl::Status RecordWriter::Attach(int64_t record_id, const TuningRecord& r,
                                  const std::string& content_id) {
  ASSIGN_OR_RETURN(int64_t workload_id, WorkloadId(r.workload));
  ASSIGN_OR_RETURN(int64_t target_id, TargetId(r.target));
  ASSIGN_OR_RETURN(int64_t config_id, FoldIntoConfig(workload_id, target_id, r));
  attach_record_.Reset();
  attach_record_.BindText(1, content_id);
  attach_record_.BindInt64(2, config_id);
  attach_record_.BindInt64(3, record_id);
  return attach_record_.Run();
}

absl::Status BackfillContentIdsAndConfigs(sqlite3* db) {
  // v1 rows are read whole first: the writer updates the table being read.
  static const std::string kSql = absl::StrCat(kRecordSelect, "ORDER BY r.id");
  std::vector<TuningRecord> records;
  {
    ASSIGN_OR_RETURN(Statement all, Statement::Prepare(db, kSql.c_str()));
    while (true) {
      ASSIGN_OR_RETURN(bool row, all.Step());
      if (!row) break;
      ASSIGN_OR_RETURN(TuningRecord r, RecordFromRow(all));
      records.push_back(std::move(r));
    }
  }
  ASSIGN_OR_RETURN(RecordWriter writer, RecordWriter::Prepare(db));
  std::set<std::string> seen;
  for (const TuningRecord& r : records) {
    // v1 allowed the same measurement twice; both rows are kept (nothing is lost in a
    // migration), the later one under a marked id so the unique index holds.
    std::string id = ContentId(r);
    if (!seen.insert(id).second) id = absl::StrCat(id, "-v1dup", r.id);
    RETURN_IF_ERROR(writer.Attach(r.id, r, id));
  }
  return absl::OkStatus();
}

}  // namespace tuneforge::db_internal
