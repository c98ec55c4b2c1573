// Domain types of the tuning log. Plain data; no SQLite here (sqlite3.h stays in
// db/sqlite_*.cc). Strings carry the task and target identities so db depends on no
// other component.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tuneforge {

// The error kinds of a measurement. Failures are data: every measured candidate gets a record.
enum class MeasureErrorKind {
  kNone,
  kInvalidConfig,
  kBuildError,
  kBuildTimeout,
  kRuntimeError,
  kWrongAnswer,
  kRunTimeout,
  kAgentLost,
};
const char* MeasureErrorKindName(MeasureErrorKind kind);  // "none", "build_error", ...
std::optional<MeasureErrorKind> ParseMeasureErrorKind(const std::string& name);

struct MeasureResult {
  std::vector<double> costs;  // seconds per run, one per sample
  MeasureErrorKind error = MeasureErrorKind::kNone;
  std::string error_message;
  int64_t start_unix_us = 0;
  int64_t end_unix_us = 0;
  std::string agent_id;
  std::string environment_json;  // CPU model, agent/compiler version, ...
  double build_seconds = 0;

  double MedianCost() const;  // +inf when costs is empty
};

// The (workload) half of a record's key. `key` is derived from the canonical text.
struct WorkloadInfo {
  std::string key;
  std::string op;         // e.g. matmul
  std::string task_text;  // canonical, e.g. "matmul M=512 N=512 K=512 dtype=float32"
  std::string task_json;
  double flops = 0;  // floating-point operations of one run
};

// The (target) half. `key` is Target::Key().
struct TargetInfo {
  std::string key;
  std::string triple;
  std::string cpu;
  std::string features;
  int num_threads = 1;
  std::string device_key;
};

struct TuningRecord {
  int64_t id = 0;  // assigned by the Database on commit
  // ContentId(*this), filled in by the Database on commit and on every read. Two
  // records with the same content id are the same measurement: merges and imports
  // skip it.
  std::string content_id;
  WorkloadInfo workload;
  TargetInfo target;
  std::string template_name;
  int template_version = 0;
  std::string config_json;
  MeasureResult result;
  std::string job_id;  // empty for records not produced by a job
  // Provenance: what proposed the config. "baseline" (the untuned schedule),
  // "heuristic" (the template's warm-start configs), "fixed" (a job's given configs),
  // "remeasure" (the top-k re-measurement), a policy name ("model", "random", "grid",
  // "ga"), or "<policy>:random" when the policy fell back to random proposals. Empty for
  // records from before schema v4 and for imports that do not say. Not part of the
  // content id: it describes the search, not the measurement.
  std::string proposed_by;
  // Provenance of records uploaded over the server (DatabaseService.Upload): the
  // uploader's principal name, and whether the db trusted it (admins). An untrusted
  // upload is kept and exported but is never ranked (best, top-k, deploy) and the tuner
  // does not treat its config as measured, so the farm re-measures it (schema v5). Not
  // part of the content id.
  std::string uploaded_by;
  bool upload_trusted = false;
  bool UntrustedUpload() const { return !uploaded_by.empty() && !upload_trusted; }
};

// The identity of a measurement: 32 hex digits of a 128-bit FNV-1a hash over the
// workload key, target key, template name + version, config, environment fingerprint,
// start and end timestamps, agent id and the costs. Stable across releases (it is
// stored in files and export logs): never change what goes in. Not cryptographic;
// it names content, it does not defend against a forger (see docs/db.md).
std::string ContentId(const TuningRecord& record);
// The content id of a foreign record: its source and the raw line, whitespace trimmed.
std::string ForeignContentId(const std::string& source, const std::string& raw);

// A tuning record from another tuner (an AutoTVM log line) that has no exact
// tuneforge equivalent. Kept verbatim, keyed by its own workload, so nothing a team
// imported is lost; never used by Best.
struct ForeignRecord {
  int64_t id = 0;
  std::string content_id;     // 32 hex digits of the hash of source + raw line
  std::string source;         // e.g. "autotvm-v0.2"
  std::string target_text;    // e.g. "llvm -mcpu=skylake-avx512"
  std::string task_name;      // e.g. "conv2d_NCHWc.x86"
  std::string workload_json;  // the task's arguments as JSON
  std::string config_json;    // the config entity as JSON
  std::vector<double> costs;  // seconds
  int error_no = 0;           // the source's error number (AutoTVM: 0 = none)
  int64_t timestamp_unix_us = 0;
  std::string reason;  // why it was not mapped to a tuneforge task
  std::string raw;     // the line as read
};

// A job as the database keeps it (the server owns the state machine).
struct JobRow {
  std::string id;
  std::string owner;
  std::string spec_json;
  std::string state;  // queued, running, succeeded, failed, cancelled
  std::string message;
  int64_t created_unix_us = 0;
  int64_t updated_unix_us = 0;
};

}  // namespace tuneforge
