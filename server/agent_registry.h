// AgentRegistry: the agents connected to this server, by DeviceKey, and the
// MeasureRequests waiting for them or leased to them. The AgentService feeds it
// (register, connect, heartbeats, results, drain, disconnect); AgentRunner uses it to
// dispatch and await results. docs/architecture.md ("Leases, heartbeats and fair
// scheduling") tells the whole story; in short:
//
//   Dispatch   -> the request waits in the FairQueue of its key (weighted by job
//                 priority) until an agent of the key has a free worker;
//   NextRequest (the agent's stream) -> pops the fairest request this agent has not
//                 tried yet and leases it (LeaseTable) to the agent;
//   Heartbeat  -> renews the agent's leases;
//   Complete   -> a result from the lease holder completes the request once; a late
//                 or duplicate result (no lease) is dropped;
//   lease lost (agent disconnected, or the lease expired: no heartbeats, or past the
//                 request's timeout + grace) -> back to the front of the queue for
//                 another agent of the key, at most max_redispatch times, then
//                 agent_lost. A request that no usable agent of the key may still take
//                 is agent_lost at once.
//
// Agents are checking (golden kernel not passed yet, see AgentHealth) / idle / busy /
// draining (SIGTERM: hands back what it has not started) / quarantined (no more work) /
// lost (disconnected, or no heartbeat for missed_heartbeats intervals).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/dispatch_observer.h"
#include "server/fair_queue.h"
#include "server/lease_table.h"
#include "tuneforge/v1/agent.pb.h"

namespace tuneforge {

struct DispatchOptions {
  // A lost lease is given to another agent at most this many times (R), then the
  // request is recorded as agent_lost.
  int max_redispatch = 2;
  // Sent to agents at registration; an agent silent for missed_heartbeats intervals
  // is lost and its leases expire.
  int heartbeat_interval_ms = 2000;
  int missed_heartbeats = 3;
  // A lease also ends at grant + the request's timeout + this grace.
  int lease_grace_ms = 10000;
  // Monotonic milliseconds; empty: std::chrono::steady_clock. Tests inject a clock.
  std::function<int64_t()> clock_ms;
  // Check leases for expiry every this many ms on a thread of the registry; 0: no
  // thread (tests call ReapExpiredLeases).
  int reap_interval_ms = 100;

  // InvalidArgument with the offending value for out-of-range settings.
  absl::Status Validate() const;
};

struct AgentInfo {
  std::string id;
  std::string device_key;
  v1::AgentCapabilities capabilities;
  int workers = 1;               // leases it may hold at once
  bool connected = false;        // false after the stream ended
  bool responsive = true;        // heard from within missed_heartbeats intervals
  bool draining = false;         // stopping: no new requests
  bool quarantined = false;      // failed a health check: no more work
  bool checking = false;         // golden kernel not passed yet: no work yet
  std::string state_reason;      // why draining / quarantined / lost
  int in_flight = 0;             // leases held
  int64_t measurements = 0;      // results received
  int64_t errors = 0;            // results with an error other than none
  int64_t lease_expiries = 0;    // leases that ran out on it
  int64_t last_heartbeat_unix_ms = 0;
  int64_t disconnected_unix_ms = 0;
  double golden_seconds = 0;     // last golden-kernel time (AgentHealth)

  // idle, busy, checking, draining, quarantined or lost.
  std::string State() const;
};

// Thread-safe.
class AgentRegistry {
 public:
  using ResultCallback = std::function<void(const v1::MeasureResult&)>;

  // REQUIRES: options.Validate() is OK.
  explicit AgentRegistry(DispatchOptions options = {});
  ~AgentRegistry();  // Shutdown(), then stops the reaper thread

  // Register: a new id for an agent with this key (not yet connected). A `checking`
  // agent gets no work (only DispatchTo requests) until PassCheck.
  // `principal` (the registering token's name; "" without auth) and the returned
  // `session_token` (128 random bits, hex) bind the id: see ConnectSession.
  std::string Register(const std::string& device_key, const v1::AgentCapabilities& caps,
                       int workers = 1, bool checking = false, const std::string& principal = "",
                       std::string* session_token = nullptr);
  void PassCheck(const std::string& agent_id);
  // The agent's stream opened / closed. Connect returns false for unknown ids.
  bool Connect(const std::string& agent_id);
  // The agent's stream, checked against its registration: the session token must be
  // the one Register returned, the principal the one that registered, and the id not
  // connected already (one stream per registration) nor gone.
  enum class SessionCheck { kOk, kUnknown, kWrongSession, kWrongPrincipal, kAlreadyConnected };
  SessionCheck ConnectSession(const std::string& agent_id, const std::string& session_token,
                              const std::string& principal);
  void Disconnect(const std::string& agent_id);
  // Renews the agent's leases on `request_ids` (all of them when empty).
  void Heartbeat(const std::string& agent_id, int64_t unix_ms,
                 const std::vector<std::string>& request_ids = {});
  // The agent stops taking work; the requests it hands back go to other agents (not
  // counted as re-dispatches).
  void Drain(const std::string& agent_id, const std::vector<std::string>& handback_request_ids);
  // No more work for this agent (its leased requests finish); shown with `reason`.
  void Quarantine(const std::string& agent_id, const std::string& reason);
  void SetGoldenSeconds(const std::string& agent_id, double seconds);

  // Blocks until there is a request for this agent and it has a free worker (true:
  // the request is now leased to it), or until the agent is disconnected / the
  // registry shut down / `timeout_ms` (>= 0) passed (false).
  bool NextRequest(const std::string& agent_id, v1::MeasureRequest* request,
                   int timeout_ms = -1);
  // A result arrived from an agent. Completes the request when the agent holds its
  // lease; otherwise (late, duplicate, unknown) it is dropped.
  // A result is validated first: a success must carry costs that are finite and
  // positive and not faster than the request's plausible bound; otherwise it becomes a
  // runtime_error "result rejected by the server: ..." for that request (counted
  // against the agent like any error; never a failure of the job).
  void Complete(const std::string& agent_id, const v1::MeasureResult& result);

  // Queues a request for an agent of `device_key`, in `job`'s share (weight = job
  // priority); `done` is called exactly once. Returns false (and does not call
  // `done`) when no usable agent of that key is connected.
  // `min_plausible_seconds` (> 0): a successful result whose fastest sample is below
  // it is rejected (see Complete).
  bool Dispatch(const std::string& device_key, v1::MeasureRequest request, ResultCallback done,
                const std::string& job = "", int weight = 1, double min_plausible_seconds = 0);
  // Sends a request to this agent only (the golden kernel): not queued behind other
  // work, never re-dispatched (agent_lost when the agent goes away). False when the
  // agent is not connected.
  // `min_plausible_seconds` as for Dispatch.
  bool DispatchTo(const std::string& agent_id, v1::MeasureRequest request, ResultCallback done,
                  double min_plausible_seconds = 0);
  // Gives up on a request: `done` gets agent_lost with `why`; a later result is dropped.
  void Abandon(const std::string& request_id, const std::string& why);
  // The job is over: forget its fair-share state.
  void ForgetJob(const std::string& job);

  // Agents of the key that can take work (connected, responsive, not draining or
  // quarantined).
  int ConnectedAgents(const std::string& device_key) const;
  // Waits up to `timeout_ms` for such an agent; true when there is one.
  bool WaitForAgent(const std::string& device_key, int timeout_ms) const;
  // Connected agents, and lost ones for kLostRetentionMs after they went away.
  std::vector<AgentInfo> Agents() const;
  std::optional<AgentInfo> Find(const std::string& agent_id) const;
  static constexpr int64_t kLostRetentionMs = 3600 * 1000;

  struct Counters {
    int queued = 0;               // requests waiting for an agent
    int leased = 0;               // requests leased to agents
    int64_t redispatches = 0;     // lost leases given to another agent
    int64_t lease_expiries = 0;   // leases that ran out (no heartbeat / deadline)
    int64_t dropped_results = 0;  // late or duplicate results ignored
  };
  Counters Stats() const;

  // Ends the leases past their deadline (re-dispatch or agent_lost). The reaper thread
  // calls it every reap_interval_ms.
  void ReapExpiredLeases();
  // Fails every request with agent_lost, wakes every NextRequest with false; no new
  // dispatch succeeds.
  void Shutdown();

  const DispatchOptions& options() const { return options_; }

  // Metrics hooks (OnLease when a request is leased, OnResult when a result is
  // accepted or a request is given up as agent_lost). `observer` (not owned, may be
  // null) must be set before the first Dispatch and outlive the registry's use.
  // DispatchTo requests (golden-kernel checks) are not reported: they are health
  // checks, not measurements of a job.
  // Backlog snapshots for scrapes come from Stats() (queued, leased).
  void SetObserver(DispatchObserver* observer) { observer_ = observer; }

 private:
  struct Pending {
    v1::MeasureRequest request;
    ResultCallback done;
    std::string device_key;
    std::string job;
    int weight = 1;
    double min_plausible_seconds = 0;  // Dispatch's bound; 0 = none
    int attempts = 0;               // leases granted (hand-backs not counted)
    std::set<std::string> tried;    // agents that held it
    std::string pinned_agent;       // DispatchTo: this agent only
    std::string last_loss;          // why the last lease ended without a result
    // The latest lease, for the observer's lease-to-result time (real time at full
    // resolution, not the injectable millisecond clock); unset: never leased.
    std::optional<std::chrono::steady_clock::time_point> leased_at;
  };
  struct Agent {
    AgentInfo info;
    std::deque<std::string> pinned;    // DispatchTo requests, served first
    int64_t last_heartbeat_ms = 0;     // monotonic
    int64_t last_used = 0;
    std::string session_token;  // from Register; the stream must present it
    std::string principal;      // who registered it
    std::shared_ptr<std::condition_variable> cv = std::make_shared<std::condition_variable>();
    // Woken for queued work and not yet back in NextRequest: the next queued request
    // wakes another agent rather than this one again.
    bool wake_pending = false;
  };
  using Callbacks = std::vector<std::function<void()>>;

  int64_t Now() const;
  // Seconds from p's latest lease to now (0 if never leased), for the observer.
  double LeaseSecondsLocked(const Pending& p) const;
  // REQUIRES: mu_ held (for all *Locked).
  bool ResponsiveLocked(const Agent& a) const;
  bool UsableLocked(const Agent& a) const;
  // New work for `device_key`: wakes one agent that can take it (free slot, usable,
  // not in `tried`, not already woken), the least recently used; none when every
  // such agent is already on its way (it takes the next queued request when it runs).
  // One wake-up per request instead of every idle agent of the key per request: at
  // 100 agents the herd was most of the server's context switches.
  void NotifyKeyLocked(const std::string& device_key, const std::set<std::string>& tried = {});
  bool ConnectLocked(const std::string& agent_id);
  // The lease on `request_id` ended without a result; `counted`: it used one of the
  // request's attempts (a hand-back does not).
  void RequeueLocked(const std::string& request_id, bool counted, const std::string& why,
                     Callbacks* callbacks);
  // Fails queued requests of the key that no usable agent may take any more.
  void FailStrandedLocked(const std::string& device_key, Callbacks* callbacks);
  void FailLocked(const std::string& request_id, const std::string& why, Callbacks* callbacks);
  // The agent lost a lease (disconnect / expiry): bookkeeping on the agent.
  void LeaseEndedLocked(const std::string& agent_id);
  static void Run(Callbacks* callbacks);

  const DispatchOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable agents_cv_;  // an agent became usable, or shutdown
  std::map<std::string, Agent> agents_;       // GUARDED_BY(mu_)
  std::map<std::string, Pending> pending_;    // GUARDED_BY(mu_), by request id
  FairQueue queue_;                           // GUARDED_BY(mu_)
  LeaseTable leases_;                         // GUARDED_BY(mu_)
  Counters counters_;                         // GUARDED_BY(mu_), queued/leased unused
  int64_t next_agent_ = 1;                    // GUARDED_BY(mu_)
  int64_t use_counter_ = 0;                   // GUARDED_BY(mu_)
  bool shutdown_ = false;                     // GUARDED_BY(mu_)
  DispatchObserver* observer_ = nullptr;      // set before use, then read-only

  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool reaper_stop_ = false;  // GUARDED_BY(reaper_mu_)
  std::thread reaper_;
};

}  // namespace tuneforge
