// The tuning-log Database: a small backend-neutral interface (LevelDB style) plus a
// factory. The SQLite backend lives in db/sqlite_database.cc; callers never see it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "db/record.h"

namespace tuneforge {

struct DatabaseOptions {
  std::string path;                // SQLite file; its directory must exist
  bool create_if_missing = true;   // false: a missing file is an error
  bool read_only = false;
  int busy_timeout_ms = 5000;
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

// Thread-safe: one Database is shared by the server's threads; writes are serialised
// inside and each Commit is one transaction.
class Database {
 public:
  virtual ~Database() = default;

  // Opens (creating and migrating as needed). Errors: directory missing, file is not
  // a tuneforge database, schema newer than this build, I/O errors.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const DatabaseOptions& options);

  virtual int SchemaVersion() const = 0;

  // Stores all records in one transaction (all or nothing) and returns their ids in
  // order. Workloads and targets are upserted by key.
  virtual absl::StatusOr<std::vector<int64_t>> Commit(const std::vector<TuningRecord>& records) = 0;

  // The best record for (workload key, target key): lowest median cost among records
  // with error none. NotFound when there is none.
  virtual absl::StatusOr<TuningRecord> Best(const std::string& workload_key,
                                            const std::string& target_key) = 0;

  // All records of (workload, target), oldest first; either key may be empty = any.
  virtual absl::StatusOr<std::vector<TuningRecord>> Records(const std::string& workload_key,
                                                            const std::string& target_key) = 0;

  // Targets that have records for this workload.
  virtual absl::StatusOr<std::vector<TargetSummary>> TargetsOf(const std::string& workload_key) = 0;

  // One line per (workload, target) in the db.
  virtual absl::StatusOr<std::vector<WorkloadSummary>> List() = 0;

  // Jobs: upsert by id; read back.
  virtual absl::Status PutJob(const JobRow& job) = 0;
  virtual absl::StatusOr<JobRow> GetJob(const std::string& id) = 0;
  virtual absl::StatusOr<std::vector<JobRow>> ListJobs() = 0;
};

}  // namespace tuneforge
