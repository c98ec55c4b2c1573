// LeaseTable: which agent holds which MeasureRequest, and until when.
//
// A lease ends at the earlier of two deadlines:
//   hard     = granted + the request's timeout + grace: no measurement may take longer
//              (bounds an agent whose heartbeats go on while its worker is stuck);
//   liveness = last renewal + liveness_ms: heartbeats naming the request renew it, so an
//              agent that is killed, hung (SIGSTOP) or cut off loses its leases after a
//              few missed heartbeats, however long the request's timeout is.
// Times are milliseconds on a monotonic clock supplied by the caller, so the table is
// tested without sleeping.
//
// Not thread-safe; owned by AgentRegistry and used under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tuneforge {

struct Lease {
  std::string request_id;
  std::string agent_id;
  int64_t granted_ms = 0;
  int64_t hard_deadline_ms = 0;
  int64_t renewed_ms = 0;
};

class LeaseTable {
 public:
  explicit LeaseTable(int64_t liveness_ms) : liveness_ms_(liveness_ms) {}

  // Leases `request_id` to `agent_id` (replacing any earlier lease on it).
  void Grant(const std::string& request_id, const std::string& agent_id, int64_t now_ms,
             int64_t hard_deadline_ms);
  // Ends the lease if `agent_id` holds it (its result arrived): true. False for a
  // late or duplicate result: the lease is elsewhere or gone.
  bool Release(const std::string& request_id, const std::string& agent_id);
  // Ends the lease on `request_id` whoever holds it; returns it, if there was one.
  std::optional<Lease> Revoke(const std::string& request_id);
  // A heartbeat from `agent_id`: renews the named leases it holds, or all of its
  // leases when `request_ids` is empty. Returns how many were renewed.
  int Renew(const std::string& agent_id, const std::vector<std::string>& request_ids,
            int64_t now_ms);
  // Ends and returns the leases whose deadline is before `now_ms`.
  std::vector<Lease> TakeExpired(int64_t now_ms);
  // Ends and returns every lease of `agent_id` (the agent is gone).
  std::vector<Lease> TakeAll(const std::string& agent_id);

  int Held(const std::string& agent_id) const;
  std::optional<std::string> Holder(const std::string& request_id) const;
  size_t size() const { return leases_.size(); }
  int64_t Deadline(const Lease& lease) const;
  int64_t liveness_ms() const { return liveness_ms_; }

 private:
  const int64_t liveness_ms_;
  std::map<std::string, Lease> leases_;  // by request id
};

}  // namespace tuneforge
