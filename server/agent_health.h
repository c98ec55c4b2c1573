// AgentHealth: the golden-kernel check of agents (docs/architecture.md, "Agent health").
//
// The golden kernel is a small fixed matmul (kGoldenTask, the template's untuned
// schedule, scalar code for the triple's baseline CPU so that every agent of the
// architecture can run it), built once per architecture by the server's Builder and
// checked by the agent against the reference output like any MeasureRequest. It runs
// on every agent when it connects — the agent takes no work until it passes
// ("checking") — and again every interval_s. An agent is quarantined (no more work,
// `farm status` shows why) when
//   - its golden result is not a correct measurement (wrong_answer, runtime_error, ...), or
//   - its golden time (best of 3 samples) is more than slow_factor x the median golden
//     time of its peers (connected, not quarantined agents of the same DeviceKey),
//     twice in a row: the first time the golden kernel is re-run at once, so that one
//     noisy sample on a loaded machine does not condemn an agent.
// Agents with no peer yet pass on correctness alone; they are compared when a peer's
// time arrives.
//
// Thread-safe. Results arrive on the agents' stream threads; the periodic check runs
// on a thread of its own.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/agent_registry.h"
#include "tuner/builder.h"
#include "tuneforge/v1/common.pb.h"

namespace tuneforge {

struct HealthOptions {
  // Re-run the golden kernel on every usable agent this often; 0: only at connection.
  int interval_s = 600;
  // Quarantine an agent slower than this many times the median of its peers.
  double slow_factor = 3.0;

  absl::Status Validate() const;
};

class AgentHealth {
 public:
  static constexpr const char* kGoldenTask = "matmul M=64 N=64 K=64";

  // `registry` and `builder` outlive this object.
  AgentHealth(AgentRegistry* registry, const Builder* builder, HealthOptions options);
  ~AgentHealth();  // stops the periodic thread

  // Sends the golden kernel to a connected agent. An agent registered as checking
  // leaves that state when it passes; one the server cannot build a golden kernel
  // for (another architecture) is let through unchecked, with a warning.
  void CheckAgent(const std::string& agent_id);

 private:
  struct Golden;  // the request template for one architecture
  absl::StatusOr<std::shared_ptr<const Golden>> GoldenFor(const std::string& arch);
  void OnResult(const std::string& agent_id, const v1::MeasureResult& result);
  // Compares every timed agent of the key with its peers; strikes and re-runs or
  // quarantines the slow ones.
  void CompareWithPeers(const std::string& device_key);

  AgentRegistry* const registry_;
  const Builder* const builder_;
  const HealthOptions options_;

  std::mutex build_mu_;  // one golden build at a time
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Golden>> golden_;  // GUARDED_BY(mu_), by arch
  struct Verdict {
    int strikes = 0;             // slow verdicts in a row
    bool rerun_pending = false;  // a re-run of the golden kernel is on its way
    bool fresh = false;          // a result not yet judged
  };
  std::map<std::string, Verdict> verdicts_;  // GUARDED_BY(mu_), by agent
  int64_t next_request_ = 1;            // GUARDED_BY(mu_)
  bool stop_ = false;                   // GUARDED_BY(mu_)
  std::condition_variable cv_;
  std::thread periodic_;
};

}  // namespace tuneforge
