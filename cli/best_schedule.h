// The graph executor's schedules from a tuning-log database: `model run --db` and
// `bench model --db` run every task with its best record for the target.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/graph/executor.h"
#include "compiler/support/status.h"
#include "db/database.h"

namespace tuneforge::cli {

// Opens `path` read-only (it must exist).
inline absl::StatusOr<std::unique_ptr<Database>> OpenDbReadOnly(const std::string& path) {
  DatabaseOptions options;
  options.path = path;
  options.create_if_missing = false;
  options.read_only = true;
  return Database::Open(options);
}

// Each task's best record on `*target` (the noise-aware ranking of `db best`), or
// the template's default schedule when there is none. A record of another template
// (version) whose config no longer fits also falls back, with a warning: the model
// still runs. `db` and `target` must outlive the function.
inline graph::ScheduleFn BestRecordSchedule(Database* db, const Target* target) {
  return [db, target](const TuningTask& task, const Template& tmpl) -> absl::StatusOr<std::optional<Config>> {
    absl::StatusOr<TuningRecord> best = db->Best(task.WorkloadKey(), target->Key());
    if (absl::IsNotFound(best.status())) return std::optional<Config>();
    if (!best.ok()) return best.status();
    ConfigSpace space = tmpl.Space(task, *target);
    absl::StatusOr<Config> config = Config::FromJson(best->config_json);
    if (best->template_name != tmpl.name() || best->template_version > tmpl.version() || !config.ok() ||
        !space.Check(space.WithDefaults(*config)).ok()) {
      std::fprintf(stderr,
                   "warning: the best record of %s (template %s v%d) does not fit %s v%d; "
                   "using the default schedule\n",
                   task.CanonicalText().c_str(), best->template_name.c_str(), best->template_version,
                   tmpl.name().c_str(), tmpl.version());
      return std::optional<Config>();
    }
    return std::optional<Config>(space.WithDefaults(*config));
  };
}

}  // namespace tuneforge::cli
