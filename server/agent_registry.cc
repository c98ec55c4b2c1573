// AgentRegistry: connected agents by DeviceKey and their leased requests.
#include "server/agent_registry.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "compiler/support/clock.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "server/auth.h"

namespace tuneforge {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A request without a timeout gets the agent's default one (measure_agent: 10 s).
constexpr int64_t kDefaultRequestTimeoutMs = 10000;

}  // namespace

absl::Status DispatchOptions::Validate() const {
  auto range = [](const char* name, int v, int lo, int hi) {
    if (v >= lo && v <= hi) return absl::OkStatus();
    return absl::InvalidArgumentError(std::string(name) + " must be in [" + std::to_string(lo) +
                                      ", " + std::to_string(hi) + "], got " + std::to_string(v));
  };
  RETURN_IF_ERROR(range("max re-dispatches", max_redispatch, 0, 10));
  RETURN_IF_ERROR(range("heartbeat interval (ms)", heartbeat_interval_ms, 50, 60000));
  RETURN_IF_ERROR(range("missed heartbeats", missed_heartbeats, 2, 100));
  RETURN_IF_ERROR(range("lease grace (ms)", lease_grace_ms, 0, 3600 * 1000));
  RETURN_IF_ERROR(range("reap interval (ms)", reap_interval_ms, 0, 10000));
  return absl::OkStatus();
}

std::string AgentInfo::State() const {
  if (!connected || !responsive) return "lost";
  if (quarantined) return "quarantined";
  if (checking) return "checking";
  if (draining) return "draining";
  return in_flight > 0 ? "busy" : "idle";
}

AgentRegistry::AgentRegistry(DispatchOptions options)
    : options_(std::move(options)),
      leases_(int64_t{options_.heartbeat_interval_ms} * options_.missed_heartbeats) {
  absl::Status valid = options_.Validate();
  TF_CHECK(valid.ok(), valid.ToString());
  if (options_.reap_interval_ms > 0) {
    reaper_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(reaper_mu_);
      while (!reaper_cv_.wait_for(lock, std::chrono::milliseconds(options_.reap_interval_ms),
                                  [this] { return reaper_stop_; })) {
        lock.unlock();
        ReapExpiredLeases();
        lock.lock();
      }
    });
  }
}

AgentRegistry::~AgentRegistry() {
  Shutdown();
  {
    std::lock_guard<std::mutex> lock(reaper_mu_);
    reaper_stop_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

double AgentRegistry::LeaseSecondsLocked(const Pending& p) const {
  if (!p.leased_at) return 0.0;
  return SecondsSince(*p.leased_at);
}

int64_t AgentRegistry::Now() const { return options_.clock_ms ? options_.clock_ms() : SteadyMs(); }

void AgentRegistry::Run(Callbacks* callbacks) {
  for (auto& cb : *callbacks) cb();
  callbacks->clear();
}

bool AgentRegistry::ResponsiveLocked(const Agent& a) const {
  return Now() - a.last_heartbeat_ms <= leases_.liveness_ms();
}

bool AgentRegistry::UsableLocked(const Agent& a) const {
  return a.info.connected && !a.info.draining && !a.info.quarantined && !a.info.checking &&
         ResponsiveLocked(a);
}

void AgentRegistry::NotifyKeyLocked(const std::string& device_key,
                                    const std::set<std::string>& tried) {
  Agent* pick = nullptr;
  for (auto& [id, a] : agents_) {
    if (a.info.device_key != device_key || a.info.in_flight >= a.info.workers || a.wake_pending ||
        !UsableLocked(a) || tried.count(id) != 0) {
      continue;
    }
    if (!pick || a.last_used < pick->last_used) pick = &a;
  }
  if (!pick) return;
  pick->wake_pending = true;
  pick->cv->notify_one();
}

std::string AgentRegistry::Register(const std::string& device_key,
                                    const v1::AgentCapabilities& caps, int workers,
                                    bool checking, const std::string& principal,
                                    std::string* session_token) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = "agent-" + std::to_string(next_agent_++);
  Agent& a = agents_[id];
  a.info.id = id;
  a.info.device_key = device_key;
  a.info.capabilities = caps;
  a.info.workers = std::clamp(workers, 1, 256);
  a.info.checking = checking;
  if (checking) a.info.state_reason = "running the golden kernel";
  a.principal = principal;
  a.session_token = RandomToken();
  if (session_token) *session_token = a.session_token;
  return id;
}

void AgentRegistry::PassCheck(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || !it->second.info.checking) return;
  Agent& a = it->second;
  a.info.checking = false;
  if (!a.info.quarantined) a.info.state_reason.clear();
  a.cv->notify_one();
  agents_cv_.notify_all();
}

bool AgentRegistry::Connect(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return ConnectLocked(agent_id);
}

bool AgentRegistry::ConnectLocked(const std::string& agent_id) {
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || shutdown_ || it->second.info.disconnected_unix_ms != 0) return false;
  Agent& a = it->second;
  a.info.connected = true;
  a.last_heartbeat_ms = Now();  // connecting counts as being heard from
  a.info.last_heartbeat_unix_ms = NowUnixMs();
  agents_cv_.notify_all();
  return true;
}

AgentRegistry::SessionCheck AgentRegistry::ConnectSession(const std::string& agent_id,
                                                          const std::string& session_token,
                                                          const std::string& principal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return SessionCheck::kUnknown;
  const Agent& a = it->second;
  if (!SameSecret(a.session_token, session_token)) return SessionCheck::kWrongSession;
  if (a.principal != principal) return SessionCheck::kWrongPrincipal;
  if (a.info.connected) return SessionCheck::kAlreadyConnected;
  return ConnectLocked(agent_id) ? SessionCheck::kOk : SessionCheck::kUnknown;
}

void AgentRegistry::LeaseEndedLocked(const std::string& agent_id) {
  auto a = agents_.find(agent_id);
  if (a != agents_.end() && a->second.info.in_flight > 0) {
    --a->second.info.in_flight;
    a->second.cv->notify_one();
  }
}

void AgentRegistry::Disconnect(const std::string& agent_id) {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end() || !it->second.info.connected) return;
    Agent& agent = it->second;
    agent.info.connected = false;
    agent.info.state_reason = "disconnected";
    agent.info.disconnected_unix_ms = NowUnixMs();
    for (const std::string& id : agent.pinned) {
      FailLocked(id, "agent " + agent_id + " disconnected", &callbacks);
    }
    agent.pinned.clear();
    for (const Lease& lease : leases_.TakeAll(agent_id)) {
      LeaseEndedLocked(agent_id);
      RequeueLocked(lease.request_id, /*counted=*/true, "agent " + agent_id + " disconnected",
                    &callbacks);
    }
    FailStrandedLocked(agent.info.device_key, &callbacks);
    agent.cv->notify_all();
    // Lost agents stay listed for `farm status` for a while; a reconnecting agent
    // registers anew.
    int64_t now = NowUnixMs();
    for (auto a = agents_.begin(); a != agents_.end();) {
      bool expired = !a->second.info.connected && a->second.info.disconnected_unix_ms != 0 &&
                     a->second.info.disconnected_unix_ms + kLostRetentionMs < now;
      a = expired ? agents_.erase(a) : std::next(a);
    }
  }
  Run(&callbacks);
}

void AgentRegistry::Heartbeat(const std::string& agent_id, int64_t unix_ms,
                              const std::vector<std::string>& request_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || !it->second.info.connected) return;
  Agent& a = it->second;
  bool was_responsive = ResponsiveLocked(a);
  a.last_heartbeat_ms = Now();
  a.info.last_heartbeat_unix_ms = unix_ms;
  leases_.Renew(agent_id, request_ids, a.last_heartbeat_ms);
  if (!was_responsive) {
    TF_LOG(Info) << "agent " << agent_id << " is heard from again";
    a.cv->notify_one();
    agents_cv_.notify_all();
  }
}

void AgentRegistry::Drain(const std::string& agent_id,
                          const std::vector<std::string>& handback_request_ids) {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end()) return;
    Agent& a = it->second;
    if (!a.info.draining) TF_LOG(Info) << "agent " << agent_id << " is draining";
    a.info.draining = true;
    a.info.state_reason = "stopping: finishes its requests, takes no new ones";
    for (const std::string& id : handback_request_ids) {
      if (!leases_.Release(id, agent_id)) continue;
      LeaseEndedLocked(agent_id);
      RequeueLocked(id, /*counted=*/false, "handed back by draining agent " + agent_id,
                    &callbacks);
    }
    FailStrandedLocked(a.info.device_key, &callbacks);
  }
  Run(&callbacks);
}

void AgentRegistry::Quarantine(const std::string& agent_id, const std::string& reason) {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end() || it->second.info.quarantined) return;
    TF_LOG(Warning) << "agent " << agent_id << " quarantined: " << reason;
    it->second.info.quarantined = true;
    it->second.info.state_reason = reason;
    FailStrandedLocked(it->second.info.device_key, &callbacks);
  }
  Run(&callbacks);
}

void AgentRegistry::SetGoldenSeconds(const std::string& agent_id, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it != agents_.end()) it->second.info.golden_seconds = seconds;
}

bool AgentRegistry::NextRequest(const std::string& agent_id, v1::MeasureRequest* request,
                                int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto it = agents_.find(agent_id);
    if (shutdown_ || it == agents_.end() || !it->second.info.connected) return false;
    Agent& agent = it->second;
    agent.wake_pending = false;
    std::shared_ptr<std::condition_variable> cv = agent.cv;
    if (agent.info.in_flight < agent.info.workers && !agent.info.draining &&
        ResponsiveLocked(agent)) {
      std::optional<std::string> id;
      if (!agent.pinned.empty()) {
        id = std::move(agent.pinned.front());
        agent.pinned.pop_front();
      } else if (!agent.info.quarantined && !agent.info.checking) {
        id = queue_.Pop(agent.info.device_key, [&](const std::string& rid) {
          auto p = pending_.find(rid);
          return p != pending_.end() && p->second.tried.count(agent_id) == 0;
        });
      }
      auto p = id ? pending_.find(*id) : pending_.end();
      if (p != pending_.end()) {
        Pending& pending = p->second;
        int64_t now = Now();
        int64_t timeout = pending.request.options().timeout_ms() > 0
                              ? pending.request.options().timeout_ms()
                              : kDefaultRequestTimeoutMs;
        leases_.Grant(*id, agent_id, now, now + timeout + options_.lease_grace_ms);
        if (observer_ && pending.pinned_agent.empty()) {
          observer_->OnLease(/*redispatch=*/pending.attempts > 0);  // a lost lease before
        }
        pending.leased_at = std::chrono::steady_clock::now();
        ++pending.attempts;
        pending.tried.insert(agent_id);
        ++agent.info.in_flight;
        agent.last_used = ++use_counter_;
        *request = pending.request;
        request->set_lease_deadline_unix_ms(NowUnixMs() + timeout + options_.lease_grace_ms);
        return true;
      }
      if (id) continue;  // completed or abandoned meanwhile; look again
    }
    // Timed: responsiveness changes with the clock alone.
    auto wake = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    if (timeout_ms >= 0) {
      if (std::chrono::steady_clock::now() >= give_up) return false;
      wake = std::min(wake, give_up);
    }
    cv->wait_until(lock, wake);
  }
}

namespace {

// Why a reported success cannot be a measurement ("" when it can).
std::string ImplausibleResult(const v1::MeasureResult& r, double min_seconds) {
  if (r.error() != v1::NONE) return "";
  if (r.costs_size() == 0) return "success without costs";
  for (double c : r.costs()) {
    if (!std::isfinite(c)) return "a cost that is not a finite number";
    if (c <= 0) return "a cost of " + std::to_string(c) + " s (must be positive)";
    if (c < min_seconds) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "a cost of %.3g s, faster than the target's plausible peak allows (%.3g s)", c,
                    min_seconds);
      return text;
    }
  }
  return "";
}

}  // namespace

void AgentRegistry::Complete(const std::string& agent_id, const v1::MeasureResult& reported) {
  ResultCallback done;
  Callbacks callbacks;
  v1::MeasureResult result = reported;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leases_.Release(result.request_id(), agent_id)) {
      ++counters_.dropped_results;
      TF_LOG(Warning) << "dropping result for request " << result.request_id() << " from "
                      << agent_id << ": it holds no lease on it (late, duplicate or unknown)";
      return;
    }
    LeaseEndedLocked(agent_id);
    auto a = agents_.find(agent_id);
    if (result.error() == v1::AGENT_LOST) {
      // An agent that gives a request up (it is stopping) hands it back.
      RequeueLocked(result.request_id(), /*counted=*/false,
                    "given up by agent " + agent_id + ": " + result.error_message(), &callbacks);
      if (a != agents_.end()) FailStrandedLocked(a->second.info.device_key, &callbacks);
    } else {
      auto p = pending_.find(result.request_id());
      TF_CHECK(p != pending_.end(), "lease without a pending request ", result.request_id());
      const std::string bad = ImplausibleResult(result, p->second.min_plausible_seconds);
      if (!bad.empty()) {
        TF_LOG(Warning) << "agent " << agent_id << ": result for " << result.request_id()
                        << " rejected: " << bad;
        result.set_error(v1::RUNTIME_ERROR);
        result.set_error_message("result rejected by the server: " + bad);
        result.clear_costs();
      }
      if (a != agents_.end()) {
        ++a->second.info.measurements;
        if (result.error() != v1::NONE) ++a->second.info.errors;
      }
      if (observer_ && p->second.pinned_agent.empty()) {
        observer_->OnResult(result.error(), LeaseSecondsLocked(p->second));
      }
      done = std::move(p->second.done);
      pending_.erase(p);
    }
  }
  Run(&callbacks);
  if (done) done(result);
}

void AgentRegistry::RequeueLocked(const std::string& request_id, bool counted,
                                  const std::string& why, Callbacks* callbacks) {
  auto p = pending_.find(request_id);
  if (p == pending_.end()) return;
  Pending& pending = p->second;
  pending.last_loss = why;
  if (!pending.pinned_agent.empty()) {
    FailLocked(request_id, why, callbacks);
    return;
  }
  if (!counted) {
    --pending.attempts;
  } else if (pending.attempts > options_.max_redispatch) {
    FailLocked(request_id,
               why + "; given up after " + std::to_string(pending.attempts) + " agents lost it",
               callbacks);
    return;
  } else {
    ++counters_.redispatches;
  }
  TF_LOG(Warning) << "request " << request_id << ": " << why << "; queued for another agent";
  queue_.Push(request_id, pending.device_key, pending.job, pending.weight, /*front=*/true);
  NotifyKeyLocked(pending.device_key, pending.tried);
}

void AgentRegistry::FailStrandedLocked(const std::string& device_key, Callbacks* callbacks) {
  std::vector<const Agent*> usable;
  for (const auto& [id, a] : agents_)
    if (a.info.device_key == device_key && UsableLocked(a)) usable.push_back(&a);
  // With no usable agent at all, requests wait for one (the job says so).
  if (usable.empty()) return;
  for (const std::string& id : queue_.Queued(device_key)) {
    const Pending& p = pending_.at(id);
    if (p.tried.empty()) continue;
    bool someone = std::any_of(usable.begin(), usable.end(),
                               [&](const Agent* a) { return p.tried.count(a->info.id) == 0; });
    if (someone) continue;
    queue_.Remove(id);
    FailLocked(id,
               p.last_loss + "; no other agent of device key '" + device_key + "' to run it",
               callbacks);
  }
}

void AgentRegistry::FailLocked(const std::string& request_id, const std::string& why,
                               Callbacks* callbacks) {
  auto p = pending_.find(request_id);
  if (p == pending_.end()) return;
  queue_.Remove(request_id);
  v1::MeasureResult result;
  result.set_request_id(request_id);
  result.set_error(v1::AGENT_LOST);
  result.set_error_message(why);
  int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  result.set_start_unix_us(now);
  result.set_end_unix_us(now);
  if (observer_ && p->second.pinned_agent.empty()) {
    observer_->OnResult(v1::AGENT_LOST, LeaseSecondsLocked(p->second));
  }
  ResultCallback done = std::move(p->second.done);
  pending_.erase(p);
  TF_LOG(Warning) << "request " << request_id << " recorded as agent_lost: " << why;
  callbacks->push_back([done, result] { done(result); });
}

bool AgentRegistry::Dispatch(const std::string& device_key, v1::MeasureRequest request,
                             ResultCallback done, const std::string& job, int weight,
                             double min_plausible_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return false;
  bool any = std::any_of(agents_.begin(), agents_.end(), [&](const auto& entry) {
    return entry.second.info.device_key == device_key && UsableLocked(entry.second);
  });
  if (!any) return false;
  std::string id = request.request_id();
  TF_CHECK(pending_.count(id) == 0, "request id ", id, " dispatched twice");
  Pending& p = pending_[id];
  p.request = std::move(request);
  p.done = std::move(done);
  p.device_key = device_key;
  p.job = job;
  p.weight = std::max(1, weight);
  p.min_plausible_seconds = std::max(0.0, min_plausible_seconds);
  queue_.Push(id, device_key, job, p.weight);
  NotifyKeyLocked(device_key);
  return true;
}

bool AgentRegistry::DispatchTo(const std::string& agent_id, v1::MeasureRequest request,
                               ResultCallback done, double min_plausible_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (shutdown_ || it == agents_.end() || !it->second.info.connected) return false;
  std::string id = request.request_id();
  TF_CHECK(pending_.count(id) == 0, "request id ", id, " dispatched twice");
  Pending& p = pending_[id];
  p.request = std::move(request);
  p.done = std::move(done);
  p.device_key = it->second.info.device_key;
  p.pinned_agent = agent_id;
  p.min_plausible_seconds = std::max(0.0, min_plausible_seconds);
  it->second.pinned.push_back(id);
  it->second.cv->notify_one();
  return true;
}

void AgentRegistry::Abandon(const std::string& request_id, const std::string& why) {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::optional<Lease> lease = leases_.Revoke(request_id)) LeaseEndedLocked(lease->agent_id);
    FailLocked(request_id, why, &callbacks);
  }
  Run(&callbacks);
}

void AgentRegistry::ForgetJob(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.ForgetJob(job);
}

void AgentRegistry::ReapExpiredLeases() {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t now = Now();
    std::set<std::string> keys;
    for (const Lease& lease : leases_.TakeExpired(now)) {
      ++counters_.lease_expiries;
      LeaseEndedLocked(lease.agent_id);
      std::string why;
      auto a = agents_.find(lease.agent_id);
      if (a != agents_.end()) {
        ++a->second.info.lease_expiries;
        keys.insert(a->second.info.device_key);
      }
      if (now > lease.hard_deadline_ms) {
        why = "lease on agent " + lease.agent_id + " expired: no result within the request's " +
              "timeout + " + std::to_string(options_.lease_grace_ms) + " ms";
      } else {
        why = "lease on agent " + lease.agent_id + " expired: no heartbeat for " +
              std::to_string(now - lease.renewed_ms) + " ms";
      }
      RequeueLocked(lease.request_id, /*counted=*/true, why, &callbacks);
    }
    for (const std::string& key : keys) FailStrandedLocked(key, &callbacks);
  }
  Run(&callbacks);
}

int AgentRegistry::ConnectedAgents(const std::string& device_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [id, a] : agents_) n += a.info.device_key == device_key && UsableLocked(a);
  return n;
}

bool AgentRegistry::WaitForAgent(const std::string& device_key, int timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  return agents_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    if (shutdown_) return true;
    for (const auto& [id, a] : agents_)
      if (a.info.device_key == device_key && UsableLocked(a)) return true;
    return false;
  }) && !shutdown_;
}

std::vector<AgentInfo> AgentRegistry::Agents() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AgentInfo> out;
  for (const auto& [id, a] : agents_) {
    AgentInfo info = a.info;
    info.responsive = !info.connected || ResponsiveLocked(a);
    if (info.connected && !info.responsive) {
      info.state_reason = "no heartbeat for " + std::to_string(Now() - a.last_heartbeat_ms) + " ms";
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::optional<AgentInfo> AgentRegistry::Find(const std::string& agent_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return std::nullopt;
  return it->second.info;
}

AgentRegistry::Counters AgentRegistry::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.queued = static_cast<int>(queue_.size());
  c.leased = static_cast<int>(leases_.size());
  return c;
}

void AgentRegistry::Shutdown() {
  Callbacks callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
    std::vector<std::string> ids;
    for (const auto& [id, p] : pending_) ids.push_back(id);
    for (const std::string& id : ids) {
      if (std::optional<Lease> lease = leases_.Revoke(id)) LeaseEndedLocked(lease->agent_id);
      FailLocked(id, "server shutting down", &callbacks);
    }
    for (auto& [id, a] : agents_) a.cv->notify_all();
    agents_cv_.notify_all();
  }
  Run(&callbacks);
}

}  // namespace tuneforge
