// Deploy: turns the best TuningRecords of a list of tasks into a library a user
// links: DIR/lib<name>.so, DIR/lib<name>.a and DIR/<name>.h with one C function per
// task, plus the runtime the kernels need (the thread pool) and the library's
// provenance (task, config, record id, measured GFLOP/s, tuneforge version) readable
// through <name>_provenance() and `tuneforge deploy inspect`.
//
// The kernels are compiled by tuneforge's own LLVM codegen from the records'
// configs; the C glue (wrappers, provenance, runtime) is compiled with the system
// C++ compiler (c++), and the archive made with ar.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/task/task.h"
#include "db/database.h"

namespace tuneforge {

struct DeployOptions {
  std::string db_path;
  std::vector<std::string> tasks;  // task texts, as for `tune --task`
  std::string device_key;          // narrows the records' target (optional)
  std::string target_key;          // picks one target exactly (optional)
  // Narrows the records' target by name (optional): an architecture (aarch64,
  // riscv64, x86_64: the triple's first part) or a CPU (x86-64-v3, znver5).
  std::string target_name;
  std::string out_dir;             // created if missing (its parent must exist)
  std::string name = "tuneforge_kernels";  // library name: a C identifier
  // Without a record, a task is an error; with fallback, the template's default
  // (untuned) schedule is used and a warning printed.
  bool fallback_default = false;
  std::string tuneforge_version;
};

struct DeployedKernel {
  std::string function;     // C function name in the header
  std::string task;         // canonical task text
  std::string config_json;
  int64_t record_id = 0;    // 0 for a fallback
  double gflops = 0;        // as recorded in the db (0 for a fallback)
  bool fallback = false;
};

struct DeployReport {
  std::string shared_library, static_library, header;
  std::string target_key;
  std::vector<DeployedKernel> kernels;
  std::vector<std::string> warnings;  // one per fallback task
};

absl::StatusOr<DeployReport> Deploy(const DeployOptions& options);

// The one target the records of `tasks` in `db` were measured on, among those that
// match the filters (empty = any; `target_name` is an architecture such as aarch64 or
// a CPU such as x86-64-v3). nullopt when none matches; InvalidArgument naming the
// keys when several do.
absl::StatusOr<std::optional<TargetInfo>> RecordTarget(Database* db, const std::vector<TuningTask>& tasks,
                                                       const std::string& device_key,
                                                       const std::string& target_key,
                                                       const std::string& target_name);

}  // namespace tuneforge
