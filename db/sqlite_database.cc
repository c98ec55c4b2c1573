// The SQLite backend's writes and queries (see db/sqlite_database.h for the tour).

#include "db/sqlite_database.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"
#include "db/record_writer.h"
#include "db/sqlite_open.h"

namespace tuneforge {
namespace db_internal {

namespace {

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

absl::StatusOr<std::vector<TuningRecord>> CollectRecords(Statement& stmt) {
  std::vector<TuningRecord> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    ASSIGN_OR_RETURN(TuningRecord r, RecordFromRow(stmt));
    out.push_back(std::move(r));
  }
}

absl::Status RecordContext(size_t index, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("record ", index, ": ", s.message()));
}

// The configs ranking of DESIGN's noise-aware best, as SQL: served by configs_rank
// (equality on workload and target, then rank_class, median_cost).
constexpr char kRankSql[] =
    "SELECT c.template_name, c.template_version, c.config_json, c.median_cost, c.successes, "
    "json_array_length(c.samples_json), c.id FROM configs c "
    "WHERE c.workload_id = (SELECT id FROM workloads WHERE key = ?1) "
    "AND c.target_id = (SELECT id FROM targets WHERE key = ?2) "
    "AND c.rank_class < 2 ORDER BY c.rank_class, c.median_cost, c.id LIMIT ?3";


}  // namespace

// ---------------------------------------------------------------------------------
// Writes: group commit.

absl::StatusOr<CommitResult> SqliteDatabase::Insert(const std::vector<TuningRecord>& records) {
  RETURN_IF_ERROR(WithPath(path_, CheckWritable()));
  if (records.empty()) return CommitResult();
  PendingWrite me;
  me.records = &records;
  absl::MutexLock queue_lock(&queue_mu_);
  queue_.push_back(&me);
  while (!me.done) {
    if (leader_active_) {
      group_done_.Wait(&queue_mu_);
      continue;
    }
    // Lead: take everything queued so far (us included) and commit it as one group.
    leader_active_ = true;
    std::vector<PendingWrite*> group(queue_.begin(), queue_.end());
    queue_.clear();
    queue_mu_.Unlock();
    {
      absl::MutexLock lock(&mu_);
      CommitGroup(group);
    }
    queue_mu_.Lock();
    for (PendingWrite* w : group) w->done = true;
    leader_active_ = false;
    group_done_.SignalAll();
  }
  return WithPath(path_, std::move(me.result));
}

void SqliteDatabase::CommitGroup(const std::vector<PendingWrite*>& group) {
  sqlite3* db = db_.get();
  auto fail_all = [&](const absl::Status& s) {
    for (PendingWrite* w : group) w->result = s;
  };
  absl::StatusOr<Transaction> txn = Transaction::Begin(db, Transaction::Mode::kWrite);
  if (!txn.ok()) return fail_all(txn.status());
  // The schema's CHECKs are skipped for the group's statements: SQLite evaluates
  // "error_kind IN (8 names)" and "rank_class IN (0, 1, 2)" by building a temporary
  // index on every execution, about a tenth of the insert time. Nothing is lost:
  // RecordWriter writes only what ValidateRecord accepted (non-empty keys, a known
  // error kind, finite non-negative costs) and computes rank_class itself. The CHECKs
  // still guard every other writer (other statements, the sqlite3 shell).
  struct CheckConstraintsOff {
    sqlite3* db;
    bool ok;
    explicit CheckConstraintsOff(sqlite3* d)
        : db(d), ok(Exec(d, "PRAGMA ignore_check_constraints = ON").ok()) {}
    ~CheckConstraintsOff() {
      if (ok) (void)Exec(db, "PRAGMA ignore_check_constraints = OFF");
    }
  } checks_off(db);
  // The writer's statements are finalized before COMMIT (end of this block): an open
  // statement would keep a snapshot and stall the WAL checkpoint.
  {
    absl::StatusOr<RecordWriter> writer = RecordWriter::Prepare(db);
    if (!writer.ok()) return fail_all(writer.status());
    const int64_t now = UnixMicrosNow();
    for (PendingWrite* w : group) {
      absl::Status s = Exec(db, "SAVEPOINT tf_write");
      if (!s.ok()) return fail_all(s);
      CommitResult result;
      absl::Status failed;
      for (size_t i = 0; i < w->records->size(); ++i) {
        absl::StatusOr<RecordWriter::Written> got = writer->Write((*w->records)[i], now);
        if (!got.ok()) {
          failed = RecordContext(i, got.status());
          break;
        }
        result.ids.push_back(got->id);
        switch (got->outcome) {
          case RecordWriter::Outcome::kInserted: ++result.inserted; break;
          case RecordWriter::Outcome::kDuplicate: ++result.duplicates; break;
          case RecordWriter::Outcome::kCompacted: ++result.compacted; break;
        }
      }
      if (failed.ok()) {
        s = Exec(db, "RELEASE tf_write");
        if (!s.ok()) return fail_all(s);
        w->result = std::move(result);
        continue;
      }
      if (InAutocommit(db)) {
        // SQLite rolled the whole transaction back on its own (e.g. disk full): the
        // earlier members of the group are gone too.
        return fail_all(failed);
      }
      w->result = failed;
      s = Exec(db, "ROLLBACK TO tf_write");
      if (s.ok()) s = Exec(db, "RELEASE tf_write");
      if (!s.ok()) return fail_all(s);
      writer->ClearCache();  // ids of rows created under the savepoint are gone
    }
  }
  absl::Status committed = txn->Commit();
  if (!committed.ok()) {
    // Nothing of the group is stored, also not the members that succeeded.
    fail_all(committed);
  }
}

// ---------------------------------------------------------------------------------
// Queries.

absl::StatusOr<std::vector<RankedConfig>> SqliteDatabase::TopKImpl(const std::string& workload_key,
                                                                   const std::string& target_key,
                                                                   int k) {
  if (k <= 0) return absl::InvalidArgumentError(absl::StrCat("top-k needs k >= 1, got ", k));
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kRead));
  // Prepared once: Best is the hot query (p99 <= 1 ms at 1M records).
  if (!rank_stmt_) {
    ASSIGN_OR_RETURN(Statement rank, Statement::Prepare(db, kRankSql));
    ASSIGN_OR_RETURN(Statement rep, Statement::Prepare(db, RepresentativeSql().c_str()));
    rank_stmt_ = std::make_unique<Statement>(std::move(rank));
    representative_stmt_ = std::make_unique<Statement>(std::move(rep));
  }
  Statement& rank = *rank_stmt_;
  Statement& by_config = *representative_stmt_;
  // Cached statements must not stay active past this call (they would pin the read
  // snapshot), also on an early error return.
  struct ResetOnExit {
    Statement& a;
    Statement& b;
    ~ResetOnExit() {
      a.Reset();
      b.Reset();
    }
  } reset_on_exit{rank, by_config};
  rank.Reset();
  rank.BindText(1, workload_key);
  rank.BindText(2, target_key);
  rank.BindInt64(3, k);
  std::vector<RankedConfig> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, rank.Step());
    if (!row) break;
    RankedConfig c;
    c.template_name = rank.ColumnText(0);
    c.template_version = static_cast<int>(rank.ColumnInt64(1));
    c.config_json = rank.ColumnText(2);
    c.median_cost = rank.ColumnDouble(3);
    c.measurements = rank.ColumnInt64(4);
    c.samples = rank.ColumnInt64(5);
    c.remeasured = c.measurements >= 2;
    by_config.Reset();
    by_config.BindInt64(1, rank.ColumnInt64(6));
    ASSIGN_OR_RETURN(std::vector<TuningRecord> record, CollectRecords(by_config));
    if (record.size() != 1) {
      return absl::DataLossError(
          absl::StrCat("config ", rank.ColumnInt64(6), " is ranked but has no successful record"));
    }
    c.record = std::move(record.front());
    out.push_back(std::move(c));
  }
  RETURN_IF_ERROR(txn.Commit());
  return out;
}

absl::StatusOr<TuningRecord> SqliteDatabase::Best(const std::string& workload_key,
                                                  const std::string& target_key) {
  ASSIGN_OR_RETURN(std::vector<RankedConfig> top, TopK(workload_key, target_key, 1));
  if (top.empty()) {
    return WithPath(
        path_, absl::NotFoundError(absl::StrCat("no successful record for workload '", workload_key,
                                                "' on target '", target_key, "'")));
  }
  return std::move(top.front().record);
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
                         "(SELECT c.id FROM configs c "
                         " WHERE c.workload_id = r.workload_id AND c.target_id = r.target_id "
                         " AND c.rank_class < 2 ORDER BY c.rank_class, c.median_cost, c.id "
                         " LIMIT 1) "
                         "FROM records r JOIN workloads w ON w.id = r.workload_id "
                         "JOIN targets t ON t.id = r.target_id "
                         "GROUP BY r.workload_id, r.target_id ORDER BY w.key, t.key"));
  ASSIGN_OR_RETURN(Statement by_id, Statement::Prepare(db, RepresentativeSql().c_str()));
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
      TF_CHECK(best.size() == 1, "best config from the same snapshot has no record");
      s.best = std::move(best.front());
    }
    out.push_back(std::move(s));
  }
  RETURN_IF_ERROR(txn.Commit());
  return out;
}

absl::StatusOr<std::vector<HistoryPoint>> SqliteDatabase::HistoryImpl(
    const std::string& workload_key, const std::string& target_key) {
  absl::MutexLock lock(&mu_);
  // Served by records_history.
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db_.get(),
                         "SELECT r.id, r.start_unix_us, r.error_kind, r.median_cost FROM records r "
                         "WHERE r.workload_id = (SELECT id FROM workloads WHERE key = ?1) "
                         "AND r.target_id = (SELECT id FROM targets WHERE key = ?2) "
                         "ORDER BY r.start_unix_us, r.id"));
  stmt.BindText(1, workload_key);
  stmt.BindText(2, target_key);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double best = kInf;
  std::vector<HistoryPoint> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    HistoryPoint p;
    p.record_id = stmt.ColumnInt64(0);
    p.start_unix_us = stmt.ColumnInt64(1);
    std::optional<MeasureErrorKind> kind = ParseMeasureErrorKind(stmt.ColumnText(2));
    if (!kind) return absl::DataLossError(absl::StrCat("record ", p.record_id, ": bad error_kind"));
    p.error = *kind;
    p.median_cost = stmt.ColumnIsNull(3) ? kInf : stmt.ColumnDouble(3);
    if (p.error == MeasureErrorKind::kNone && p.median_cost < best) {
      best = p.median_cost;
      p.improved = true;
    }
    p.best_so_far = best;
    out.push_back(p);
  }
}

absl::StatusOr<std::vector<TargetStats>> SqliteDatabase::TargetSummariesImpl() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db_.get(),
                         "SELECT t.key, t.triple, t.cpu, t.features, t.num_threads, t.device_key, "
                         "count(DISTINCT r.workload_id), count(*), sum(r.error_kind <> 'none'), "
                         "min(r.start_unix_us), max(r.start_unix_us) "
                         "FROM records r JOIN targets t ON t.id = r.target_id "
                         "GROUP BY r.target_id ORDER BY t.key"));
  std::vector<TargetStats> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    TargetStats s;
    s.target = TargetFromRow(stmt, 0);
    s.workloads = stmt.ColumnInt64(6);
    s.records = stmt.ColumnInt64(7);
    s.errors = stmt.ColumnInt64(8);
    s.first_unix_us = stmt.ColumnInt64(9);
    s.last_unix_us = stmt.ColumnInt64(10);
    out.push_back(std::move(s));
  }
}

absl::StatusOr<std::vector<TemplateVersionSummary>> SqliteDatabase::TemplateVersionsImpl(
    const std::string& workload_key, const std::string& target_key) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db_.get(),
                         "SELECT template_name, max(template_version), sum(successes) FROM configs "
                         "WHERE workload_id = (SELECT id FROM workloads WHERE key = ?1) "
                         "AND target_id = (SELECT id FROM targets WHERE key = ?2) "
                         "AND successes > 0 AND wrong_answers = 0 "
                         "GROUP BY template_name ORDER BY template_name"));
  stmt.BindText(1, workload_key);
  stmt.BindText(2, target_key);
  std::vector<TemplateVersionSummary> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    out.push_back(TemplateVersionSummary{stmt.ColumnText(0), static_cast<int>(stmt.ColumnInt64(1)),
                                         stmt.ColumnInt64(2)});
  }
}

// ---------------------------------------------------------------------------------
// Cost-model blobs.

absl::StatusOr<std::optional<std::string>> SqliteDatabase::LoadModelImpl(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("cost-model key is empty");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_.get(), "SELECT bytes FROM cost_models WHERE key = ?"));
  stmt.BindText(1, key);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(stmt.ColumnBlob(0));
}

absl::Status SqliteDatabase::SaveModelImpl(const std::string& key, const std::string& bytes) {
  RETURN_IF_ERROR(CheckWritable());
  if (key.empty()) return absl::InvalidArgumentError("cost-model key is empty");
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Statement stmt,
                   Statement::Prepare(db_.get(),
                                      "INSERT INTO cost_models (key, bytes, updated_unix_us) "
                                      "VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                                      "bytes = excluded.bytes, "
                                      "updated_unix_us = excluded.updated_unix_us"));
  stmt.BindText(1, key);
  stmt.BindBlob(2, bytes);
  stmt.BindInt64(3, UnixMicrosNow());
  return stmt.Run();  // one statement: its own transaction
}

// ---------------------------------------------------------------------------------
// Jobs.

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
                         "message = excluded.message, "
                         // The first write's time is the creation time; later writes
                         // keep it (a job is written at every state change).
                         "created_unix_us = CASE WHEN created_unix_us > 0 THEN created_unix_us "
                         "ELSE excluded.created_unix_us END, "
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

}  // namespace db_internal

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const DatabaseOptions& options) {
  ASSIGN_OR_RETURN(db_internal::OpenedFile file, db_internal::OpenFile(options));
  return std::unique_ptr<Database>(new db_internal::SqliteDatabase(
      options.path, std::move(file.db), options.read_only, file.schema_version));
}

}  // namespace tuneforge
