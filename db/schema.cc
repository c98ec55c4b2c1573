#include "db/schema.h"

#include "compiler/support/status.h"

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

}  // namespace

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration>* const migrations = [] {
    auto* list = new std::vector<Migration>{
        {1, "initial schema: workloads, targets, jobs, records", kSchemaV1},
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
