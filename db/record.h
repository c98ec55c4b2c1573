// Domain types of the tuning log. Plain data; no SQLite here (sqlite3.h stays in
// db/sqlite_*.cc). Strings carry the task and target identities so db depends on no
// other component.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tuneforge {

// DESIGN.md's error kinds. Failures are data: every measured candidate gets a record.
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
  std::vector<double> costs;       // seconds per run, one per sample
  MeasureErrorKind error = MeasureErrorKind::kNone;
  std::string error_message;
  int64_t start_unix_us = 0;
  int64_t end_unix_us = 0;
  std::string agent_id;
  std::string environment_json;    // CPU model, agent/compiler version, ...
  double build_seconds = 0;

  double MedianCost() const;       // +inf when costs is empty
};

// The (workload) half of a record's key. `key` is derived from the canonical text.
struct WorkloadInfo {
  std::string key;
  std::string op;                  // e.g. matmul
  std::string task_text;           // canonical, e.g. "matmul M=512 N=512 K=512 dtype=float32"
  std::string task_json;
  double flops = 0;                // floating-point operations of one run
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
  int64_t id = 0;                  // assigned by the Database on commit
  WorkloadInfo workload;
  TargetInfo target;
  std::string template_name;
  int template_version = 0;
  std::string config_json;
  MeasureResult result;
  std::string job_id;              // empty for records not produced by a job
};

// A job as the database keeps it (the server owns the state machine).
struct JobRow {
  std::string id;
  std::string owner;
  std::string spec_json;
  std::string state;               // queued, running, succeeded, failed, cancelled
  std::string message;
  int64_t created_unix_us = 0;
  int64_t updated_unix_us = 0;
};

}  // namespace tuneforge
