// AgentRunner: the server's Runner. Turns MeasureInputs into MeasureRequests,
// dispatches them to agents of one DeviceKey through the AgentRegistry and waits for
// their MeasureResults.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "server/agent_registry.h"
#include "tuner/runner.h"

namespace tuneforge {

// Not thread-safe; one per job.
class AgentRunner : public Runner {
 public:
  using StatusCallback = std::function<void(const std::string&)>;
  // `on_wait` is told when no agent of the key is connected (and the job waits).
  AgentRunner(AgentRegistry* registry, std::string device_key, std::string request_prefix,
              StatusCallback on_wait, const std::atomic<bool>* cancel);

  std::vector<MeasureResult> Measure(const std::vector<MeasureInput>& inputs) override;
  int Parallelism() const override;

  // Extra time over a request's own timeout before the server gives up on an agent.
  static constexpr int kDeadlineGraceMs = 30000;

 private:
  AgentRegistry* registry_;
  std::string device_key_;
  std::string request_prefix_;
  StatusCallback on_wait_;
  const std::atomic<bool>* cancel_;
  int64_t next_request_ = 1;
};

MeasureResult FromProto(const v1::MeasureResult& r);

}  // namespace tuneforge
