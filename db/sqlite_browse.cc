// The dashboard's paged queries on the SQLite backend: the best table, a record by
// id, a job's records. Each reads through an index, so its time does not grow with the
// number of records in the log.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"
#include "db/record_writer.h"
#include "db/sqlite_database.h"

namespace tuneforge::db_internal {

absl::StatusOr<std::vector<BestEntry>> SqliteDatabase::BestPageImpl(const BestPageQuery& query) {
  if (query.limit < 1 || query.limit > BestPageQuery::kMaxLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("page size must be 1..", BestPageQuery::kMaxLimit, ", got ", query.limit));
  }
  if (query.offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page offset must be >= 0, got ", query.offset));
  }
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kRead));
  // Every (workload, target) pair probes configs_rank once for its best config; the
  // pairs are few (workloads x targets) next to the records.
  ASSIGN_OR_RETURN(
      Statement pairs,
      Statement::Prepare(
          db,
          "SELECT w.key, w.op, w.task_text, w.task_json, w.flops, "
          "t.key, t.triple, t.cpu, t.features, t.num_threads, t.device_key, "
          "(SELECT c.id FROM configs c WHERE c.workload_id = w.id AND c.target_id = t.id "
          " AND c.rank_class < 2 ORDER BY c.rank_class, c.median_cost, c.id LIMIT 1) AS best "
          "FROM workloads w CROSS JOIN targets t "
          "WHERE (?1 = '' OR w.op = ?1) AND (?2 = '' OR t.key = ?2) AND best IS NOT NULL "
          "ORDER BY w.op, w.key, t.key LIMIT ?3 OFFSET ?4"));
  pairs.BindText(1, query.op);
  pairs.BindText(2, query.target_key);
  pairs.BindInt64(3, query.limit);
  pairs.BindInt64(4, query.offset);
  ASSIGN_OR_RETURN(
      Statement config,
      Statement::Prepare(db,
                         "SELECT c.template_name, c.template_version, c.config_json, c.median_cost, "
                         "c.successes, json_array_length(c.samples_json) FROM configs c WHERE c.id = ?"));
  ASSIGN_OR_RETURN(
      Statement representative,
      Statement::Prepare(db, RepresentativeSql().c_str()));
  std::vector<BestEntry> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, pairs.Step());
    if (!row) break;
    BestEntry e;
    e.workload.key = pairs.ColumnText(0);
    e.workload.op = pairs.ColumnText(1);
    e.workload.task_text = pairs.ColumnText(2);
    e.workload.task_json = pairs.ColumnText(3);
    e.workload.flops = pairs.ColumnDouble(4);
    e.target = TargetFromRow(pairs, 5);
    int64_t config_id = pairs.ColumnInt64(11);
    config.Reset();
    config.BindInt64(1, config_id);
    ASSIGN_OR_RETURN(bool found, config.Step());
    if (!found) return absl::DataLossError(absl::StrCat("config ", config_id, " vanished"));
    e.best.template_name = config.ColumnText(0);
    e.best.template_version = static_cast<int>(config.ColumnInt64(1));
    e.best.config_json = config.ColumnText(2);
    e.best.median_cost = config.ColumnDouble(3);
    e.best.measurements = config.ColumnInt64(4);
    e.best.samples = config.ColumnInt64(5);
    e.best.remeasured = e.best.measurements >= 2;
    representative.Reset();
    representative.BindInt64(1, config_id);
    ASSIGN_OR_RETURN(bool has_record, representative.Step());
    if (!has_record) {
      return absl::DataLossError(
          absl::StrCat("config ", config_id, " is ranked but has no successful record"));
    }
    ASSIGN_OR_RETURN(e.best.record, RecordFromRow(representative));
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<TuningRecord> SqliteDatabase::RecordByIdImpl(int64_t id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_.get(), absl::StrCat(kRecordSelect, "WHERE r.id = ?").c_str()));
  stmt.BindInt64(1, id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no record with id ", id));
  return RecordFromRow(stmt);
}

absl::StatusOr<std::vector<JobRecordPoint>> SqliteDatabase::JobRecordsImpl(const JobRecordsQuery& query) {
  const int64_t limit = query.limit;
  if (limit < 1) return absl::InvalidArgumentError(absl::StrCat("limit must be >= 1, got ", limit));
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kRead));
  // Targets are few (the devices of a farm); every (workload, target) pair is one
  // range of records_history from `since`, filtered by job id as it is read.
  std::vector<int64_t> targets;
  {
    ASSIGN_OR_RETURN(Statement all, Statement::Prepare(db, "SELECT id FROM targets"));
    while (true) {
      ASSIGN_OR_RETURN(bool row, all.Step());
      if (!row) break;
      targets.push_back(all.ColumnInt64(0));
    }
  }
  ASSIGN_OR_RETURN(Statement workload, Statement::Prepare(db, "SELECT id FROM workloads WHERE key = ?"));
  ASSIGN_OR_RETURN(
      Statement range,
      Statement::Prepare(db,
                         "SELECT r.id, w.key, t.key, r.start_unix_us, r.error_kind, r.median_cost "
                         "FROM records r INDEXED BY records_history "
                         "JOIN workloads w ON w.id = r.workload_id "
                         "JOIN targets t ON t.id = r.target_id "
                         "WHERE r.workload_id = ?1 AND r.target_id = ?2 AND r.start_unix_us >= ?3 "
                         "AND r.id > ?6 AND r.job_id = ?4 ORDER BY r.id LIMIT ?5"));
  std::vector<JobRecordPoint> out;
  for (const std::string& key : query.workload_keys) {
    workload.Reset();
    workload.BindText(1, key);
    ASSIGN_OR_RETURN(bool known, workload.Step());
    if (!known) continue;  // nothing measured yet
    const int64_t workload_id = workload.ColumnInt64(0);
    for (int64_t target_id : targets) {
      range.Reset();
      range.BindInt64(1, workload_id);
      range.BindInt64(2, target_id);
      range.BindInt64(3, query.since_unix_us);
      range.BindText(4, query.job_id);
      range.BindInt64(5, limit);
      range.BindInt64(6, query.after_record_id);
      while (true) {
        ASSIGN_OR_RETURN(bool row, range.Step());
        if (!row) break;
        JobRecordPoint p;
        p.record_id = range.ColumnInt64(0);
        p.workload_key = range.ColumnText(1);
        p.target_key = range.ColumnText(2);
        p.start_unix_us = range.ColumnInt64(3);
        std::optional<MeasureErrorKind> kind = ParseMeasureErrorKind(range.ColumnText(4));
        if (!kind) return absl::DataLossError(absl::StrCat("record ", p.record_id, ": bad error_kind"));
        p.error = *kind;
        p.median_cost =
            range.ColumnIsNull(5) ? std::numeric_limits<double>::infinity() : range.ColumnDouble(5);
        out.push_back(std::move(p));
      }
    }
  }
  range.Reset();
  workload.Reset();
  // Ids are the order of measurement (a record is stored when its result arrives).
  std::sort(out.begin(), out.end(),
            [](const JobRecordPoint& a, const JobRecordPoint& b) { return a.record_id < b.record_id; });
  if (static_cast<int64_t>(out.size()) > limit) out.resize(static_cast<size_t>(limit));
  return out;
}

}  // namespace tuneforge::db_internal
