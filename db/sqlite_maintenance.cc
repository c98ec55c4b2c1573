// The SQLite backend's bulk operations: paged scans (export, merge, download), foreign
// records, stats and compaction.

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "db/record_writer.h"
#include "db/sqlite_database.h"

namespace tuneforge::db_internal {

namespace {

// Scans read pages of this many rows, each under the lock for a short time, so a
// long export never stalls the server's writers. Pages continue after the last id
// seen, so a scan sees every record that existed when it started exactly once.
constexpr int kScanPage = 2000;

}  // namespace

int64_t SqliteDatabase::FileBytes() const {
  std::error_code ec;
  int64_t bytes = 0;
  for (const std::string& p : {path_, path_ + "-wal"}) {
    uintmax_t size = std::filesystem::file_size(p, ec);
    if (!ec) bytes += static_cast<int64_t>(size);
  }
  return bytes;
}

absl::Status SqliteDatabase::Scan(const RecordFilter& filter,
                                  const std::function<absl::Status(const TuningRecord&)>& fn) {
  static const std::string kSql = absl::StrCat(
      kRecordSelect,
      "WHERE r.id > ?5 AND (?1 = '' OR w.key = ?1) AND (?2 = '' OR t.key = ?2) "
      "AND r.start_unix_us >= ?3 AND (?4 = 0 OR r.start_unix_us < ?4) ORDER BY r.id LIMIT ?6");
  int64_t after = 0;
  while (true) {
    std::vector<TuningRecord> page;
    {
      absl::MutexLock lock(&mu_);
      ASSIGN_OR_RETURN(Statement stmt,
                       WithPath(path_, Statement::Prepare(db_.get(), kSql.c_str())));
      stmt.BindText(1, filter.workload_key);
      stmt.BindText(2, filter.target_key);
      stmt.BindInt64(3, filter.since_unix_us);
      stmt.BindInt64(4, filter.until_unix_us);
      stmt.BindInt64(5, after);
      stmt.BindInt64(6, kScanPage);
      while (true) {
        ASSIGN_OR_RETURN(bool row, WithPath(path_, stmt.Step()));
        if (!row) break;
        ASSIGN_OR_RETURN(TuningRecord r, WithPath(path_, RecordFromRow(stmt)));
        page.push_back(std::move(r));
      }
    }
    for (const TuningRecord& r : page) RETURN_IF_ERROR(fn(r));
    if (static_cast<int>(page.size()) < kScanPage) return absl::OkStatus();
    after = page.back().id;
  }
}

absl::StatusOr<CommitResult> SqliteDatabase::InsertForeignImpl(
    const std::vector<ForeignRecord>& records) {
  RETURN_IF_ERROR(CheckWritable());
  CommitResult result;
  if (records.empty()) return result;
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kWrite));
  ASSIGN_OR_RETURN(Statement insert,
                   Statement::Prepare(
                       db,
                       "INSERT INTO foreign_records (content_id, source, target_text, task_name, "
                       "workload_json, config_json, costs_json, error_no, timestamp_unix_us, "
                       "reason, raw, created_unix_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (content_id) DO NOTHING"));
  ASSIGN_OR_RETURN(Statement find,
                   Statement::Prepare(db, "SELECT id FROM foreign_records WHERE content_id = ?"));
  const int64_t now = UnixMicrosNow();
  for (size_t i = 0; i < records.size(); ++i) {
    const ForeignRecord& f = records[i];
    std::string content_id = ForeignContentId(f.source, f.raw);
    insert.Reset();
    insert.BindText(1, content_id);
    insert.BindText(2, f.source);
    insert.BindText(3, f.target_text);
    insert.BindText(4, f.task_name);
    insert.BindText(5, f.workload_json);
    insert.BindText(6, f.config_json);
    insert.BindText(7, CostsJson(f.costs));
    insert.BindInt64(8, f.error_no);
    insert.BindInt64(9, f.timestamp_unix_us);
    insert.BindText(10, f.reason);
    insert.BindText(11, f.raw);
    insert.BindInt64(12, now);
    absl::Status s = insert.Run();
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("foreign record ", i, ": ", s.message()));
    if (Changes(db) == 1) {
      result.ids.push_back(LastInsertRowid(db));
      ++result.inserted;
      continue;
    }
    find.Reset();
    find.BindText(1, content_id);
    ASSIGN_OR_RETURN(bool row, find.Step());
    TF_CHECK(row, "conflicting foreign record not found");
    result.ids.push_back(find.ColumnInt64(0));
    find.Reset();  // no statement may stay mid-result past COMMIT (WAL checkpoints)
    ++result.duplicates;
  }
  RETURN_IF_ERROR(txn.Commit());
  return result;
}

absl::Status SqliteDatabase::ScanForeign(
    const std::function<absl::Status(const ForeignRecord&)>& fn) {
  int64_t after = 0;
  while (true) {
    std::vector<ForeignRecord> page;
    {
      absl::MutexLock lock(&mu_);
      ASSIGN_OR_RETURN(Statement stmt,
                       WithPath(path_, Statement::Prepare(
                                           db_.get(),
                                           "SELECT id, content_id, source, target_text, task_name, "
                                           "workload_json, config_json, costs_json, error_no, "
                                           "timestamp_unix_us, reason, raw FROM foreign_records "
                                           "WHERE id > ? ORDER BY id LIMIT ?")));
      stmt.BindInt64(1, after);
      stmt.BindInt64(2, kScanPage);
      while (true) {
        ASSIGN_OR_RETURN(bool row, WithPath(path_, stmt.Step()));
        if (!row) break;
        ForeignRecord f;
        f.id = stmt.ColumnInt64(0);
        f.content_id = stmt.ColumnText(1);
        f.source = stmt.ColumnText(2);
        f.target_text = stmt.ColumnText(3);
        f.task_name = stmt.ColumnText(4);
        f.workload_json = stmt.ColumnText(5);
        f.config_json = stmt.ColumnText(6);
        ASSIGN_OR_RETURN(f.costs, WithPath(path_, ParseCosts(stmt.ColumnText(7))));
        f.error_no = static_cast<int>(stmt.ColumnInt64(8));
        f.timestamp_unix_us = stmt.ColumnInt64(9);
        f.reason = stmt.ColumnText(10);
        f.raw = stmt.ColumnText(11);
        page.push_back(std::move(f));
      }
    }
    for (const ForeignRecord& f : page) RETURN_IF_ERROR(fn(f));
    if (static_cast<int>(page.size()) < kScanPage) return absl::OkStatus();
    after = page.back().id;
  }
}

absl::StatusOr<DatabaseStats> SqliteDatabase::StatsImpl() {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kRead));
  DatabaseStats s;
  s.schema_version = schema_version_;
  ASSIGN_OR_RETURN(
      Statement stmt,
      Statement::Prepare(db,
                         "SELECT (SELECT count(*) FROM records), "
                         "(SELECT count(*) FROM records WHERE error_kind <> 'none'), "
                         "(SELECT count(*) FROM workloads), (SELECT count(*) FROM targets), "
                         "(SELECT count(*) FROM configs), (SELECT count(*) FROM foreign_records), "
                         "(SELECT count(*) FROM jobs), "
                         "(SELECT count(*) FROM tombstones), (SELECT count(*) FROM cost_models), "
                         "(SELECT coalesce(min(start_unix_us), 0) FROM records), "
                         "(SELECT coalesce(max(start_unix_us), 0) FROM records)"));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  TF_CHECK(row, "stats query returned no row");
  s.records = stmt.ColumnInt64(0);
  s.failed_records = stmt.ColumnInt64(1);
  s.workloads = stmt.ColumnInt64(2);
  s.targets = stmt.ColumnInt64(3);
  s.configs = stmt.ColumnInt64(4);
  s.foreign_records = stmt.ColumnInt64(5);
  s.jobs = stmt.ColumnInt64(6);
  s.tombstones = stmt.ColumnInt64(7);
  s.cost_models = stmt.ColumnInt64(8);
  s.oldest_unix_us = stmt.ColumnInt64(9);
  s.newest_unix_us = stmt.ColumnInt64(10);
  ASSIGN_OR_RETURN(int64_t page_size, QueryInt64(db, "PRAGMA page_size"));
  ASSIGN_OR_RETURN(int64_t free_pages, QueryInt64(db, "PRAGMA freelist_count"));
  s.free_bytes = page_size * free_pages;
  RETURN_IF_ERROR(txn.Commit());
  s.file_bytes = FileBytes();
  return s;
}

absl::StatusOr<CompactResult> SqliteDatabase::CompactImpl(int keep) {
  RETURN_IF_ERROR(CheckWritable());
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("--keep must be >= 1, got ", keep));
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_.get();
  CompactResult result;
  result.bytes_before = FileBytes();
  {
    ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kWrite));
    ASSIGN_OR_RETURN(result.records_before, QueryInt64(db, "SELECT count(*) FROM records"));
    RETURN_IF_ERROR(Exec(db,
                         "CREATE TEMP TABLE IF NOT EXISTS tf_keep (id INTEGER PRIMARY KEY); "
                         "DELETE FROM temp.tf_keep"));
    // The `keep` fastest successful records of every (workload, target)...
    ASSIGN_OR_RETURN(
        Statement fastest,
        Statement::Prepare(db,
                           "INSERT OR IGNORE INTO temp.tf_keep (id) SELECT id FROM ("
                           "SELECT r.id, row_number() OVER (PARTITION BY r.workload_id, "
                           "r.target_id ORDER BY r.median_cost, r.id) AS n FROM records r "
                           "WHERE r.error_kind = 'none' AND r.median_cost IS NOT NULL) "
                           "WHERE n <= ?"));
    fastest.BindInt64(1, keep);
    RETURN_IF_ERROR(fastest.Run());
    // ...plus every record of each pair's best config (its re-measurements).
    RETURN_IF_ERROR(Exec(
        db,
        "INSERT OR IGNORE INTO temp.tf_keep (id) SELECT r.id FROM records r WHERE r.config_id IN ("
        "SELECT (SELECT c.id FROM configs c WHERE c.workload_id = p.workload_id "
        "AND c.target_id = p.target_id AND c.rank_class < 2 "
        "ORDER BY c.rank_class, c.median_cost, c.id LIMIT 1) "
        "FROM (SELECT DISTINCT workload_id, target_id FROM configs) p)"));
    // Remember what goes, so an old export or an older copy cannot bring it back.
    ASSIGN_OR_RETURN(Statement tombstone,
                     Statement::Prepare(db,
                                        "INSERT OR IGNORE INTO tombstones (content_id, "
                                        "deleted_unix_us) SELECT content_id, ? FROM records "
                                        "WHERE id NOT IN (SELECT id FROM temp.tf_keep)"));
    tombstone.BindInt64(1, UnixMicrosNow());
    RETURN_IF_ERROR(tombstone.Run());
    RETURN_IF_ERROR(Exec(db, "DELETE FROM records WHERE id NOT IN (SELECT id FROM temp.tf_keep)"));
    result.records_deleted = Changes(db);
    // The configs rows keep their pooled statistics (they summarise measurements that
    // were made); a config without a successful record left cannot be ranked (it has
    // no representative); rows of configs with no record left go, except those
    // disqualified by a wrong answer, which stay so the config can never become best.
    RETURN_IF_ERROR(
        Exec(db,
             "UPDATE configs SET rank_class = 2 WHERE rank_class < 2 AND NOT EXISTS "
             "  (SELECT 1 FROM records r WHERE r.config_id = configs.id AND r.error_kind = 'none' "
             "   AND r.median_cost IS NOT NULL); "
             "DELETE FROM configs WHERE wrong_answers = 0 AND NOT EXISTS "
             "  (SELECT 1 FROM records r WHERE r.config_id = configs.id); "
             "DELETE FROM temp.tf_keep"));
    RETURN_IF_ERROR(txn.Commit());
  }
  // VACUUM rewrites the file without the freed pages (all or nothing: it works on a
  // copy); the checkpoint then empties the WAL so the size on disk really shrinks.
  RETURN_IF_ERROR(Exec(db, "VACUUM"));
  RETURN_IF_ERROR(Exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"));
  result.bytes_after = FileBytes();
  TF_LOG(Info) << path_ << ": compacted, " << result.records_deleted << " of "
               << result.records_before << " records deleted";
  return result;
}

}  // namespace tuneforge::db_internal
