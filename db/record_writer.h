// Rows <-> records for the SQLite backend, and RecordWriter: the one place that writes
// a TuningRecord (content-id dedup, workload/target upsert, the configs ranking row).
// Used by Insert (db/sqlite_database.cc) and by the v1 -> v2 migration's backfill.
//
// Not thread-safe: used under the connection's lock, inside a write transaction.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "db/record.h"
#include "db/sqlite_util.h"

namespace tuneforge::db_internal {

// The columns every record query selects, in the order RecordFromRow reads them;
// callers append WHERE/ORDER BY.
extern const char kRecordSelect[];
// A config's representative: its most recent successful record (records_config); one
// parameter, the config id.
const std::string& RepresentativeSql();
absl::StatusOr<TuningRecord> RecordFromRow(const Statement& row);
// Reads the six target columns starting at `col`.
TargetInfo TargetFromRow(const Statement& row, int col);

// Checks what the schema cannot express well; the schema's CHECKs stay as a backstop.
absl::Status ValidateRecord(const TuningRecord& r);

// Parses a JSON array of numbers (costs_json, samples_json); DataLoss otherwise.
absl::StatusOr<std::vector<double>> ParseCosts(const std::string& json);
std::string CostsJson(const std::vector<double>& costs);

class RecordWriter {
 public:
  // `v2_backfill`: the writer of the v1 -> v2 backfill, which runs before the tables
  // and columns of later versions exist (tombstones of v3, records.proposed_by of v4):
  // no tombstone checks, and only Attach (Write would fail).
  static absl::StatusOr<RecordWriter> Prepare(sqlite3* db, bool v2_backfill = false);

  enum class Outcome { kInserted, kDuplicate, kCompacted };
  struct Written {
    int64_t id = 0;  // 0 for kCompacted
    Outcome outcome = Outcome::kInserted;
  };
  // Stores one record unless its content id is already stored or a compaction
  // deleted it.
  absl::StatusOr<Written> Write(const TuningRecord& r, int64_t now_unix_us);

  // For the migration: gives an existing row its content id and configs row.
  absl::Status Attach(int64_t record_id, const TuningRecord& r, const std::string& content_id);

  // Forget cached workload/target ids (after a savepoint rollback they may be gone).
  void ClearCache() {
    workload_ids_.clear();
    target_ids_.clear();
    configs_.clear();
  }

 private:
  RecordWriter() = default;
  absl::StatusOr<int64_t> WorkloadId(const WorkloadInfo& w);
  absl::StatusOr<int64_t> TargetId(const TargetInfo& t);
  // Finds or creates the record's configs row, folds the record into it (samples,
  // counts, rank) and returns its id.
  absl::StatusOr<int64_t> FoldIntoConfig(int64_t workload_id, int64_t target_id,
                                         const TuningRecord& r);

  // A configs row as this transaction last wrote it.
  struct ConfigState {
    int64_t id = 0;
    int64_t successes = 0, failures = 0, wrong_answers = 0;
    std::vector<double> samples;
  };

  sqlite3* db_ = nullptr;
  Statement find_content_, insert_workload_, select_workload_, insert_target_, select_target_,
      select_config_, insert_config_, update_config_, insert_record_, attach_record_,
      find_tombstone_, promote_record_;
  // Whether the db has tombstones at all: most never compact, and then the lookup
  // is skipped.
  bool has_tombstones_ = false;
  // Key -> (row id, the info first seen), to check later uses describe the same thing.
  std::map<std::string, std::pair<int64_t, WorkloadInfo>> workload_ids_;
  std::map<std::string, std::pair<int64_t, TargetInfo>> target_ids_;
  // Configs written in this transaction, by (workload id, target id, version,
  // template, config): a re-measurement folds in without reading the row back.
  std::unordered_map<std::string, ConfigState> configs_;
};

// v1 -> v2: content ids and configs rows for every existing record.
absl::Status BackfillContentIdsAndConfigs(sqlite3* db);

}  // namespace tuneforge::db_internal
