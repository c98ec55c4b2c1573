// FairQueue: the MeasureRequests waiting for an agent, by DeviceKey, one FIFO per job.
//
// Jobs that compete for the agents of a key share them by weight (the job priority)
// with stride scheduling: each job has a pass value; Pop serves the job with the
// smallest pass among those with a request the asking agent may take, and advances
// that job's pass by 1/weight. A job whose queue refills starts no earlier than the
// key's current virtual time, so idling earns no credit. With weights 2 and 1 the
// first job gets two requests for every one of the second; with equal weights they
// alternate. Ties go to the job queued first. Request ids are unique in the queue.
//
// Not thread-safe; owned by AgentRegistry and used under its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tuneforge {

class FairQueue {
 public:
  // Appends `request_id` to `job`'s queue for `device_key` (at the front when
  // `front`: a request coming back from a lost agent goes first). `weight` >= 1.
  void Push(const std::string& request_id, const std::string& device_key, const std::string& job,
            int weight, bool front = false);
  // The next request for an agent of `device_key`, among those `eligible` accepts
  // (e.g. not already tried by that agent); removed from the queue.
  std::optional<std::string> Pop(const std::string& device_key,
                                 const std::function<bool(const std::string&)>& eligible);
  // Drops a finished job's pass (and any request it still has queued). A job's pass
  // is kept while it runs, also while its queue is empty between batches, so that a
  // job cannot shed its share by pausing.
  void ForgetJob(const std::string& job);
  // Removes a queued request; false when it is not queued.
  bool Remove(const std::string& request_id);
  // The queued requests of a key, jobs in order of arrival.
  std::vector<std::string> Queued(const std::string& device_key) const;
  size_t size() const { return where_.size(); }

 private:
  struct JobQueue {
    std::deque<std::string> ids;
    double pass = 0;
    int weight = 1;
    int64_t order = 0;  // arrival of the job, for ties
  };
  struct KeyQueue {
    std::map<std::string, JobQueue> jobs;
    double virtual_time = 0;
  };
  std::map<std::string, KeyQueue> keys_;
  std::map<std::string, std::pair<std::string, std::string>> where_;  // id -> (key, job)
  int64_t next_order_ = 0;
};

}  // namespace tuneforge
