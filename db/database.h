// The tuning-log Database: a small backend-neutral interface (LevelDB style) plus a
// factory. The SQLite backend lives in db/sqlite_database.cc; callers never see it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "db/record.h"

namespace tuneforge {

struct DatabaseOptions {
  std::string path;               // SQLite file; its directory must exist
  bool create_if_missing = true;  // false: a missing file is an error
  bool read_only = false;
  int busy_timeout_ms = 5000;
  // 0: no limit. Otherwise writes that would grow the file past this many bytes fail
  // with ResourceExhausted and leave nothing half-written (a quota; also how tests
  // simulate a full disk).
  int64_t max_file_bytes = 0;
};

// What a write did: ids in input order (an already stored record reports the id it
// has; a record a compaction deleted reports 0), and how many records were new.
struct CommitResult {
  std::vector<int64_t> ids;
  int64_t inserted = 0;
  int64_t duplicates = 0;
  // Skipped: `compact` deleted a record with this content id earlier (a tombstone), so
  // an old export or an older copy of the db does not bring it back.
  int64_t compacted = 0;
};

// One config of a (workload, target) as the noise-aware ranking sees it: all samples
// of all its successful records pooled.
struct RankedConfig {
  std::string template_name;
  int template_version = 0;
  std::string config_json;
  double median_cost = 0;    // median of the pooled samples, seconds
  int64_t measurements = 0;  // successful records of this config
  int64_t samples = 0;       // pooled samples
  bool remeasured = false;   // measurements >= 2
  TuningRecord record;       // its most recent successful record
};

// One point of a workload's history on a target, in measurement order.
struct HistoryPoint {
  int64_t record_id = 0;
  int64_t start_unix_us = 0;
  MeasureErrorKind error = MeasureErrorKind::kNone;
  double median_cost = 0;  // +inf when the record has no costs
  double best_so_far = 0;  // lowest successful median up to here; +inf before any
  bool improved = false;   // this record lowered best_so_far
};

// Per target: what the db holds for it.
struct TargetStats {
  TargetInfo target;
  int64_t workloads = 0;
  int64_t records = 0;
  int64_t errors = 0;
  int64_t first_unix_us = 0;
  int64_t last_unix_us = 0;
};

// Per template: the newest version with a successful record (tuned / stale checks).
struct TemplateVersionSummary {
  std::string template_name;
  int newest_version = 0;
  int64_t successes = 0;
};

struct DatabaseStats {
  int schema_version = 0;
  int64_t records = 0;
  int64_t failed_records = 0;
  int64_t workloads = 0;
  int64_t targets = 0;
  int64_t configs = 0;
  int64_t foreign_records = 0;
  int64_t jobs = 0;
  int64_t tombstones = 0;     // content ids of records compaction deleted
  int64_t cost_models = 0;
  int64_t oldest_unix_us = 0;
  int64_t newest_unix_us = 0;
  int64_t file_bytes = 0;  // database file (+ WAL when present)
  int64_t free_bytes = 0;  // free pages VACUUM would return
};

struct CompactResult {
  int64_t records_before = 0;
  int64_t records_deleted = 0;
  int64_t bytes_before = 0;
  int64_t bytes_after = 0;
};

// Which records Scan visits. Empty keys and zero times mean "any".
struct RecordFilter {
  std::string workload_key;
  std::string target_key;
  int64_t since_unix_us = 0;  // start_unix_us >= since
  int64_t until_unix_us = 0;  // start_unix_us < until (0: no bound)
};

struct TargetSummary {
  TargetInfo target;
  int64_t records = 0;
};

struct WorkloadSummary {
  WorkloadInfo workload;
  TargetInfo target;
  int64_t records = 0;
  int64_t errors = 0;
  std::optional<TuningRecord> best;
};

// The dashboard's queries: one page at a time, each bounded by an index.
struct BestPageQuery {
  std::string op;          // workloads of this operator ("" = any)
  std::string target_key;  // records of this target ("" = any)
  int64_t offset = 0;      // >= 0
  int limit = 50;          // 1..kMaxLimit
  static constexpr int kMaxLimit = 1000;
};

// One (workload, target) of the log with its noise-aware best config.
struct BestEntry {
  WorkloadInfo workload;
  TargetInfo target;
  RankedConfig best;
};

// Which of a job's records (the job page's curves; a page that has some asks for the
// ones after them).
struct JobRecordsQuery {
  std::string job_id;
  std::vector<std::string> workload_keys;  // its tasks' workloads (on any target)
  int64_t since_unix_us = 0;               // records that started at or after this
  int64_t after_record_id = 0;             // records with a larger id (0: all)
  int64_t limit = 1;                       // >= 1
};

// One of a job's records, in measurement order (the job page's curves).
struct JobRecordPoint {
  int64_t record_id = 0;
  std::string workload_key;
  std::string target_key;
  int64_t start_unix_us = 0;
  MeasureErrorKind error = MeasureErrorKind::kNone;
  double median_cost = 0;  // +inf when the record has no successful cost
};

// Thread-safe: one Database is shared by the server's threads; writes are serialised
// inside and each Commit is one transaction.
class Database {
 public:
  virtual ~Database() = default;

  // Opens (creating and migrating as needed). Errors: directory missing, file is not
  // a tuneforge database, schema newer than this build, I/O errors.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const DatabaseOptions& options);

  virtual int SchemaVersion() const = 0;

  // Stores the records all or nothing. Workloads and targets are upserted by key; a
  // record whose content id is already stored is skipped (idempotent imports and
  // merges), and so is one whose content id a compaction deleted (CommitResult.compacted). Calls from many threads are grouped into one transaction (each call
  // keeps its own all-or-nothing through a savepoint), so writers scale.
  virtual absl::StatusOr<CommitResult> Insert(const std::vector<TuningRecord>& records) = 0;

  // Insert, returning only the ids (the tuner's view).
  absl::StatusOr<std::vector<int64_t>> Commit(const std::vector<TuningRecord>& records) {
    absl::StatusOr<CommitResult> r = Insert(records);
    if (!r.ok()) return r.status();
    return std::move(r->ids);
  }

  // The noise-aware ranking of (workload, target)'s configs, best first, at most k:
  // a config that ever gave a wrong answer (or never succeeded) is never ranked;
  // re-measured configs (>= 2 successful records) come before configs measured once;
  // within each group the lowest median of all pooled samples wins, ties by age.
  virtual absl::StatusOr<std::vector<RankedConfig>> TopK(const std::string& workload_key,
                                                         const std::string& target_key, int k) = 0;

  // The most recent successful record of TopK's first config. NotFound when nothing
  // is ranked.
  virtual absl::StatusOr<TuningRecord> Best(const std::string& workload_key,
                                            const std::string& target_key) = 0;

  // All records of (workload, target), oldest first; either key may be empty = any.
  virtual absl::StatusOr<std::vector<TuningRecord>> Records(const std::string& workload_key,
                                                            const std::string& target_key) = 0;

  // Targets that have records for this workload.
  virtual absl::StatusOr<std::vector<TargetSummary>> TargetsOf(const std::string& workload_key) = 0;

  // One line per (workload, target) in the db.
  virtual absl::StatusOr<std::vector<WorkloadSummary>> List() = 0;

  // (workload, target)'s records in measurement order with the running best.
  virtual absl::StatusOr<std::vector<HistoryPoint>> History(const std::string& workload_key,
                                                            const std::string& target_key) = 0;

  // One line per target.
  virtual absl::StatusOr<std::vector<TargetStats>> TargetSummaries() = 0;

  // Per template, the newest version with a successful record of (workload, target).
  virtual absl::StatusOr<std::vector<TemplateVersionSummary>> TemplateVersions(
      const std::string& workload_key, const std::string& target_key) = 0;

  // Calls fn for every matching record, oldest id first, from one read snapshot; stops
  // at fn's first error. fn must not call back into this Database.
  virtual absl::Status Scan(const RecordFilter& filter,
                            const std::function<absl::Status(const TuningRecord&)>& fn) = 0;

  // Foreign records (imported logs of other tuners): stored verbatim, deduplicated by
  // content id, never ranked.
  virtual absl::StatusOr<CommitResult> InsertForeign(const std::vector<ForeignRecord>& records) = 0;
  virtual absl::Status ScanForeign(const std::function<absl::Status(const ForeignRecord&)>& fn) = 0;

  virtual absl::StatusOr<DatabaseStats> Stats() = 0;

  // Keeps, per (workload, target), the `keep` successful records with the lowest
  // median plus every record of the best config, deletes the rest, then VACUUMs.
  // Configs that ever gave a wrong answer stay disqualified. The content ids of the
  // deleted records are remembered (tombstones): Insert skips them from then on.
  virtual absl::StatusOr<CompactResult> Compact(int keep) = 0;

  // Cost-model blobs by key (the tuner's ModelKey): the bytes last saved, or nullopt.
  // Save replaces the blob in one transaction; keys must be non-empty.
  virtual absl::StatusOr<std::optional<std::string>> LoadModel(const std::string& key) = 0;
  virtual absl::Status SaveModel(const std::string& key, const std::string& bytes) = 0;

  // Jobs: upsert by id (created_unix_us is the first write's; later writes keep it);
  // read back.
  virtual absl::Status PutJob(const JobRow& job) = 0;
  virtual absl::StatusOr<JobRow> GetJob(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<JobRow>> ListJobs() = 0;

  // Browsing (the dashboard). A backend without them (a remote db) says Unimplemented.
  // The best table: per (workload, target) matching the query, ordered by operator,
  // workload key and target key; pairs without a rankable config are left out.
  // `limit` + 1 rows are never read: callers ask for one more to learn of a next page.
  virtual absl::StatusOr<std::vector<BestEntry>> BestPage(const BestPageQuery& query) {
    (void)query;
    return absl::UnimplementedError("this database cannot be browsed page by page");
  }
  virtual absl::StatusOr<TuningRecord> RecordById(int64_t id) {
    (void)id;
    return absl::UnimplementedError("this database cannot read a record by id");
  }
  // The records of `query.job_id`, oldest first, at most `query.limit` (the newest are
  // dropped). One range of the history index per (workload, target): no index of job
  // ids is kept, which would cost every insert.
  virtual absl::StatusOr<std::vector<JobRecordPoint>> JobRecords(const JobRecordsQuery& query) {
    (void)query;
    return absl::UnimplementedError("this database cannot list a job's records");
  }
};

}  // namespace tuneforge
