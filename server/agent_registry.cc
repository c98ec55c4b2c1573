#include "server/agent_registry.h"

#include <chrono>

#include "compiler/support/log.h"

namespace tuneforge {
namespace {
int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

std::string AgentInfo::State() const {
  if (!connected) return "lost";
  return in_flight > 0 ? "busy" : "idle";
}

std::string AgentRegistry::Register(const std::string& device_key,
                                    const v1::AgentCapabilities& caps) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = "agent-" + std::to_string(next_agent_++);
  Agent& a = agents_[id];
  a.info.id = id;
  a.info.device_key = device_key;
  a.info.capabilities = caps;
  return id;
}

bool AgentRegistry::Connect(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it == agents_.end() || shutdown_) return false;
  it->second.info.connected = true;
  cv_.notify_all();
  return true;
}

void AgentRegistry::Disconnect(const std::string& agent_id) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = agents_.find(agent_id);
    if (it == agents_.end() || !it->second.info.connected) return;
    Agent& agent = it->second;
    agent.info.connected = false;
    agent.queue.clear();
    // Everything this agent held goes to another agent of its key, once.
    for (auto& [id, p] : pending_) {
      if (p.agent_id != agent_id) continue;
      Agent* other = p.dispatches < 2 ? PickLocked(agent.info.device_key, agent_id) : nullptr;
      if (other) {
        p.agent_id = other->info.id;
        ++p.dispatches;
        p.leased_at = std::chrono::steady_clock::now();
        if (observer_) observer_->OnLease(/*redispatch=*/true);
        ++other->info.in_flight;
        other->queue.push_back(id);
        TF_LOG(Warning) << "agent " << agent_id << " lost; request " << id << " re-dispatched to "
                        << other->info.id;
      } else {
        p.agent_id.clear();
      }
    }
    for (auto it2 = pending_.begin(); it2 != pending_.end();) {
      auto next = std::next(it2);
      if (it2->second.agent_id.empty()) FailLocked(it2->first, "agent " + agent_id + " disconnected", &callbacks);
      it2 = next;
    }
    agent.info.in_flight = 0;
    // Kept (as lost) for `farm status`; a reconnecting agent registers anew.
    agent.info.disconnected_unix_ms = NowUnixMs();
    for (auto a = agents_.begin(); a != agents_.end();) {
      bool expired = !a->second.info.connected &&
                     a->second.info.disconnected_unix_ms + kLostRetentionMs < NowUnixMs();
      a = expired ? agents_.erase(a) : std::next(a);
    }
    cv_.notify_all();
  }
  for (auto& cb : callbacks) cb();
}

void AgentRegistry::Heartbeat(const std::string& agent_id, int64_t unix_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agents_.find(agent_id);
  if (it != agents_.end()) it->second.info.last_heartbeat_unix_ms = unix_ms;
}

bool AgentRegistry::NextRequest(const std::string& agent_id, v1::MeasureRequest* request) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = agents_.find(agent_id);
    if (shutdown_ || it == agents_.end() || !it->second.info.connected) return false;
    Agent& agent = it->second;
    while (!agent.queue.empty()) {
      std::string id = agent.queue.front();
      agent.queue.pop_front();
      auto p = pending_.find(id);
      if (p == pending_.end()) continue;  // completed or failed meanwhile
      *request = p->second.request;
      return true;
    }
    cv_.wait(lock);
  }
}

void AgentRegistry::Complete(const std::string& agent_id, const v1::MeasureResult& result) {
  ResultCallback done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto p = pending_.find(result.request_id());
    if (p == pending_.end() || p->second.agent_id != agent_id) {
      TF_LOG(Warning) << "dropping result for unknown or re-dispatched request "
                      << result.request_id() << " from " << agent_id;
      return;
    }
    done = std::move(p->second.done);
    if (observer_) observer_->OnResult(result.error(), SecondsSince(p->second.leased_at));
    pending_.erase(p);
    auto a = agents_.find(agent_id);
    if (a != agents_.end()) {
      --a->second.info.in_flight;
      ++a->second.info.measurements;
      if (result.error() != v1::NONE) ++a->second.info.errors;
    }
    cv_.notify_all();
  }
  done(result);
}

AgentRegistry::Agent* AgentRegistry::PickLocked(const std::string& device_key,
                                                const std::string& exclude) {
  Agent* best = nullptr;
  for (auto& [id, a] : agents_) {
    if (!a.info.connected || a.info.device_key != device_key || id == exclude) continue;
    if (!best || a.info.in_flight < best->info.in_flight ||
        (a.info.in_flight == best->info.in_flight && a.last_used < best->last_used))
      best = &a;
  }
  if (best) best->last_used = ++use_counter_;
  return best;
}

void AgentRegistry::FailLocked(const std::string& request_id, const std::string& why,
                               std::vector<std::function<void()>>* callbacks) {
  auto p = pending_.find(request_id);
  if (p == pending_.end()) return;
  v1::MeasureResult result;
  result.set_request_id(request_id);
  result.set_error(v1::AGENT_LOST);
  result.set_error_message(why);
  int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  result.set_start_unix_us(now);
  result.set_end_unix_us(now);
  ResultCallback done = std::move(p->second.done);
  if (observer_) observer_->OnResult(v1::AGENT_LOST, SecondsSince(p->second.leased_at));
  pending_.erase(p);
  callbacks->push_back([done, result] { done(result); });
}

bool AgentRegistry::Dispatch(const std::string& device_key, v1::MeasureRequest request,
                             ResultCallback done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return false;
  Agent* agent = PickLocked(device_key, "");
  if (!agent) return false;
  std::string id = request.request_id();
  Pending& p = pending_[id];
  p.request = std::move(request);
  p.done = std::move(done);
  p.agent_id = agent->info.id;
  p.dispatches = 1;
  p.leased_at = std::chrono::steady_clock::now();
  if (observer_) observer_->OnLease(/*redispatch=*/false);
  ++agent->info.in_flight;
  agent->queue.push_back(id);
  cv_.notify_all();
  return true;
}

void AgentRegistry::Abandon(const std::string& request_id, const std::string& why) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto p = pending_.find(request_id);
    if (p == pending_.end()) return;
    auto a = agents_.find(p->second.agent_id);
    if (a != agents_.end()) --a->second.info.in_flight;
    FailLocked(request_id, why, &callbacks);
  }
  for (auto& cb : callbacks) cb();
}

int AgentRegistry::ConnectedAgents(const std::string& device_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [id, a] : agents_) n += a.info.connected && a.info.device_key == device_key;
  return n;
}

bool AgentRegistry::WaitForAgent(const std::string& device_key, int timeout_ms) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    if (shutdown_) return true;
    for (const auto& [id, a] : agents_)
      if (a.info.connected && a.info.device_key == device_key) return true;
    return false;
  }) && !shutdown_;
}

std::vector<AgentInfo> AgentRegistry::Agents() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AgentInfo> out;
  for (const auto& [id, a] : agents_) out.push_back(a.info);
  return out;
}

AgentRegistry::Backlog AgentRegistry::GetBacklog() const {
  std::lock_guard<std::mutex> lock(mu_);
  Backlog b;
  for (const auto& [id, a] : agents_)
    for (const std::string& r : a.queue) b.queued += pending_.count(r);
  b.leased = static_cast<int64_t>(pending_.size()) - b.queued;
  return b;
}

void AgentRegistry::Shutdown() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    std::vector<std::string> ids;
    for (const auto& [id, p] : pending_) ids.push_back(id);
    for (const std::string& id : ids) FailLocked(id, "server shutting down", &callbacks);
    cv_.notify_all();
  }
  for (auto& cb : callbacks) cb();
}

}  // namespace tuneforge
