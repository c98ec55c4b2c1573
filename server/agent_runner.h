// AgentRunner: the server's Runner. Turns MeasureInputs into MeasureRequests,
// dispatches them to agents of one DeviceKey through the AgentRegistry (in the job's
// fair share, weighted by its priority) and waits for their MeasureResults. Leases,
// re-dispatch and agent_lost are the registry's business: every request it accepts
// ends with exactly one result.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/task/task.h"
#include "server/agent_registry.h"
#include "server/job_cpu_share.h"
#include "tuner/runner.h"

namespace tuneforge {

// Not thread-safe; one per job.
class AgentRunner : public Runner {
 public:
  using StatusCallback = std::function<void(const std::string&)>;
  // `on_wait` is told when no agent of the key is connected (and the job waits).
  // `request_prefix` (the job id) also names the job's share of the agents; `weight`
  // is the job's priority.
  // `peak_gflops` (> 0): the target's plausible peak; results faster than the task's
  // FLOPs at that rate are rejected by the registry (AgentRegistry::Complete).
  // `cpu_share` (may be null): the share the calling job thread holds; Measure gives
  // it back while it waits for agents and results.
  AgentRunner(AgentRegistry* registry, std::string device_key, std::string request_prefix,
              StatusCallback on_wait, const std::atomic<bool>* cancel, int weight = 1,
              double peak_gflops = 0, JobCpuShare* cpu_share = nullptr);
  ~AgentRunner() override;

  std::vector<MeasureResult> Measure(const std::vector<MeasureInput>& inputs) override;
  int Parallelism() const override;

 private:
  AgentRegistry* registry_;
  std::string device_key_;
  std::string request_prefix_;
  StatusCallback on_wait_;
  const std::atomic<bool>* cancel_;
  int weight_;
  double peak_gflops_;
  JobCpuShare* cpu_share_;
  int64_t next_request_ = 1;
  // The fastest a correct run of the input's kernel can be at peak_gflops_ (0 = no
  // bound): its template's FLOPs for the config (Winograd does fewer than the task).
  // An error when the task, its template or the config cannot be read: the input is
  // then not measured (its result says why) rather than measured unchecked.
  absl::StatusOr<double> MinPlausibleSeconds(const MeasureInput& in);
  std::string bound_task_;
  absl::StatusOr<TuningTask> bound_parsed_ = absl::UnknownError("no task yet");
};

// The fastest a correct run of `flops` operations of `task` can take when the
// target's float32 plausible peak is `peak_gflops` (Target::PlausiblePeakGflops); int8
// tasks run up to Target::kInt8PlausibleFactor times faster.
double PlausibleFloorSeconds(const TuningTask& task, double flops, double peak_gflops);

MeasureResult FromProto(const v1::MeasureResult& r);
// The wire form of one measurement (artifact, inputs' seed, expected output, options).
v1::MeasureRequest MeasureRequestFor(const MeasureInput& in, const std::string& request_id);

}  // namespace tuneforge
