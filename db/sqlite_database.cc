// The SQLite backend of Database: the queries and the Commit transaction.
// db/sqlite_open.cc opens, checks and migrates the file; db/sqlite_util.h wraps the
// C API. Every error a caller sees is one line that starts with the database path.

#include <sqlite3.h>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "compiler/support/status.h"
#include "db/database.h"
#include "db/sqlite_open.h"
#include "db/sqlite_util.h"
#include "nlohmann/json.hpp"

namespace tuneforge {

namespace {

using db_internal::Connection;
using db_internal::Statement;
using db_internal::Transaction;
using db_internal::UnixMicrosNow;
using db_internal::WithPath;

// ---------------------------------------------------------------------------------
// Row <-> domain conversion.

// The columns every record query selects, in the order RecordFromRow reads them.
constexpr char kRecordSelect[] =
    "SELECT r.id, w.key, w.op, w.task_text, w.task_json, w.flops, "
    "t.key, t.triple, t.cpu, t.features, t.num_threads, t.device_key, "
    "r.job_id, r.template_name, r.template_version, r.config_json, r.costs_json, "
    "r.error_kind, r.error_message, r.build_seconds, r.start_unix_us, r.end_unix_us, "
    "r.agent_id, r.environment_json "
    "FROM records r JOIN workloads w ON w.id = r.workload_id "
    "JOIN targets t ON t.id = r.target_id ";

absl::StatusOr<TuningRecord> RecordFromRow(const Statement& row) {
  TuningRecord r;
  r.id = row.ColumnInt64(0);
  r.workload.key = row.ColumnText(1);
  r.workload.op = row.ColumnText(2);
  r.workload.task_text = row.ColumnText(3);
  r.workload.task_json = row.ColumnText(4);
  r.workload.flops = row.ColumnDouble(5);
  r.target.key = row.ColumnText(6);
  r.target.triple = row.ColumnText(7);
  r.target.cpu = row.ColumnText(8);
  r.target.features = row.ColumnText(9);
  r.target.num_threads = static_cast<int>(row.ColumnInt64(10));
  r.target.device_key = row.ColumnText(11);
  r.job_id = row.ColumnText(12);
  r.template_name = row.ColumnText(13);
  r.template_version = static_cast<int>(row.ColumnInt64(14));
  r.config_json = row.ColumnText(15);

  nlohmann::json costs = nlohmann::json::parse(row.ColumnText(16), nullptr,
                                               /*allow_exceptions=*/false);
  if (!costs.is_array()) {
    return absl::DataLossError(absl::StrCat("record ", r.id, ": costs_json is not a JSON array"));
  }
  for (const nlohmann::json& c : costs) {
    if (!c.is_number()) {
      return absl::DataLossError(
          absl::StrCat("record ", r.id, ": costs_json holds a non-number: ", c.dump()));
    }
    r.result.costs.push_back(c.get<double>());
  }
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
  return r;
}

absl::StatusOr<std::vector<TuningRecord>> CollectRecords(Statement& stmt) {
  std::vector<TuningRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    ASSIGN_OR_RETURN(TuningRecord r, RecordFromRow(stmt));
    out.push_back(std::move(r));
  }
}

// Reads the six target columns starting at `col`.
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

JobRow JobFromRow(const Statement& row) {
  JobRow j;
  j.id = row.ColumnText(0);
  j.owner = row.ColumnText(1);
  j.spec_json = row.ColumnText(2);
  j.state = row.ColumnText(3);
  j.message = row.ColumnText(4);
  j.created_unix_us = row.ColumnInt64(5);
  j.updated_unix_us = row.ColumnInt64(6);
  return j;
}

// Checks what the schema cannot express well; the schema's CHECKs stay as a backstop.
absl::Status ValidateRecord(size_t index, const TuningRecord& r) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("record ", index, ": ", why));
  };
  if (r.workload.key.empty()) return bad("empty workload key");
  if (r.target.key.empty()) return bad("empty target key");
  for (size_t j = 0; j < r.result.costs.size(); ++j) {
    // JSON has no inf/NaN, and a negative time is a measurement bug; either would
    // corrupt Best.
    double c = r.result.costs[j];
    if (!std::isfinite(c) || c < 0) {
      return bad(absl::StrCat("cost[", j, "] = ", c, " is not a finite, non-negative time"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------

// Thread-safe: one connection, serialised by mu_. SQLite in WAL mode lets other
// processes read while we write; the busy timeout covers their writes.
class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(std::string path, Connection db, bool read_only, int schema_version)
      : path_(std::move(path)),
        read_only_(read_only),
        schema_version_(schema_version),
        db_(std::move(db)) {}

  int SchemaVersion() const override { return schema_version_; }

  absl::StatusOr<std::vector<int64_t>> Commit(const std::vector<TuningRecord>& records) override {
    return WithPath(path_, CommitImpl(records));
  }
  absl::StatusOr<TuningRecord> Best(const std::string& workload_key,
                                    const std::string& target_key) override {
    return WithPath(path_, BestImpl(workload_key, target_key));
  }
  absl::StatusOr<std::vector<TuningRecord>> Records(const std::string& workload_key,
                                                    const std::string& target_key) override {
    return WithPath(path_, RecordsImpl(workload_key, target_key));
  }
  absl::StatusOr<std::vector<TargetSummary>> TargetsOf(const std::string& workload_key) override {
    return WithPath(path_, TargetsOfImpl(workload_key));
  }
  absl::StatusOr<std::vector<WorkloadSummary>> List() override {
    return WithPath(path_, ListImpl());
  }
  absl::Status PutJob(const JobRow& job) override { return WithPath(path_, PutJobImpl(job)); }
  absl::StatusOr<JobRow> GetJob(const std::string& id) override {
    return WithPath(path_, GetJobImpl(id));
  }
  absl::StatusOr<std::vector<JobRow>> ListJobs() override {
    return WithPath(path_, ListJobsImpl());
  }

 private:
  // The *Impl methods take mu_ themselves; the public wrappers add the path to errors.
  absl::StatusOr<std::vector<int64_t>> CommitImpl(const std::vector<TuningRecord>& records);
  absl::StatusOr<TuningRecord> BestImpl(const std::string& workload_key,
                                        const std::string& target_key);
  absl::StatusOr<std::vector<TuningRecord>> RecordsImpl(const std::string& workload_key,
                                                        const std::string& target_key);
  absl::StatusOr<std::vector<TargetSummary>> TargetsOfImpl(const std::string& workload_key);
  absl::StatusOr<std::vector<WorkloadSummary>> ListImpl();
  absl::Status PutJobImpl(const JobRow& job);
  absl::StatusOr<JobRow> GetJobImpl(const std::string& id);
  absl::StatusOr<std::vector<JobRow>> ListJobsImpl();

  absl::Status CheckWritable() const {
    if (!read_only_) return absl::OkStatus();
    return absl::FailedPreconditionError("database was opened read-only");
  }

  const std::string path_;
  const bool read_only_;
  const int schema_version_;
  absl::Mutex mu_;
  const Connection db_ ABSL_PT_GUARDED_BY(mu_);
};

// A key must always name the same task / target: two different tasks under one key
// (a bug in key derivation, or a hand-edited import) would silently merge their
// records. The canonical task text is the workload's identity; for a target every
// field is part of its identity.
absl::Status CheckSameWorkload(const WorkloadInfo& stored, const WorkloadInfo& w) {
  if (stored.task_text == w.task_text) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("workload key '", w.key, "' already names '",
                                                 stored.task_text, "', not '", w.task_text, "'"));
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

// Upserts by key and returns the row id; an existing row must describe the same
// workload (CheckSameWorkload).
absl::StatusOr<int64_t> UpsertWorkload(Statement& insert, Statement& select,
                                       const WorkloadInfo& w) {
  insert.Reset();
  insert.BindText(1, w.key);
  insert.BindText(2, w.op);
  insert.BindText(3, w.task_text);
  insert.BindText(4, w.task_json);
  insert.BindDouble(5, w.flops);
  RETURN_IF_ERROR(insert.Run());
  select.Reset();
  select.BindText(1, w.key);
  ASSIGN_OR_RETURN(bool row, select.Step());
  TF_CHECK(row, "workload row vanished inside a transaction");
  WorkloadInfo stored;
  stored.key = w.key;
  stored.task_text = select.ColumnText(1);
  RETURN_IF_ERROR(CheckSameWorkload(stored, w));
  return select.ColumnInt64(0);
}

absl::StatusOr<int64_t> UpsertTarget(Statement& insert, Statement& select, const TargetInfo& t) {
  insert.Reset();
  insert.BindText(1, t.key);
  insert.BindText(2, t.triple);
  insert.BindText(3, t.cpu);
  insert.BindText(4, t.features);
  insert.BindInt64(5, t.num_threads);
  insert.BindText(6, t.device_key);
  RETURN_IF_ERROR(insert.Run());
  select.Reset();
  select.BindText(1, t.key);
  ASSIGN_OR_RETURN(bool row, select.Step());
  TF_CHECK(row, "target row vanished inside a transaction");
  RETURN_IF_ERROR(CheckSameTarget(TargetFromRow(select, 1), t));
  return select.ColumnInt64(0);
}

absl::StatusOr<std::vector<int64_t>> SqliteDatabase::CommitImpl(
    const std::vector<TuningRecord>& records) {
  RETURN_IF_ERROR(CheckWritable());
  if (records.empty()) return std::vector<int64_t>();
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kWrite));
  ASSIGN_OR_RETURN(
      Statement insert_workload,
      Statement::Prepare(db,
                         "INSERT INTO workloads (key, op, task_text, task_json, flops) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"));
  ASSIGN_OR_RETURN(Statement select_workload,
                   Statement::Prepare(db, "SELECT id, task_text FROM workloads WHERE key = ?"));
  ASSIGN_OR_RETURN(Statement insert_target,
                   Statement::Prepare(
                       db,
                       "INSERT INTO targets (key, triple, cpu, features, num_threads, device_key) "
                       "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"));
  ASSIGN_OR_RETURN(Statement select_target,
                   Statement::Prepare(db,
                                      "SELECT id, key, triple, cpu, features, num_threads, "
                                      "device_key FROM targets WHERE key = ?"));
  ASSIGN_OR_RETURN(
      Statement insert_record,
      Statement::Prepare(
          db,
          "INSERT INTO records (workload_id, target_id, job_id, template_name, template_version, "
          "config_json, costs_json, median_cost, error_kind, error_message, build_seconds, "
          "start_unix_us, end_unix_us, agent_id, environment_json, created_unix_us) "
          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));

  // A batch usually repeats one workload and one target; look each up once and
  // compare later uses with the first one.
  std::map<std::string, std::pair<int64_t, const WorkloadInfo*>> workload_ids;
  std::map<std::string, std::pair<int64_t, const TargetInfo*>> target_ids;
  std::vector<int64_t> ids;
  ids.reserve(records.size());
  const int64_t now = UnixMicrosNow();
  for (size_t i = 0; i < records.size(); ++i) {
    const TuningRecord& r = records[i];
    RETURN_IF_ERROR(ValidateRecord(i, r));
    auto context = [i](const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("record ", i, ": ", s.message()));
    };
    auto w = workload_ids.find(r.workload.key);
    if (w == workload_ids.end()) {
      absl::StatusOr<int64_t> id = UpsertWorkload(insert_workload, select_workload, r.workload);
      if (!id.ok()) return context(id.status());
      w = workload_ids.emplace(r.workload.key, std::make_pair(*id, &r.workload)).first;
    } else if (absl::Status same = CheckSameWorkload(*w->second.second, r.workload); !same.ok()) {
      return context(same);
    }
    auto t = target_ids.find(r.target.key);
    if (t == target_ids.end()) {
      absl::StatusOr<int64_t> id = UpsertTarget(insert_target, select_target, r.target);
      if (!id.ok()) return context(id.status());
      t = target_ids.emplace(r.target.key, std::make_pair(*id, &r.target)).first;
    } else if (absl::Status same = CheckSameTarget(*t->second.second, r.target); !same.ok()) {
      return context(same);
    }

    Statement& s = insert_record;
    s.Reset();
    s.BindInt64(1, w->second.first);
    s.BindInt64(2, t->second.first);
    s.BindTextOrNull(3, r.job_id);
    s.BindText(4, r.template_name);
    s.BindInt64(5, r.template_version);
    s.BindText(6, r.config_json);
    s.BindText(7, nlohmann::json(r.result.costs).dump());
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
    s.BindInt64(16, now);
    absl::Status inserted = s.Run();
    if (!inserted.ok()) return context(inserted);
    ids.push_back(sqlite3_last_insert_rowid(db));
  }
  RETURN_IF_ERROR(txn.Commit());
  return ids;
}

absl::StatusOr<TuningRecord> SqliteDatabase::BestImpl(const std::string& workload_key,
                                                      const std::string& target_key) {
  absl::MutexLock lock(&mu_);
  // Served by the records_best index: equality on (workload, target, error_kind), then
  // median_cost ascending with the rowid as the tie-break. NULL median (no costs)
  // never wins.
  static const std::string kSql =
      absl::StrCat(kRecordSelect,
                   "WHERE w.key = ?1 AND t.key = ?2 AND r.error_kind = 'none' "
                   "AND r.median_cost IS NOT NULL ORDER BY r.median_cost, r.id LIMIT 1");
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db_.get(), kSql.c_str()));
  stmt.BindText(1, workload_key);
  stmt.BindText(2, target_key);
  ASSIGN_OR_RETURN(std::vector<TuningRecord> found, CollectRecords(stmt));
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("no successful record for workload '", workload_key,
                                            "' on target '", target_key, "'"));
  }
  return std::move(found.front());
}

absl::StatusOr<std::vector<TuningRecord>> SqliteDatabase::RecordsImpl(
    const std::string& workload_key, const std::string& target_key) {
  absl::MutexLock lock(&mu_);
  // Four constant statements rather than "(?1 = '' OR w.key = ?1)", which would hide
  // the key lookups from the query planner.
  static const std::string kSql[4] = {
      absl::StrCat(kRecordSelect, "ORDER BY r.id"),
      absl::StrCat(kRecordSelect, "WHERE w.key = ?1 ORDER BY r.id"),
      absl::StrCat(kRecordSelect, "WHERE t.key = ?2 ORDER BY r.id"),
      absl::StrCat(kRecordSelect, "WHERE w.key = ?1 AND t.key = ?2 ORDER BY r.id"),
  };
  int variant = (workload_key.empty() ? 0 : 1) | (target_key.empty() ? 0 : 2);
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db_.get(), kSql[variant].c_str()));
  if (!workload_key.empty()) stmt.BindText(1, workload_key);
  if (!target_key.empty()) stmt.BindText(2, target_key);
  return CollectRecords(stmt);
}

absl::StatusOr<std::vector<TargetSummary>> SqliteDatabase::TargetsOfImpl(
    const std::string& workload_key) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_.get(),
                                      "SELECT t.key, t.triple, t.cpu, t.features, t.num_threads, "
                                      "t.device_key, count(*) FROM records r "
                                      "JOIN workloads w ON w.id = r.workload_id "
                                      "JOIN targets t ON t.id = r.target_id "
                                      "WHERE w.key = ? GROUP BY t.id ORDER BY t.key"));
  stmt.BindText(1, workload_key);
  std::vector<TargetSummary> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    TargetSummary s;
    s.target = TargetFromRow(stmt, 0);
    s.records = stmt.ColumnInt64(6);
    out.push_back(std::move(s));
  }
}

absl::StatusOr<std::vector<WorkloadSummary>> SqliteDatabase::ListImpl() {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  // One read transaction: the summaries and the best records come from one snapshot
  // even while other processes write.
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kRead));
  ASSIGN_OR_RETURN(
      Statement groups,
      Statement::Prepare(db,
                         "SELECT w.key, w.op, w.task_text, w.task_json, w.flops, "
                         "t.key, t.triple, t.cpu, t.features, t.num_threads, t.device_key, "
                         "count(*), sum(r.error_kind <> 'none'), "
                         "(SELECT b.id FROM records b WHERE b.workload_id = r.workload_id "
                         " AND b.target_id = r.target_id AND b.error_kind = 'none' "
                         " AND b.median_cost IS NOT NULL ORDER BY b.median_cost, b.id LIMIT 1) "
                         "FROM records r JOIN workloads w ON w.id = r.workload_id "
                         "JOIN targets t ON t.id = r.target_id "
                         "GROUP BY r.workload_id, r.target_id ORDER BY w.key, t.key"));
  static const std::string kByIdSql = absl::StrCat(kRecordSelect, "WHERE r.id = ?");
  ASSIGN_OR_RETURN(Statement by_id, Statement::Prepare(db, kByIdSql.c_str()));
  std::vector<WorkloadSummary> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, groups.Step());
    if (!row) break;
    WorkloadSummary s;
    s.workload.key = groups.ColumnText(0);
    s.workload.op = groups.ColumnText(1);
    s.workload.task_text = groups.ColumnText(2);
    s.workload.task_json = groups.ColumnText(3);
    s.workload.flops = groups.ColumnDouble(4);
    s.target = TargetFromRow(groups, 5);
    s.records = groups.ColumnInt64(11);
    s.errors = groups.ColumnInt64(12);
    if (!groups.ColumnIsNull(13)) {
      by_id.Reset();
      by_id.BindInt64(1, groups.ColumnInt64(13));
      ASSIGN_OR_RETURN(std::vector<TuningRecord> best, CollectRecords(by_id));
      TF_CHECK(best.size() == 1, "best record id from the same snapshot not found");
      s.best = std::move(best.front());
    }
    out.push_back(std::move(s));
  }
  RETURN_IF_ERROR(txn.Commit());
  return out;
}

absl::Status SqliteDatabase::PutJobImpl(const JobRow& job) {
  RETURN_IF_ERROR(CheckWritable());
  if (job.id.empty()) return absl::InvalidArgumentError("job id is empty");
  absl::MutexLock lock(&mu_);
  // Every field is replaced: the server owns the job's state machine and writes the
  // whole row it holds.
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db_.get(),
                         "INSERT INTO jobs (id, owner, spec_json, state, message, "
                         "created_unix_us, updated_unix_us) VALUES (?, ?, ?, ?, ?, ?, ?) "
                         "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
                         "spec_json = excluded.spec_json, state = excluded.state, "
                         "message = excluded.message, created_unix_us = excluded.created_unix_us, "
                         "updated_unix_us = excluded.updated_unix_us"));
  stmt.BindText(1, job.id);
  stmt.BindText(2, job.owner);
  stmt.BindText(3, job.spec_json);
  stmt.BindText(4, job.state);
  stmt.BindText(5, job.message);
  stmt.BindInt64(6, job.created_unix_us);
  stmt.BindInt64(7, job.updated_unix_us);
  return stmt.Run();
}

constexpr char kJobSelect[] =
    "SELECT id, owner, spec_json, state, message, created_unix_us, updated_unix_us FROM jobs ";

absl::StatusOr<JobRow> SqliteDatabase::GetJobImpl(const std::string& id) {
  absl::MutexLock lock(&mu_);
  static const std::string kSql = absl::StrCat(kJobSelect, "WHERE id = ?");
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db_.get(), kSql.c_str()));
  stmt.BindText(1, id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  return JobFromRow(stmt);
}

absl::StatusOr<std::vector<JobRow>> SqliteDatabase::ListJobsImpl() {
  absl::MutexLock lock(&mu_);
  static const std::string kSql = absl::StrCat(kJobSelect, "ORDER BY created_unix_us, id");
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db_.get(), kSql.c_str()));
  std::vector<JobRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    out.push_back(JobFromRow(stmt));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const DatabaseOptions& options) {
  ASSIGN_OR_RETURN(db_internal::OpenedFile file, db_internal::OpenFile(options));
  return std::unique_ptr<Database>(
      new SqliteDatabase(options.path, std::move(file.db), options.read_only, file.schema_version));
}

}  // namespace tuneforge
