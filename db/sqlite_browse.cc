// The dashboard's paged queries on the SQLite backend: the best table, a record by
// id, a job's records. Each reads one page through an index, so its time does not
// grow with the number of records in the log.
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
      Statement::Prepare(db, absl::StrCat(kRecordSelect,
                                          "WHERE r.config_id = ? AND r.error_kind = 'none' AND "
                                          "r.median_cost IS NOT NULL "
                                          "ORDER BY r.start_unix_us DESC, r.id DESC LIMIT 1")
                                 .c_str()));
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

absl::StatusOr<std::vector<JobRecordPoint>> SqliteDatabase::JobRecordsImpl(const std::string& job_id,
                                                                            int64_t limit) {
  if (limit < 1) return absl::InvalidArgumentError(absl::StrCat("limit must be >= 1, got ", limit));
  absl::MutexLock lock(&mu_);
  // records_job gives the job's rows in id (= measurement) order.
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_.get(),
                                      "SELECT r.id, w.key, t.key, r.start_unix_us, r.error_kind, "
                                      "r.median_cost FROM records r INDEXED BY records_job "
                                      "JOIN workloads w ON w.id = r.workload_id "
                                      "JOIN targets t ON t.id = r.target_id "
                                      "WHERE r.job_id = ? ORDER BY r.id LIMIT ?"));
  stmt.BindText(1, job_id);
  stmt.BindInt64(2, limit);
  std::vector<JobRecordPoint> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    JobRecordPoint p;
    p.record_id = stmt.ColumnInt64(0);
    p.workload_key = stmt.ColumnText(1);
    p.target_key = stmt.ColumnText(2);
    p.start_unix_us = stmt.ColumnInt64(3);
    std::optional<MeasureErrorKind> kind = ParseMeasureErrorKind(stmt.ColumnText(4));
    if (!kind) return absl::DataLossError(absl::StrCat("record ", p.record_id, ": bad error_kind"));
    p.error = *kind;
    p.median_cost =
        stmt.ColumnIsNull(5) ? std::numeric_limits<double>::infinity() : stmt.ColumnDouble(5);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tuneforge::db_internal
