// The SQLite schema and its migrations.
#include "db/schema.h"

#include "compiler/support/status.h"
#include "db/record_writer.h"

namespace tuneforge::db_internal {

namespace {

// Version 1. Notes on choices a reader may question:
// - records.job_id has no foreign key on purpose: deleting a job must not delete (or
//   be blocked by) the measurements it produced.
// - median_cost is denormalised from costs_json so Best is one index range scan; it
//   is NULL when a record has no costs, and such a record can never be best.
// - error_kind is text (MeasureErrorKindName) so the file reads well in the sqlite3
//   shell; the CHECK keeps unknown names out.
// - The best-query index ends in median_cost; SQLite appends the rowid (id), which is
//   exactly the tie-break Best uses.
constexpr char kSchemaV1[] = R"sql(
CREATE TABLE workloads (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE CHECK (key <> ''),
  op TEXT NOT NULL,
  task_text TEXT NOT NULL,
  task_json TEXT NOT NULL,
  flops REAL NOT NULL
);
CREATE TABLE targets (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE CHECK (key <> ''),
  triple TEXT NOT NULL,
  cpu TEXT NOT NULL,
  features TEXT NOT NULL,
  num_threads INTEGER NOT NULL,
  device_key TEXT NOT NULL
);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY CHECK (id <> ''),
  owner TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  state TEXT NOT NULL,
  message TEXT NOT NULL,
  created_unix_us INTEGER NOT NULL,
  updated_unix_us INTEGER NOT NULL
);
CREATE TABLE records (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  target_id INTEGER NOT NULL REFERENCES targets(id),
  job_id TEXT,
  template_name TEXT NOT NULL,
  template_version INTEGER NOT NULL,
  config_json TEXT NOT NULL,
  costs_json TEXT NOT NULL,
  median_cost REAL CHECK (median_cost IS NULL OR median_cost >= 0),
  error_kind TEXT NOT NULL CHECK (error_kind IN ('none', 'invalid_config', 'build_error',
      'build_timeout', 'runtime_error', 'wrong_answer', 'run_timeout', 'agent_lost')),
  error_message TEXT NOT NULL,
  build_seconds REAL NOT NULL,
  start_unix_us INTEGER NOT NULL,
  end_unix_us INTEGER NOT NULL,
  agent_id TEXT NOT NULL,
  environment_json TEXT NOT NULL,
  created_unix_us INTEGER NOT NULL
);
CREATE INDEX records_best ON records (workload_id, target_id, error_kind, median_cost);
)sql";

// Version 2: the shared tuning log.
// - records.content_id names a measurement (db/record.h ContentId); its unique index
//   makes imports and merges idempotent. Filled for v1 rows by BackfillV2.
// - configs: one row per (workload, target, template, version, config) with the
//   pooled samples of its successful records, so the noise-aware Best is one index
//   range scan (configs_rank) however many records a workload has. rank_class: 0 =
//   re-measured, 1 = measured once, 2 = never rankable (a wrong answer, or no success).
// - foreign_records: other tuners' log lines without an exact mapping, verbatim.
// - records_history serves History and date-filtered exports of one workload;
//   records_config finds a config's records (its representative: the most recent
//   successful one). records_best of v1 is dropped: Best reads configs now.
constexpr char kSchemaV2[] = R"sql(
CREATE TABLE configs (
  id INTEGER PRIMARY KEY,
  workload_id INTEGER NOT NULL REFERENCES workloads(id),
  target_id INTEGER NOT NULL REFERENCES targets(id),
  template_name TEXT NOT NULL,
  template_version INTEGER NOT NULL,
  config_json TEXT NOT NULL,
  successes INTEGER NOT NULL,
  failures INTEGER NOT NULL,
  wrong_answers INTEGER NOT NULL,
  samples_json TEXT NOT NULL,
  median_cost REAL,
  rank_class INTEGER NOT NULL CHECK (rank_class IN (0, 1, 2)),
  UNIQUE (workload_id, target_id, template_name, template_version, config_json)
);
CREATE INDEX configs_rank ON configs (workload_id, target_id, rank_class, median_cost);
ALTER TABLE records ADD COLUMN content_id TEXT;
ALTER TABLE records ADD COLUMN config_id INTEGER REFERENCES configs(id);
CREATE INDEX records_history ON records (workload_id, target_id, start_unix_us);
CREATE INDEX records_config ON records (config_id, start_unix_us);
DROP INDEX records_best;
CREATE TABLE foreign_records (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  content_id TEXT NOT NULL UNIQUE,
  source TEXT NOT NULL,
  target_text TEXT NOT NULL,
  task_name TEXT NOT NULL,
  workload_json TEXT NOT NULL,
  config_json TEXT NOT NULL,
  costs_json TEXT NOT NULL,
  error_no INTEGER NOT NULL,
  timestamp_unix_us INTEGER NOT NULL,
  reason TEXT NOT NULL,
  raw TEXT NOT NULL,
  created_unix_us INTEGER NOT NULL
);
CREATE INDEX foreign_records_task ON foreign_records (source, task_name);
)sql";

// Version 3.
// - tombstones: the content ids of records `compact` deleted, so importing an export
//   taken before the compaction (or merging an older copy) does not bring them back.
//   WITHOUT ROWID: the id is the whole row.
// - cost_models: the tuner's cost-model blobs by key (tuner/model_store.h ModelKey),
//   next to the records they were trained on.
constexpr char kSchemaV3[] = R"sql(
CREATE TABLE tombstones (
  content_id TEXT PRIMARY KEY,
  deleted_unix_us INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE cost_models (
  key TEXT PRIMARY KEY CHECK (key <> ''),
  bytes BLOB NOT NULL,
  updated_unix_us INTEGER NOT NULL
);
)sql";

// Version 4.
// - records.proposed_by: what proposed the config (TuningRecord::proposed_by), so a
//   search that fell back to random is visible in the log, not only in a log line.
constexpr char kSchemaV4[] = R"sql(
ALTER TABLE records ADD COLUMN proposed_by TEXT NOT NULL DEFAULT '';
)sql";

// Version 5.
// - records.uploaded_by / upload_trusted: who uploaded a record over the server and
//   whether it is trusted (TuningRecord::uploaded_by). Untrusted uploads get no
//   config_id: they never enter the configs ranking.
constexpr char kSchemaV5[] = R"sql(
ALTER TABLE records ADD COLUMN uploaded_by TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN upload_trusted INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 6.
// - records_content is keyed (workload_id, target_id, content_id) instead of
//   content_id alone. A content id names the record's workload and target too, so
//   the constraint is the same; but content ids are hashes, and a global index of
//   them takes every new record's entry to a random page: at a million records a
//   batch of 10,000 dirtied some 10,000 pages of it (40 MB of WAL per commit).
//   Records arrive a (workload, target) pair at a time, so under this key a batch
//   touches a few pages per pair. Lookups by content id know the pair (the record's
//   own workload and target).
constexpr char kSchemaV6[] = R"sql(
DROP INDEX records_content;
CREATE UNIQUE INDEX records_content ON records (workload_id, target_id, content_id);
)sql";

absl::Status FinishV2(sqlite3* db) {
  RETURN_IF_ERROR(BackfillContentIdsAndConfigs(db));
  return Exec(db, "CREATE UNIQUE INDEX records_content ON records (content_id)");
}

}  // namespace

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration>* const migrations = [] {
    auto* list = new std::vector<Migration>{
        {1, "initial schema: workloads, targets, jobs, records", kSchemaV1},
        {2, "content ids, configs ranking table, foreign records, history index", kSchemaV2,
         FinishV2},
        {3, "tombstones of compacted records, cost-model blobs", kSchemaV3},
        {4, "records.proposed_by (search provenance)", kSchemaV4},
        {5, "records.uploaded_by, upload_trusted (upload provenance)", kSchemaV5},
        {6, "records_content keyed by (workload, target, content id): index locality",
         kSchemaV6},
    };
    for (size_t i = 0; i < list->size(); ++i) {
      TF_CHECK((*list)[i].version == static_cast<int>(i) + 1, "migrations must be 1, 2, ...");
    }
    return list;
  }();
  return *migrations;
}

int LatestSchemaVersion() { return Migrations().back().version; }

}  // namespace tuneforge::db_internal
