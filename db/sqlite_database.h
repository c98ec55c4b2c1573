// The SQLite backend of Database (internal to db/; callers use db/database.h).
// db/sqlite_open.cc opens, checks and migrates the file; db/record_writer.h writes
// records; db/sqlite_database.cc has writes and queries; db/sqlite_maintenance.cc has
// scans, foreign records, stats and compaction. Every error a caller sees is one line
// that starts with the database path.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "db/database.h"
#include "db/sqlite_util.h"

namespace tuneforge::db_internal {

// Thread-safe: one connection, serialised by mu_. SQLite in WAL mode lets other
// processes read while we write; the busy timeout covers their writes. Concurrent
// Insert calls are grouped: the first caller to find no group in progress becomes the
// leader and commits everything queued in one transaction (one fsync), each caller's
// records under its own savepoint so a bad batch fails alone.
class SqliteDatabase final : public Database {
 public:
  SqliteDatabase(std::string path, Connection db, bool read_only, int schema_version)
      : path_(std::move(path)),
        read_only_(read_only),
        schema_version_(schema_version),
        db_(std::move(db)) {}

  int SchemaVersion() const override { return schema_version_; }

  absl::StatusOr<CommitResult> Insert(const std::vector<TuningRecord>& records) override;
  absl::StatusOr<std::vector<RankedConfig>> TopK(const std::string& workload_key,
                                                 const std::string& target_key, int k) override {
    return WithPath(path_, TopKImpl(workload_key, target_key, k));
  }
  absl::StatusOr<TuningRecord> Best(const std::string& workload_key,
                                    const std::string& target_key) override;
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
  absl::StatusOr<std::vector<HistoryPoint>> History(const std::string& workload_key,
                                                    const std::string& target_key) override {
    return WithPath(path_, HistoryImpl(workload_key, target_key));
  }
  absl::StatusOr<std::vector<TargetStats>> TargetSummaries() override {
    return WithPath(path_, TargetSummariesImpl());
  }
  absl::StatusOr<std::vector<TemplateVersionSummary>> TemplateVersions(
      const std::string& workload_key, const std::string& target_key) override {
    return WithPath(path_, TemplateVersionsImpl(workload_key, target_key));
  }
  absl::Status Scan(const RecordFilter& filter,
                    const std::function<absl::Status(const TuningRecord&)>& fn) override;
  absl::StatusOr<CommitResult> InsertForeign(const std::vector<ForeignRecord>& records) override {
    return WithPath(path_, InsertForeignImpl(records));
  }
  absl::Status ScanForeign(const std::function<absl::Status(const ForeignRecord&)>& fn) override;
  absl::StatusOr<DatabaseStats> Stats() override { return WithPath(path_, StatsImpl()); }
  absl::StatusOr<CompactResult> Compact(int keep) override {
    return WithPath(path_, CompactImpl(keep));
  }
  absl::StatusOr<std::optional<std::string>> LoadModel(const std::string& key) override {
    return WithPath(path_, LoadModelImpl(key));
  }
  absl::Status SaveModel(const std::string& key, const std::string& bytes) override {
    return WithPath(path_, SaveModelImpl(key, bytes));
  }
  absl::Status PutJob(const JobRow& job) override { return WithPath(path_, PutJobImpl(job)); }
  absl::StatusOr<JobRow> GetJob(const std::string& id) override {
    return WithPath(path_, GetJobImpl(id));
  }
  absl::StatusOr<std::vector<JobRow>> ListJobs() override {
    return WithPath(path_, ListJobsImpl());
  }
  absl::StatusOr<std::vector<BestEntry>> BestPage(const BestPageQuery& query) override {
    return WithPath(path_, BestPageImpl(query));
  }
  absl::StatusOr<TuningRecord> RecordById(int64_t id) override {
    return WithPath(path_, RecordByIdImpl(id));
  }
  absl::StatusOr<std::vector<JobRecordPoint>> JobRecords(const JobRecordsQuery& query) override {
    return WithPath(path_, JobRecordsImpl(query));
  }

 private:
  // One Insert call waiting in the group-commit queue.
  struct PendingWrite {
    const std::vector<TuningRecord>* records;
    absl::StatusOr<CommitResult> result;
    bool done = false;
  };
  // Commits a group in one transaction. REQUIRES: mu_ is held.
  void CommitGroup(const std::vector<PendingWrite*>& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The *Impl methods take mu_ themselves; the public wrappers add the path to errors.
  absl::StatusOr<std::vector<RankedConfig>> TopKImpl(const std::string& workload_key,
                                                     const std::string& target_key, int k);
  absl::StatusOr<std::vector<TuningRecord>> RecordsImpl(const std::string& workload_key,
                                                        const std::string& target_key);
  absl::StatusOr<std::vector<TargetSummary>> TargetsOfImpl(const std::string& workload_key);
  absl::StatusOr<std::vector<WorkloadSummary>> ListImpl();
  absl::StatusOr<std::vector<HistoryPoint>> HistoryImpl(const std::string& workload_key,
                                                        const std::string& target_key);
  absl::StatusOr<std::vector<TargetStats>> TargetSummariesImpl();
  absl::StatusOr<std::vector<TemplateVersionSummary>> TemplateVersionsImpl(
      const std::string& workload_key, const std::string& target_key);
  absl::StatusOr<CommitResult> InsertForeignImpl(const std::vector<ForeignRecord>& records);
  absl::StatusOr<DatabaseStats> StatsImpl();
  absl::StatusOr<CompactResult> CompactImpl(int keep);
  absl::StatusOr<std::optional<std::string>> LoadModelImpl(const std::string& key);
  absl::Status SaveModelImpl(const std::string& key, const std::string& bytes);
  absl::Status PutJobImpl(const JobRow& job);
  absl::StatusOr<JobRow> GetJobImpl(const std::string& id);
  absl::StatusOr<std::vector<JobRow>> ListJobsImpl();
  // db/sqlite_browse.cc.
  absl::StatusOr<std::vector<BestEntry>> BestPageImpl(const BestPageQuery& query);
  absl::StatusOr<TuningRecord> RecordByIdImpl(int64_t id);
  absl::StatusOr<std::vector<JobRecordPoint>> JobRecordsImpl(const JobRecordsQuery& query);

  absl::Status CheckWritable() const {
    if (!read_only_) return absl::OkStatus();
    return absl::FailedPreconditionError("database was opened read-only");
  }
  int64_t FileBytes() const;

  const std::string path_;
  const bool read_only_;
  const int schema_version_;

  absl::Mutex queue_mu_;
  std::deque<PendingWrite*> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool leader_active_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::CondVar group_done_;

  absl::Mutex mu_ ABSL_ACQUIRED_AFTER(queue_mu_);
  const Connection db_ ABSL_PT_GUARDED_BY(mu_);
  // TopK's statements, prepared on first use. Declared after db_ so they are
  // finalized before the connection closes.
  std::unique_ptr<Statement> rank_stmt_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Statement> representative_stmt_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tuneforge::db_internal
