// RecordWriter: rows <-> records and the one place a record is written.
#include "db/record_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "nlohmann/json.hpp"

namespace tuneforge::db_internal {

#define TF_RECORD_COLUMNS                                                              \
  "SELECT r.id, w.key, w.op, w.task_text, w.task_json, w.flops, "                      \
  "t.key, t.triple, t.cpu, t.features, t.num_threads, t.device_key, "                 \
  "r.job_id, r.template_name, r.template_version, r.config_json, r.costs_json, "      \
  "r.error_kind, r.error_message, r.build_seconds, r.start_unix_us, r.end_unix_us, " \
  "r.agent_id, r.environment_json, r.content_id"
#define TF_RECORD_FROM                                  \
  " FROM records r JOIN workloads w ON w.id = r.workload_id " \
  "JOIN targets t ON t.id = r.target_id "

const char kRecordSelect[] =
    TF_RECORD_COLUMNS ", r.proposed_by, r.uploaded_by, r.upload_trusted" TF_RECORD_FROM;

const std::string& RepresentativeSql() {
  static const std::string sql =
      std::string(kRecordSelect) +
      "WHERE r.config_id = ? AND r.error_kind = 'none' AND r.median_cost IS NOT NULL "
      "ORDER BY r.start_unix_us DESC, r.id DESC LIMIT 1";
  return sql;
}

namespace {
// The v2 migration reads records before v4 added proposed_by.
const char kRecordSelectBeforeV4[] = TF_RECORD_COLUMNS TF_RECORD_FROM;
}  // namespace

#undef TF_RECORD_COLUMNS
#undef TF_RECORD_FROM

namespace {

// The arrays this backend writes ("[1.5e-05,0.002]": no spaces, finite numbers) parsed
// without building a JSON tree: this runs for every config a record is folded into.
// Returns false on anything else, which then goes through the JSON library.
bool ParseCostsFast(const std::string& text, std::vector<double>* out) {
  const char* p = text.data();
  const char* end = p + text.size();
  if (p == end || *p++ != '[') return false;
  if (p != end && *p == ']') return p + 1 == end;
  while (p != end) {
    double v = 0;
    std::from_chars_result r = std::from_chars(p, end, v);
    if (r.ec != std::errc() || !std::isfinite(v)) return false;
    out->push_back(v);
    p = r.ptr;
    if (p == end) return false;
    if (*p == ']') return p + 1 == end;
    if (*p++ != ',') return false;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseCosts(const std::string& text) {
  std::vector<double> out;
  if (ParseCostsFast(text, &out)) return out;
  out.clear();
  nlohmann::json costs = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!costs.is_array()) return absl::DataLossError("costs are not a JSON array");
  out.reserve(costs.size());
  for (const nlohmann::json& c : costs) {
    if (!c.is_number()) return absl::DataLossError("costs hold a non-number: " + c.dump());
    out.push_back(c.get<double>());
  }
  return out;
}

std::string CostsJson(const std::vector<double>& costs) {
  // By hand rather than through the JSON library: this runs twice for every record
  // written. std::to_chars prints the shortest text that reads back as the same
  // double (exact round trip); costs are finite (ValidateRecord).
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < costs.size(); ++i) {
    if (i > 0) out += ',';
    std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), costs[i]);
    out.append(buf, r.ptr);
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
  if (row.ColumnCount() > 27) {
    r.proposed_by = row.ColumnText(25);
    r.uploaded_by = row.ColumnText(26);
    r.upload_trusted = row.ColumnInt64(27) != 0;
  }
  return r;
}

absl::Status ValidateRecord(const TuningRecord& r) {
  if (r.workload.key.empty()) return absl::InvalidArgumentError("empty workload key");
  if (r.target.key.empty()) return absl::InvalidArgumentError("empty target key");
  if (r.template_name.empty()) return absl::InvalidArgumentError("empty template name");
  if (!ParseMeasureErrorKind(MeasureErrorKindName(r.result.error))) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown error kind ", static_cast<int>(r.result.error)));
  }
  for (size_t j = 0; j < r.result.costs.size(); ++j) {
    // JSON has no inf/NaN, and a negative time is a measurement bug; either would
    // corrupt the ranking. A success took time: 0 s would rank as infinitely fast.
    double c = r.result.costs[j];
    const bool success = r.result.error == MeasureErrorKind::kNone;
    if (!std::isfinite(c) || c < 0 || (success && c == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cost[", j, "] = ", c, " is not a finite, ", success ? "positive" : "non-negative", " time"));
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

}  // namespace

absl::StatusOr<RecordWriter> RecordWriter::Prepare(sqlite3* db, bool v2_backfill) {
  RecordWriter w;
  w.db_ = db;
  if (!v2_backfill) {
    ASSIGN_OR_RETURN(int64_t any,
                     QueryInt64(db, "SELECT EXISTS (SELECT 1 FROM tombstones)"));
    w.has_tombstones_ = any != 0;
    if (w.has_tombstones_) {
      ASSIGN_OR_RETURN(w.find_tombstone_,
                       Statement::Prepare(db, "SELECT 1 FROM tombstones WHERE content_id = ?"));
    }
  }
  // The v2 backfill runs before the provenance columns exist (schema v4).
  ASSIGN_OR_RETURN(w.find_content_,
                   Statement::Prepare(db, v2_backfill
                                              ? "SELECT id, 0 FROM records WHERE workload_id = ? AND "
                                                "target_id = ? AND content_id = ?"
                                              : "SELECT id, (config_id IS NULL AND uploaded_by != '' "
                                                "AND upload_trusted = 0) FROM records WHERE "
                                                "workload_id = ? AND target_id = ? AND content_id = ?"));
  if (!v2_backfill) {
    ASSIGN_OR_RETURN(w.promote_record_,
                     Statement::Prepare(db, "UPDATE records SET config_id = ?, uploaded_by = ?, "
                                            "upload_trusted = ? WHERE id = ?"));
  }
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
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"));
  ASSIGN_OR_RETURN(
      w.update_config_,
      Statement::Prepare(db,
                         "UPDATE configs SET successes = ?2, failures = ?3, wrong_answers = ?4, "
                         "samples_json = ?5, median_cost = ?6, rank_class = ?7 WHERE id = ?1"));
  if (!v2_backfill) {
    ASSIGN_OR_RETURN(
        w.insert_record_,
        Statement::Prepare(
            db,
            "INSERT INTO records (workload_id, target_id, job_id, template_name, "
            "template_version, config_json, costs_json, median_cost, error_kind, error_message, "
            "build_seconds, start_unix_us, end_unix_us, agent_id, environment_json, "
            "created_unix_us, content_id, config_id, proposed_by, uploaded_by, upload_trusted) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  }
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
  auto fold = [&](ConfigState* c) {
    c->successes += ok ? 1 : 0;
    c->failures += !ok && !wrong ? 1 : 0;
    c->wrong_answers += wrong ? 1 : 0;
    // The pooled samples of every successful record; configs are measured a handful
    // of times, so the array stays short.
    if (ok) c->samples.insert(c->samples.end(), r.result.costs.begin(), r.result.costs.end());
  };
  auto bind_state = [](Statement& u, int col, const ConfigState& c) {
    u.BindInt64(col++, c.successes);
    u.BindInt64(col++, c.failures);
    u.BindInt64(col++, c.wrong_answers);
    u.BindText(col++, CostsJson(c.samples));
    if (c.samples.empty()) {
      u.BindNull(col++);
    } else {
      u.BindDouble(col++, Median(c.samples));
    }
    const int rank =
        (c.wrong_answers > 0 || c.successes == 0) ? 2 : (c.successes >= 2 ? 0 : 1);
    u.BindInt64(col++, rank);
  };

  std::string cache_key = absl::StrCat(workload_id, "/", target_id, "/", r.template_version, "/",
                                       r.template_name, "\n", r.config_json);
  auto cached = configs_.find(cache_key);
  ConfigState* state = cached == configs_.end() ? nullptr : &cached->second;
  if (state == nullptr) {
    // Most records measure a new config: try the INSERT first (one probe of the
    // unique key) and read the stored row only when it already exists.
    ConfigState fresh;
    fold(&fresh);
    Statement& ins = insert_config_;
    ins.Reset();
    ins.BindInt64(1, workload_id);
    ins.BindInt64(2, target_id);
    ins.BindText(3, r.template_name);
    ins.BindInt64(4, r.template_version);
    ins.BindText(5, r.config_json);
    bind_state(ins, 6, fresh);
    RETURN_IF_ERROR(ins.Run());
    if (Changes(db_) == 1) {
      fresh.id = LastInsertRowid(db_);
      int64_t id = fresh.id;
      configs_.emplace(std::move(cache_key), std::move(fresh));
      return id;
    }
    Statement& find = select_config_;
    find.Reset();
    find.BindInt64(1, workload_id);
    find.BindInt64(2, target_id);
    find.BindText(3, r.template_name);
    find.BindInt64(4, r.template_version);
    find.BindText(5, r.config_json);
    ASSIGN_OR_RETURN(bool exists, find.Step());
    TF_CHECK(exists, "configs row vanished inside a transaction");
    ConfigState stored;
    stored.id = find.ColumnInt64(0);
    stored.successes = find.ColumnInt64(1);
    stored.failures = find.ColumnInt64(2);
    stored.wrong_answers = find.ColumnInt64(3);
    absl::StatusOr<std::vector<double>> samples = ParseCosts(find.ColumnText(4));
    find.Reset();  // see WorkloadId
    if (!samples.ok()) return samples.status();
    stored.samples = std::move(*samples);
    state = &configs_.emplace(std::move(cache_key), std::move(stored)).first->second;
  }
  fold(state);
  Statement& u = update_config_;
  u.Reset();
  u.BindInt64(1, state->id);
  bind_state(u, 2, *state);
  RETURN_IF_ERROR(u.Run());
  return state->id;
}

absl::StatusOr<RecordWriter::Written> RecordWriter::Write(const TuningRecord& r,
                                                          int64_t now_unix_us) {
  RETURN_IF_ERROR(ValidateRecord(r));
  const std::string content_id = ContentId(r);
  // The pair first: the content index is keyed by it (schema v6). A duplicate's
  // workload and target rows exist already, so nothing is added for it.
  ASSIGN_OR_RETURN(int64_t workload_id, WorkloadId(r.workload));
  ASSIGN_OR_RETURN(int64_t target_id, TargetId(r.target));
  find_content_.Reset();
  find_content_.BindInt64(1, workload_id);
  find_content_.BindInt64(2, target_id);
  find_content_.BindText(3, content_id);
  ASSIGN_OR_RETURN(bool dup, find_content_.Step());
  if (dup) {
    int64_t id = find_content_.ColumnInt64(0);
    const bool stored_untrusted = find_content_.ColumnInt64(1) != 0;
    find_content_.Reset();
    if (stored_untrusted && !r.UntrustedUpload()) {
      // A trusted copy of what a user uploaded first: ranked now, with the trusted
      // provenance, as if it had come first (a duplicate still: nothing new is stored).
      ASSIGN_OR_RETURN(int64_t config_id, FoldIntoConfig(workload_id, target_id, r));
      promote_record_.Reset();
      promote_record_.BindInt64(1, config_id);
      promote_record_.BindText(2, r.uploaded_by);
      promote_record_.BindInt64(3, r.upload_trusted ? 1 : 0);
      promote_record_.BindInt64(4, id);
      RETURN_IF_ERROR(promote_record_.Run());
    }
    return Written{id, Outcome::kDuplicate};
  }
  if (has_tombstones_) {
    find_tombstone_.Reset();
    find_tombstone_.BindText(1, content_id);
    ASSIGN_OR_RETURN(bool deleted, find_tombstone_.Step());
    find_tombstone_.Reset();
    if (deleted) return Written{0, Outcome::kCompacted};
  }
  // An untrusted upload stays out of the ranking (no configs row, no config_id).
  int64_t config_id = 0;
  if (!r.UntrustedUpload()) {
    ASSIGN_OR_RETURN(config_id, FoldIntoConfig(workload_id, target_id, r));
  }

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
  if (config_id != 0) {
    s.BindInt64(18, config_id);
  } else {
    s.BindNull(18);
  }
  s.BindText(19, r.proposed_by);
  s.BindText(20, r.uploaded_by);
  s.BindInt64(21, r.upload_trusted ? 1 : 0);
  RETURN_IF_ERROR(s.Run());
  return Written{LastInsertRowid(db_), Outcome::kInserted};
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
  static const std::string kSql = absl::StrCat(kRecordSelectBeforeV4, "ORDER BY r.id");
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
  ASSIGN_OR_RETURN(RecordWriter writer, RecordWriter::Prepare(db, /*v2_backfill=*/true));
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
