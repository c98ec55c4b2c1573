// Checks that an imported record is what it says (task, target, config).
#include "tuner/record_identity.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "nlohmann/json.hpp"

namespace tuneforge {

absl::Status CheckRecordIdentity(const TuningRecord& r) {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  absl::StatusOr<TuningTask> task = ParseTask(r.workload.task_text);
  if (!task.ok()) return bad("task '", r.workload.task_text, "': ", task.status().message());
  if (task->CanonicalText() != r.workload.task_text) {
    return bad("task '", r.workload.task_text, "' is not in canonical form ('", task->CanonicalText(), "')");
  }
  if (r.workload.key != task->WorkloadKey()) {
    return bad("workload key '", r.workload.key, "' is not the key of '", r.workload.task_text, "' (",
               task->WorkloadKey(), ")");
  }
  if (r.workload.op != task->op()) {
    return bad("workload op '", r.workload.op, "' is not the op of '", r.workload.task_text, "'");
  }
  const double flops = task->Flops();
  if (!(std::fabs(r.workload.flops - flops) <= 1e-9 * flops)) {
    return bad(absl::StrFormat("workload flops %.15g are not the %.15g", r.workload.flops, flops), " of '",
               r.workload.task_text, "'");
  }
  const nlohmann::json given = nlohmann::json::parse(r.workload.task_json, nullptr, false);
  if (given.is_discarded() || given != nlohmann::json::parse(task->ToJson())) {
    return bad("workload task_json '", r.workload.task_json, "' is not that of '", r.workload.task_text, "'");
  }
  if (r.target.num_threads < 1 || r.target.num_threads > Target::kMaxThreads) {
    return bad("target num_threads ", r.target.num_threads, " is not 1..", Target::kMaxThreads);
  }
  Target target;
  target.triple = r.target.triple;
  target.cpu = r.target.cpu;
  target.features = r.target.features;
  target.num_threads = r.target.num_threads;
  target.device_key = r.target.device_key;
  if (r.target.key != target.Key()) {
    return bad("target key '", r.target.key, "' is not the key of its fields (", target.Key(), ")");
  }
  if (r.result.error == MeasureErrorKind::kNone) {
    for (double c : r.result.costs) {
      if (!std::isfinite(c) || c <= 0) return bad("a success with a cost of ", c, " s (must be a positive time)");
    }
  }
  return absl::OkStatus();
}

}  // namespace tuneforge
