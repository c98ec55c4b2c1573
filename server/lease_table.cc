// LeaseTable: which agent holds which MeasureRequest, until when.
#include "server/lease_table.h"

#include <algorithm>

namespace tuneforge {

void LeaseTable::Grant(const std::string& request_id, const std::string& agent_id, int64_t now_ms,
                       int64_t hard_deadline_ms) {
  leases_[request_id] = Lease{request_id, agent_id, now_ms, hard_deadline_ms, now_ms};
}

bool LeaseTable::Release(const std::string& request_id, const std::string& agent_id) {
  auto it = leases_.find(request_id);
  if (it == leases_.end() || it->second.agent_id != agent_id) return false;
  leases_.erase(it);
  return true;
}

std::optional<Lease> LeaseTable::Revoke(const std::string& request_id) {
  auto it = leases_.find(request_id);
  if (it == leases_.end()) return std::nullopt;
  Lease lease = std::move(it->second);
  leases_.erase(it);
  return lease;
}

int LeaseTable::Renew(const std::string& agent_id, const std::vector<std::string>& request_ids,
                      int64_t now_ms) {
  int renewed = 0;
  auto renew = [&](Lease& lease) {
    lease.renewed_ms = std::max(lease.renewed_ms, now_ms);
    ++renewed;
  };
  if (request_ids.empty()) {
    for (auto& [id, lease] : leases_)
      if (lease.agent_id == agent_id) renew(lease);
    return renewed;
  }
  for (const std::string& id : request_ids) {
    auto it = leases_.find(id);
    if (it != leases_.end() && it->second.agent_id == agent_id) renew(it->second);
  }
  return renewed;
}

int64_t LeaseTable::Deadline(const Lease& lease) const {
  return std::min(lease.hard_deadline_ms, lease.renewed_ms + liveness_ms_);
}

std::vector<Lease> LeaseTable::TakeExpired(int64_t now_ms) {
  std::vector<Lease> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (Deadline(it->second) < now_ms) {
      out.push_back(std::move(it->second));
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<Lease> LeaseTable::TakeAll(const std::string& agent_id) {
  std::vector<Lease> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.agent_id == agent_id) {
      out.push_back(std::move(it->second));
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

int LeaseTable::Held(const std::string& agent_id) const {
  int n = 0;
  for (const auto& [id, lease] : leases_) n += lease.agent_id == agent_id;
  return n;
}

std::optional<std::string> LeaseTable::Holder(const std::string& request_id) const {
  auto it = leases_.find(request_id);
  if (it == leases_.end()) return std::nullopt;
  return it->second.agent_id;
}

}  // namespace tuneforge
