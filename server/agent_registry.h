// AgentRegistry: the agents connected to this server, by DeviceKey, and the
// MeasureRequests in flight on each. The AgentService feeds it (connect, results,
// disconnect); AgentRunner uses it to dispatch and await results.
//
// Dispatch: a request goes to the connected agent of its key with the fewest
// requests in flight (ties: least recently used). When an agent disconnects, each of
// its in-flight requests is re-dispatched once to another agent of the key, or
// completed as agent_lost. A result whose request id is unknown (late or duplicate)
// is dropped, never recorded twice.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/dispatch_observer.h"
#include "tuneforge/v1/agent.pb.h"

namespace tuneforge {

struct AgentInfo {
  std::string id;
  std::string device_key;
  v1::AgentCapabilities capabilities;
  bool connected = false;        // false after the stream ended: the agent is lost
  int in_flight = 0;
  int64_t measurements = 0;      // results received
  int64_t errors = 0;            // results with an error other than none
  int64_t last_heartbeat_unix_ms = 0;
  int64_t disconnected_unix_ms = 0;

  // idle, busy or lost (draining and quarantined arrive with leases and health checks).
  std::string State() const;
};

// Thread-safe.
class AgentRegistry {
 public:
  using ResultCallback = std::function<void(const v1::MeasureResult&)>;

  // Register: a new id for an agent with this key (not yet connected).
  std::string Register(const std::string& device_key, const v1::AgentCapabilities& caps);
  // The agent's stream opened / closed. Connect returns false for unknown ids.
  bool Connect(const std::string& agent_id);
  void Disconnect(const std::string& agent_id);
  void Heartbeat(const std::string& agent_id, int64_t unix_ms);

  // Blocks until there is a request for this agent (true) or the agent is
  // disconnected / the registry shut down (false).
  bool NextRequest(const std::string& agent_id, v1::MeasureRequest* request);
  // A result arrived from an agent.
  void Complete(const std::string& agent_id, const v1::MeasureResult& result);

  // Queues a request for an agent of `device_key`; `done` is called exactly once.
  // Returns false (and does not call `done`) when no agent of that key is connected.
  bool Dispatch(const std::string& device_key, v1::MeasureRequest request, ResultCallback done);

  // Gives up on a request (e.g. past its deadline): `done` gets agent_lost with
  // `why`, and a result that arrives later is dropped.
  void Abandon(const std::string& request_id, const std::string& why);

  int ConnectedAgents(const std::string& device_key) const;
  // Waits up to `timeout_ms` for an agent of the key; true when one is connected.
  bool WaitForAgent(const std::string& device_key, int timeout_ms) const;
  // Connected agents, and lost ones for kLostRetentionMs after they went away.
  std::vector<AgentInfo> Agents() const;
  static constexpr int64_t kLostRetentionMs = 3600 * 1000;
  // Wakes every NextRequest with false; no new dispatch succeeds.
  void Shutdown();

  // Metrics hooks. `observer` (not owned, may be null) must be set before the first
  // Dispatch and outlive the registry's use.
  void SetObserver(DispatchObserver* observer) { observer_ = observer; }
  // Requests in flight: queued on an agent but not yet sent, and sent (leased) and
  // awaiting a result. A snapshot for scrapes.
  struct Backlog {
    int64_t queued = 0;
    int64_t leased = 0;
  };
  Backlog GetBacklog() const;

 private:
  struct Pending {
    v1::MeasureRequest request;
    ResultCallback done;
    std::string agent_id;
    int dispatches = 0;
    std::chrono::steady_clock::time_point leased_at;  // latest dispatch
  };
  struct Agent {
    AgentInfo info;
    std::deque<std::string> queue;  // request ids to send
    int64_t last_used = 0;
  };
  // REQUIRES: mu_ held. Picks an agent of the key other than `exclude`, or null.
  Agent* PickLocked(const std::string& device_key, const std::string& exclude);
  void FailLocked(const std::string& request_id, const std::string& why,
                  std::vector<std::function<void()>>* callbacks);

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, Agent> agents_;       // GUARDED_BY(mu_)
  std::map<std::string, Pending> pending_;    // GUARDED_BY(mu_), by request id
  int64_t next_agent_ = 1;                    // GUARDED_BY(mu_)
  int64_t use_counter_ = 0;                   // GUARDED_BY(mu_)
  bool shutdown_ = false;                     // GUARDED_BY(mu_)
  DispatchObserver* observer_ = nullptr;
};

}  // namespace tuneforge
